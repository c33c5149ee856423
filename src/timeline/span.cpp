// Names of lanes and span kinds (used in traces, logs and reports) and the NameTable.
#include "timeline/span.h"

#include <array>
#include <string>

#include "core/error.h"

namespace tandem {
namespace {

constexpr std::array<std::string_view, kLaneCount> kLaneNames = {"compute", "comm", "wait", "idle"};

constexpr std::array<std::string_view, 14> kKindNames = {
    "forward", "backward", "optimizer", "allreduce", "reduce_scatter", "allgather", "broadcast",
    "barrier", "send",     "recv",      "wait",      "kernel",         "memory",    "other"};
static_assert(kKindNames.size() == static_cast<std::size_t>(SpanKind::kOther) + 1,
              "kKindNames must list every SpanKind in declaration order");

template <std::size_t N>
std::string join_names(const std::array<std::string_view, N>& names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

}  // namespace

std::string_view to_string(Lane lane) {
  const auto i = static_cast<std::size_t>(lane);
  return i < kLaneNames.size() ? kLaneNames[i] : "unknown";
}

std::uint32_t group_id(std::string_view key) {
  std::uint32_t hash = 2166136261u;
  for (const char c : key) hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
  return hash == 0 ? 1 : hash;
}

bool is_collective(SpanKind kind) {
  switch (kind) {
    case SpanKind::kAllreduce:
    case SpanKind::kReduceScatter:
    case SpanKind::kAllgather:
    case SpanKind::kBroadcast:
    case SpanKind::kBarrier:
      return true;
    default:
      return false;
  }
}

std::string_view to_string(SpanKind kind) {
  const auto i = static_cast<std::size_t>(kind);
  return i < kKindNames.size() ? kKindNames[i] : "unknown";
}

Lane parse_lane(std::string_view text) {
  for (std::size_t i = 0; i < kLaneNames.size(); ++i) {
    if (kLaneNames[i] == text) return static_cast<Lane>(i);
  }
  throw UsageError("unknown lane '" + std::string(text) + "' (expected one of " +
                   join_names(kLaneNames) + ")");
}

SpanKind parse_span_kind(std::string_view text) {
  for (std::size_t i = 0; i < kKindNames.size(); ++i) {
    if (kKindNames[i] == text) return static_cast<SpanKind>(i);
  }
  throw UsageError("unknown span kind '" + std::string(text) + "' (expected one of " +
                   join_names(kKindNames) + ")");
}

NameTable::NameTable() {
  // Id 0 is kNoName: the empty string, so name(kNoName) needs no special case.
  names_.push_back(std::make_unique<std::string>());
  ids_.emplace(std::string_view(*names_.back()), kNoName);
}

NameId NameTable::intern(std::string_view name) {
  std::lock_guard<std::mutex> lock(mutex_);
  // The map's keys view the heap strings owned by names_, which never move.
  if (auto it = ids_.find(name); it != ids_.end()) return it->second;
  const auto id = static_cast<NameId>(names_.size());
  names_.push_back(std::make_unique<std::string>(name));
  ids_.emplace(std::string_view(*names_.back()), id);
  return id;
}

const std::string& NameTable::name(NameId id) const {
  // The lock guards the vector, which may reallocate under a concurrent intern(); the
  // returned string itself lives on the heap and stays valid for the table's lifetime.
  // Lookups are not on any hot path (reports and traces), so the lock costs nothing.
  std::lock_guard<std::mutex> lock(mutex_);
  TANDEM_CHECK(id < names_.size());
  return *names_[id];
}

std::size_t NameTable::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return names_.size();
}

}  // namespace tandem
