// Running the ranks of a job: one launcher for every backend and device.
//
// A Job is what this process takes part in:
// - in-process (backend "local"): each run makes a fresh world whose ranks are threads
//   of this process; with --device cuda the data moves over a device backend (nccl, or
//   the emulated ring on one GPU), rank r on device r, and a local world of the same
//   ranks carries the small host exchanges;
// - one rank per process (backend "mpi", under mpirun/srun): the process communicator
//   is made once, when the Job is (MPI can be initialized once per process), and every
//   run uses it; device runs add a device communicator bootstrapped over it.
//
// Failure policy, one owner for every backend: a rank whose body throws has already
// ended its own collectives (the body's job, see engine/trainer.cpp); the launcher then
// aborts every communicator of the run with that error, so the peers' pending operations
// fail at once, naming it, instead of waiting. In-process, every thread is joined, the
// communicators are shut down, and the first failure that is not merely an abort
// (AbortedError) is rethrown. In a process job the failing rank prints one line and ends
// the whole job (fail_job), so no process is left waiting for it.
//
// Results: every rank's body returns bytes; the leader (rank 0) gets all of them, in rank
// order, and every rank's spans on its own clock (ranks of other processes are moved onto
// it by ping-pong estimates before and after the run, interpolated: docs/MPI.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/backend_registry.h"
#include "compute/precision.h"
#include "timeline/recorder.h"

namespace tandem {

struct RunSpec {
  int ranks = 1;  // in-process runs; a process job has the launcher's count
  Device device = Device::kCpu;
  std::string device_comm = "auto";  // device runs: nccl, shared, emulated or auto
  BackendOptions comm{};             // the run's worlds (link, device options); timeout
  std::size_t span_capacity_per_lane = 4096;
  bool record = true;
  // In-process ranks' threads bound to CPUs of their own (core/affinity.h) when `bind`
  // and ranks x threads_per_rank fit the CPUs this process may use. A process job's
  // ranks are where its launcher bound them.
  bool bind = true;
  int threads_per_rank = 1;
  // Note [fixed span names]: names the rank bodies' spans carry as fixed ids, without a
  // NameTable (a RankRecorder has none, and a process job has one table per process):
  // span_names[i] is id i + 1 in the run's timeline, interned first, in every process.
  // The model's sub-operations (model/model_ops.h) are named this way.
  std::vector<std::string> span_names;
};

// What one rank's body works with.
struct RankEnv {
  Communicator& comm;     // the run's collectives (device memory on a device run)
  Communicator& control;  // host memory, the same ranks (== comm on a host run)
  RankRecorder& recorder;
  int ordinal = -1;  // the rank's device (-1: the CPU)
};

// One rank's work; returns the bytes the leader gets from this rank.
using RankBody = std::function<std::string(RankEnv& env)>;

// Where a run's ranks ran: its collectives' backend and, in a process job, the job's shape
// and how well every rank's clock was aligned to rank 0's. Known on every rank except
// the clock uncertainty (the leader's).
struct RunPlacement {
  int ranks = 1;
  std::string backend;          // of the run's collectives: "local", "mpi", "nccl", ...
  std::string backend_details;  // its describe() line
  std::string binding;          // where the ranks' threads ran (place_ranks' description)
  int hosts = 1;
  int ranks_per_host = 0;                 // 0: all ranks are threads of one process
  std::int64_t clock_uncertainty_ns = 0;  // largest over ranks; 0 in one process
  // Largest |estimated offset| of a rank's clock from rank 0's, before or after the run; 0
  // in one process. Hosts that share one clock (namespaces on one machine) should read
  // at most clock_uncertainty_ns.
  std::int64_t clock_offset_ns = 0;
};

struct RunResult : RunPlacement {
  bool leader = true;
  std::vector<std::string> payloads;  // leader only: every rank's, in rank order
  Timeline timeline;                  // leader only: every rank's spans
  std::size_t spans_dropped = 0;
};

class Job {
 public:
  // `backend` as resolve_backend() gives it ("local" or "mpi"); a process backend joins
  // the launcher's job here, with `options` (timeout, algorithm, polling).
  Job(const std::string& backend, const BackendOptions& options);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  bool in_process() const { return process_ == nullptr; }
  // This process prints and writes for the job (rank 0; always in-process).
  bool leader() const;
  // The process communicator of a process job (null in-process).
  ProcessCommunicator* process() const { return process_.get(); }

  // Runs `body` on every rank of a run (see the header comment). In a process job
  // spec.ranks is ignored and a failure never returns.
  RunResult run(const RunSpec& spec, const RankBody& body);

  // Where the latest run() ran (a default placement before the first): for callers that
  // get only a timeline back from the code that ran it (experiment/characterize.cpp).
  const RunPlacement& last_run() const { return last_run_; }

  // Process jobs: one line "tandem: rank R: <what>" and the end of every process of the
  // job. In-process: rethrows the exception being handled (call it from a catch block).
  [[noreturn]] void fail(const std::exception& error);

 private:
  RunResult run_in_process(const RunSpec& spec, const RankBody& body);
  RunResult run_in_job(const RunSpec& spec, const RankBody& body);

  std::unique_ptr<ProcessCommunicator> process_;
  RunPlacement last_run_;
};

// The device backend a run of `ranks` ranks uses for device_comm "auto".
std::string resolve_device_comm(const std::string& requested, int ranks);

// Moves rank-local times onto rank 0's clock: t - offset, the offset interpolated
// between `before` and `after` by t (extrapolated flat outside them).
std::int64_t to_rank0_clock(std::int64_t t_ns, const ClockOffset& before, const ClockOffset& after);

}  // namespace tandem
