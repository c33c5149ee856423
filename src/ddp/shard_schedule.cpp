#include "ddp/shard_schedule.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace tandem {

ShardSchedule::ShardSchedule(std::vector<std::vector<int>> reads, int micro_batches, int prefetch,
                             bool reshard_after_forward)
    : reads_(std::move(reads)),
      events_per_micro_(2 * static_cast<int>(reads_.size())),
      events_(micro_batches * events_per_micro_),
      prefetch_(prefetch),
      reshard_after_forward_(reshard_after_forward),
      state_(reads_.size(), kAbsent) {
  TANDEM_CHECK(micro_batches >= 1 && prefetch >= 0 && !reads_.empty());
}

const std::vector<int>& ShardSchedule::needs(int event) const {
  const int i = event % events_per_micro_;
  const int n = events_per_micro_ / 2;
  return reads_[static_cast<std::size_t>(i < n ? i : events_per_micro_ - 1 - i)];
}

bool ShardSchedule::forward_event(int event) const {
  return event % events_per_micro_ < events_per_micro_ / 2;
}

std::vector<int> ShardSchedule::gathers_before(int event) {
  std::vector<int> out;
  for (int e = event; e <= std::min(event + prefetch_, events_ - 1); ++e) {
    for (int v : needs(e)) {
      if (state_[static_cast<std::size_t>(v)] != kAbsent) continue;
      state_[static_cast<std::size_t>(v)] = kGathering;
      out.push_back(v);
    }
  }
  return out;
}

std::vector<int> ShardSchedule::waits_before(int event) {
  std::vector<int> out;
  for (int v : needs(event)) {
    State& s = state_[static_cast<std::size_t>(v)];
    if (s == kResident) continue;
    TANDEM_CHECK(s == kGathering);  // gathers_before issued it
    s = kResident;
    out.push_back(v);
  }
  return out;
}

std::vector<int> ShardSchedule::releases_after(int event) {
  std::vector<int> out;
  if (!reshard_after_forward_ && forward_event(event)) return out;
  // A unit that the next event (or one within the prefetch window) reads again stays.
  const int window = std::max(1, prefetch_);
  for (int v : needs(event)) {
    bool soon = false;
    for (int e = event + 1; e <= std::min(event + window, events_ - 1) && !soon; ++e) {
      const std::vector<int>& next = needs(e);
      soon = std::find(next.begin(), next.end(), v) != next.end();
    }
    State& s = state_[static_cast<std::size_t>(v)];
    if (soon || s != kResident) continue;
    s = kAbsent;
    out.push_back(v);
  }
  return out;
}

void ShardSchedule::start_gather(int unit) {
  State& s = state_[static_cast<std::size_t>(unit)];
  TANDEM_CHECK(s == kAbsent);
  s = kGathering;
}

void ShardSchedule::finish_gather(int unit) {
  State& s = state_[static_cast<std::size_t>(unit)];
  TANDEM_CHECK(s == kGathering);
  s = kResident;
}

void ShardSchedule::release(int unit) { state_[static_cast<std::size_t>(unit)] = kAbsent; }

}  // namespace tandem
