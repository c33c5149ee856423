// The launcher (launch.h): threads of one process, or this process's rank of a job.
#include "engine/launch.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "core/affinity.h"
#include "core/bytes.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/parse.h"
#include "core/thread_name.h"
#include "model/rank_model.h"

namespace tandem {
namespace {

constexpr int kClockRounds = 50;

// The first failure of a run; one that is only the consequence of an abort yields to
// the failure that caused it.
class FirstFailure {
 public:
  // True if `error` is now the failure to report.
  bool offer(std::exception_ptr error) {
    std::lock_guard lock(mutex_);
    const bool aborted = is_aborted(error);
    if (error_ != nullptr && (aborted || !error_aborted_)) return false;
    error_ = error;
    error_aborted_ = aborted;
    return true;
  }
  std::exception_ptr get() const {
    std::lock_guard lock(mutex_);
    return error_;
  }

 private:
  static bool is_aborted(std::exception_ptr error) {
    try {
      std::rethrow_exception(error);
    } catch (const AbortedError&) {
      return true;
    } catch (...) {
      return false;
    }
  }

  mutable std::mutex mutex_;
  std::exception_ptr error_;
  bool error_aborted_ = false;
};

std::string what_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

// Note [fixed span names]: a fresh table gives ids 1, 2, ... in order.
void intern_fixed_names(Timeline& timeline, const std::vector<std::string>& names) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    TANDEM_CHECK_EQ(timeline.names->intern(names[i]), static_cast<NameId>(i + 1));
  }
}

}  // namespace

std::string resolve_device_comm(const std::string& requested, int ranks) {
  if (requested == "auto") return ranks > 1 ? "nccl" : "emulated";
  if (requested == "nccl" || requested == "emulated" || requested == "shared") return requested;
  throw UsageError("--device-comm must be auto, nccl, shared or emulated (got '" + requested +
                   "')");
}

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

Job::Job(const std::string& backend, const BackendOptions& options) {
  if (backend == "local") return;
  const Backend& b = require_backend(backend, "--backend");
  if (b.make_job == nullptr) {
    throw UsageError("--backend " + backend + ": not a backend of one rank per process");
  }
  process_ = b.make_job(options);
}

Job::~Job() = default;

bool Job::leader() const { return process_ == nullptr || process_->rank() == 0; }

void Job::fail(const std::exception& error) {
  if (process_ == nullptr) throw;  // NOLINT: rethrows the exception being handled
  std::fprintf(stderr, "%s\n", failure_line(process_->rank(), error.what()).c_str());
  process_->abort_job(1);
  std::abort();  // not reached: abort_job does not return
}

RunResult Job::run(const RunSpec& spec, const RankBody& body) {
  RunResult result;
  if (process_ == nullptr) {
    result = run_in_process(spec, body);
  } else {
    try {
      result = run_in_job(spec, body);
    } catch (const std::exception& e) {
      fail(e);
    }
  }
  last_run_ = static_cast<const RunPlacement&>(result);
  return result;
}

namespace {

// Every command's runs (train, characterize's workloads) allocate each rank's span
// buffers before the first step: refused with the bytes when they cannot fit, before
// anything is allocated. A training run counts them in its own, larger check too.
void check_timeline_memory(const RunSpec& spec, int ranks_here) {
  if (!spec.record) return;
  const double bytes = ranks_here * RankRecorder::bytes(spec.span_capacity_per_lane);
  const AvailableMemory available = available_memory();
  if (available.bytes < 0 || bytes <= static_cast<double>(available.bytes)) return;
  throw UsageError("the timeline of " + std::to_string(ranks_here) + " rank(s) needs " +
                   format_bytes(bytes) + " (" + std::to_string(static_cast<long long>(bytes)) +
                   " bytes: " + std::to_string(spec.span_capacity_per_lane) +
                   " spans per lane, sized by the steps or iterations), but " +
                   format_bytes(static_cast<double>(available.bytes)) + " is available (" +
                   available.source + ")");
}

}  // namespace

