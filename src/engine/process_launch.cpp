// One rank per process: train, align clocks, gather to rank 0.
#include "engine/process_launch.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "compute/cpu/blas.h"
#include "core/error.h"

namespace tandem {
namespace {

constexpr int kClockRounds = 50;

// Records travel as their bytes: every rank runs the same binary on the same
// architecture (a homogeneous job, as MPI_BYTE transfers assume).
static_assert(std::is_trivially_copyable_v<StepRecord>);
static_assert(std::is_trivially_copyable_v<Span>);

template <typename T>
void append(std::string& out, const std::vector<T>& items) {
  const std::uint64_t count = items.size();
  out.append(reinterpret_cast<const char*>(&count), sizeof count);
  out.append(reinterpret_cast<const char*>(items.data()), items.size() * sizeof(T));
}

template <typename T>
std::vector<T> take(std::string_view& in) {
  std::uint64_t count = 0;
  TANDEM_CHECK(in.size() >= sizeof count);
  std::memcpy(&count, in.data(), sizeof count);
  in.remove_prefix(sizeof count);
  TANDEM_CHECK(in.size() >= count * sizeof(T));
  std::vector<T> items(count);
  std::memcpy(items.data(), in.data(), count * sizeof(T));
  in.remove_prefix(count * sizeof(T));
  return items;
}

}  // namespace

std::int64_t to_rank0_clock(std::int64_t t_ns, const ClockOffset& before,
                            const ClockOffset& after) {
  // at_ns is on rank 0's clock; t_ns on this rank's, which differs by about the offset.
  const double a = static_cast<double>(before.at_ns + before.offset_ns);
  const double b = static_cast<double>(after.at_ns + after.offset_ns);
  double offset = static_cast<double>(before.offset_ns);
  if (b > a) {
    const double f = std::clamp((static_cast<double>(t_ns) - a) / (b - a), 0.0, 1.0);
    offset += f * static_cast<double>(after.offset_ns - before.offset_ns);
  }
  return t_ns - static_cast<std::int64_t>(offset);
}

TrainResult train_process(const TrainConfig& config, ProcessCommunicator& comm,
                          const StepCallback& on_step) {
  validate(config);
  set_blas_threads(config.blas_threads);
  return train_process_with(config, comm, train_span_capacity(config), [&](RankRecorder& recorder) {
    return train_rank(config, comm, recorder, on_step);
  });
}

TrainResult train_process_with(const TrainConfig& config, ProcessCommunicator& comm,
                               std::size_t span_capacity, const RankTraining& train) {
  TANDEM_CHECK_EQ(config.ranks, comm.size());
  RankRecorder recorder(comm.rank(), span_capacity, config.record);
  comm.set_recorder(&recorder);

  const std::vector<ClockOffset> before = comm.estimate_clock_offsets(kClockRounds);
  TrainResult mine = train(recorder);
  const std::vector<ClockOffset> after = comm.estimate_clock_offsets(kClockRounds);
  // Every operation has completed (the estimate ran after them): the comm lane is quiet.

  std::string payload;
  append(payload, mine.steps);
  append(payload, recorder.collect());
  append(payload, std::vector<std::uint64_t>{recorder.dropped()});
  const std::vector<std::string> all = comm.gather_bytes(payload, 0);
  comm.set_recorder(nullptr);

  TrainResult result;
  result.buckets = std::move(mine.buckets);
  result.final_params = std::move(mine.final_params);
  result.blas = mine.blas.empty() ? blas_description() : std::move(mine.blas);
  result.backend = std::string(comm.backend_name());
  result.backend_details = comm.describe();
  result.hosts = comm.hosts();
  result.ranks_per_host = comm.ranks_on_host();
  result.device = std::move(mine.device);
  result.device_details = std::move(mine.device_details);
  result.timing_source = std::move(mine.timing_source);
  if (comm.rank() != 0) {
    result.steps = std::move(mine.steps);
    return result;
  }

  result.timeline.ranks = comm.size();
  for (int r = 0; r < comm.size(); ++r) {
    const ClockOffset& b = before[static_cast<std::size_t>(r)];
    const ClockOffset& a = after[static_cast<std::size_t>(r)];
    result.clock_uncertainty_ns =
        std::max({result.clock_uncertainty_ns, b.uncertainty_ns, a.uncertainty_ns});
    std::string_view in = all[static_cast<std::size_t>(r)];
    for (StepRecord s : take<StepRecord>(in)) {
      s.start_ns = to_rank0_clock(s.start_ns, b, a);
      s.end_ns = to_rank0_clock(s.end_ns, b, a);
      result.steps.push_back(s);
    }
    for (Span s : take<Span>(in)) {
      s.start_ns = to_rank0_clock(s.start_ns, b, a);
      s.end_ns = to_rank0_clock(s.end_ns, b, a);
      // Names are ids into each process's own table; the engine records none.
      s.name = kNoName;
      result.timeline.spans.push_back(s);
    }
    for (std::uint64_t dropped : take<std::uint64_t>(in)) result.spans_dropped += dropped;
  }
  std::sort(result.steps.begin(), result.steps.end(), [](const auto& x, const auto& y) {
    return std::tie(x.step, x.rank) < std::tie(y.step, y.rank);
  });
  return result;
}

void abort_job_after(ProcessCommunicator& comm, const std::exception& error) {
  std::string what = error.what();
  std::replace(what.begin(), what.end(), '\n', ' ');
  const std::string prefix = "rank " + std::to_string(comm.rank()) + ": ";
  // Errors that already name their rank (timeouts, failed Works) are not prefixed twice.
  if (what.find("rank " + std::to_string(comm.rank())) != std::string::npos) {
    std::fprintf(stderr, "tandem: %s\n", what.c_str());
  } else {
    std::fprintf(stderr, "tandem: %s%s\n", prefix.c_str(), what.c_str());
  }
  comm.abort_job(1);
  std::abort();  // not reached: abort_job does not return
}

}  // namespace tandem