RunResult Job::run_in_process(const RunSpec& spec, const RankBody& body) {
  const int n = spec.ranks;
  if (n < 1) throw UsageError("--ranks must be at least 1");
  check_timeline_memory(spec, n);
  BackendOptions options = spec.comm;
  options.ranks = n;
  std::vector<std::unique_ptr<Communicator>> control =
      require_backend("local", "--backend").make_world(options);
  std::vector<std::unique_ptr<Communicator>> data;
  if (spec.device != Device::kCpu) {
    check_device_available(spec.device);
    const std::string name = resolve_device_comm(spec.device_comm, n);
    const Backend& b = require_backend(name, "--device-comm");
    if (b.make_world == nullptr) {
      throw UsageError("--device-comm " + name + ": cannot run ranks as threads of one process");
    }
    data = b.make_world(options);
  }
  std::vector<std::unique_ptr<Communicator>>& comms = data.empty() ? control : data;

  std::vector<std::unique_ptr<RankRecorder>> recorders;
  for (int r = 0; r < n; ++r) {
    recorders.push_back(
        std::make_unique<RankRecorder>(r, spec.span_capacity_per_lane, spec.record));
    comms[static_cast<std::size_t>(r)]->set_recorder(recorders.back().get());
  }
  RunResult result;
  result.ranks = n;
  result.backend = std::string(comms[0]->backend_name());
  result.backend_details = comms[0]->describe();
  result.payloads.resize(static_cast<std::size_t>(n));

  FirstFailure failure;
  const auto abort_all = [&](const std::string& reason) {
    for (auto* world : {&control, &data}) {
      for (auto& comm : *world) comm->abort(reason);
    }
  };
  const RankCpus cpus = place_ranks(n, spec.threads_per_rank, spec.bind, allowed_cpus());
  result.binding = cpus.description;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      name_this_thread("tandem r" + std::to_string(r));
      if (!cpus.per_rank.empty()) {
        // Before anything runs: the BLAS threads this one starts inherit its CPUs.
        const std::vector<int>& mine = cpus.per_rank[i];
        bind_this_thread(mine);
        comms[i]->bind_threads(mine);
        if (comms[i] != control[i]) control[i]->bind_threads(mine);
      }
      RankEnv env{.comm = *comms[i],
                  .control = *control[i],
                  .recorder = *recorders[i],
                  .ordinal = comms[i]->device()};
      try {
        result.payloads[i] = body(env);
      } catch (...) {
        const std::exception_ptr error = std::current_exception();
        failure.offer(error);
        abort_all(what_of(error));
      }
    });
  }
  for (auto& t : threads) t.join();
  // Every communication thread ends here; after this every span buffer is quiescent.
  for (auto& comm : data) comm->begin_shutdown();
  data.clear();
  control.clear();
  if (const std::exception_ptr error = failure.get()) std::rethrow_exception(error);

  result.timeline.ranks = n;
  intern_fixed_names(result.timeline, spec.span_names);
  for (const auto& recorder : recorders) {
    const std::vector<Span> spans = recorder->collect();
    result.timeline.spans.insert(result.timeline.spans.end(), spans.begin(), spans.end());
    result.spans_dropped += recorder->dropped();
  }
  return result;
}

RunResult Job::run_in_job(const RunSpec& spec, const RankBody& body) {
  ProcessCommunicator& host = *process_;
  std::unique_ptr<Communicator> device_comm;
  if (spec.device != Device::kCpu) {
    check_device_available(spec.device);
    const std::string name = resolve_device_comm(spec.device_comm, host.size());
    const Backend& b = require_backend(name, "--device-comm");
    if (b.make_job_member == nullptr) {
      throw UsageError("--device-comm " + name + ": cannot run across the processes of a job");
    }
    device_comm = b.make_job_member(spec.comm, host);
  }
  Communicator& data = device_comm ? *device_comm : host;
  check_timeline_memory(spec, 1);
  RankRecorder recorder(host.rank(), spec.span_capacity_per_lane, spec.record);
  data.set_recorder(&recorder);

  const std::vector<ClockOffset> before = host.estimate_clock_offsets(kClockRounds);
  RankEnv env{.comm = data, .control = host, .recorder = recorder, .ordinal = data.device()};
  const std::string mine = body(env);
  const std::vector<ClockOffset> after = host.estimate_clock_offsets(kClockRounds);
  // Every operation has completed (the estimate ran after them): the comm lane is quiet.

  ByteWriter payload;
  payload.put_string(mine);
  payload.put_vector(recorder.collect());
  payload.put<std::uint64_t>(recorder.dropped());
  const std::vector<std::string> all = host.gather_bytes(payload.take(), 0);
  data.set_recorder(nullptr);

  RunResult result;
  result.leader = host.rank() == 0;
  result.ranks = host.size();
  result.backend = std::string(data.backend_name());
  result.backend_details = data.describe();
  result.binding = "by the launcher: rank " + std::to_string(host.rank()) + " on CPUs " +
                   format_cpu_list(allowed_cpus());
  if (device_comm) {
    result.backend_details += "; host communicator: " + host.describe();
    device_comm->begin_shutdown();
    device_comm.reset();
  }
  result.hosts = host.hosts();
  result.ranks_per_host = host.ranks_on_host();
  if (!result.leader) return result;

  result.timeline.ranks = host.size();
  intern_fixed_names(result.timeline, spec.span_names);
  const auto fixed = static_cast<NameId>(spec.span_names.size());
  for (int r = 0; r < host.size(); ++r) {
    const ClockOffset& b = before[static_cast<std::size_t>(r)];
    const ClockOffset& a = after[static_cast<std::size_t>(r)];
    result.clock_uncertainty_ns =
        std::max({result.clock_uncertainty_ns, b.uncertainty_ns, a.uncertainty_ns});
    result.clock_offset_ns = std::max(
        {result.clock_offset_ns, std::abs(b.offset_ns), std::abs(a.offset_ns)});
    ByteReader in(all[static_cast<std::size_t>(r)]);
    result.payloads.push_back(in.get_string());
    for (Span s : in.get_vector<Span>()) {
      s.start_ns = to_rank0_clock(s.start_ns, b, a);
      s.end_ns = to_rank0_clock(s.end_ns, b, a);
      if (s.issue_ns != 0) s.issue_ns = to_rank0_clock(s.issue_ns, b, a);
      // Other names are ids into each process's own table; fixed ones mean the same
      // everywhere (Note [fixed span names]).
      if (s.name > fixed) s.name = kNoName;
      result.timeline.spans.push_back(s);
    }
    result.spans_dropped += in.get<std::uint64_t>();
  }
  return result;
}

}  // namespace tandem
