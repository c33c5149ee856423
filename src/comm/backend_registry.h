// One registry of communication backends by name: local, mpi, nccl, emulated. Each
// backend's target registers itself from a static initializer (for example
// src/comm/mpi/mpi_register.cpp) and programs link the targets whole
// (CMake: tandem_backends), so the engine and the CLI choose a backend without including
// its headers, and a build without a toolkit simply has no such entry: asking for it is
// one clear UsageError.
//
// Two ways ranks can exist:
// - in-process: every rank is a thread of this process (make_world: local; nccl and the
//   emulated ring with one GPU per rank);
// - one rank per process of an mpirun/srun job (make_job: mpi, which also carries the
//   job's control: clock alignment, gathers, aborting the job). A device backend joins
//   such a job through the host one (make_job_member: nccl, its unique id broadcast over
//   mpi).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "comm/link_model.h"
#include "comm/progress_communicator.h"

namespace tandem {

// Rank r's clock against rank 0's: t_rank0 = t_r - offset_ns, known within
// +-uncertainty_ns (half the round trip of the best ping-pong), measured at rank 0's
// time at_ns.
struct ClockOffset {
  std::int64_t offset_ns = 0;
  std::int64_t uncertainty_ns = 0;
  std::int64_t at_ns = 0;
};

// Every backend's options in one aggregate; each backend reads the fields it knows.
struct BackendOptions {
  int ranks = 1;  // in-process worlds: how many ranks
  std::chrono::nanoseconds timeout{std::chrono::seconds(300)};
  LinkModel link{};  // local: emulated wire time
  // mpi: allreduce algorithm ("auto", "native", "ring"; empty: auto) and the
  // communication thread's idle poll (docs/MPI.md): 0 yields the core between polls,
  // > 0 sleeps that long once polling found nothing for a while; -1: the default.
  std::string allreduce_algorithm;
  std::int64_t poll_sleep_ns = -1;
  // Device backends (docs/GPU.md).
  int emulated_peers = 2;   // ring size the emulation mimics
  int emulated_blocks = 0;  // CUDA blocks of the emulated reduce-copy kernels; 0: default
  int nccl_min_ctas = 0;    // NCCL's CTA limits; 0: NCCL's default
  int nccl_max_ctas = 0;
};

// A Communicator for the one rank this process holds, plus what a multi-process job
// needs on top of the contract. The extra collectives run on the backend's
// communication thread (ProgressCommunicator::run_task), in issue order with the other
// operations.
class ProcessCommunicator : public ProgressCommunicator {
 public:
  using ProgressCommunicator::ProgressCommunicator;

  virtual int hosts() const = 0;          // distinct hosts in the job
  virtual int ranks_on_host() const = 0;  // ranks sharing this rank's host
  virtual int local_rank() const = 0;     // this rank's index among them
  virtual std::string host_name() const = 0;

  // Collective: estimates every rank's clock offset to rank 0 by `rounds` ping-pongs
  // per rank. On rank 0 returns size() entries (its own is zero); elsewhere empty.
  virtual std::vector<ClockOffset> estimate_clock_offsets(int rounds) = 0;
  // Collective: every rank's bytes, in rank order, on `root`; empty elsewhere.
  virtual std::vector<std::string> gather_bytes(std::string_view mine, int root) = 0;
  // Collective: root's bytes on every rank.
  virtual std::string broadcast_bytes(std::string_view mine, int root) = 0;
  // Ends every process of the job with `exit_code` (MPI_Abort). Print first: this
  // prints nothing of its own.
  [[noreturn]] virtual void abort_job(int exit_code) = 0;
};

struct Backend {
  std::string name;
  MemoryKind memory = MemoryKind::kHost;
  // "" when the backend can run on this machine, else one line saying why not.
  std::string (*unavailable)() = nullptr;
  // Every rank of an in-process world of options.ranks ranks (threads drive them).
  std::vector<std::unique_ptr<Communicator>> (*make_world)(const BackendOptions& options) =
      nullptr;
  // This process's rank of a launcher's job.
  std::unique_ptr<ProcessCommunicator> (*make_job)(const BackendOptions& options) = nullptr;
  // A device backend's rank of a job whose host communicator is `host`.
  std::unique_ptr<Communicator> (*make_job_member)(const BackendOptions& options,
                                                   ProcessCommunicator& host) = nullptr;
};

// Adds a backend; returns true so a static initializer can call it. A second
// registration of the same name replaces the first.
bool register_backend(Backend backend);
// Null when no backend of that name was built into this program.
const Backend* find_backend(std::string_view name);
std::vector<std::string> backend_names();

// Throws UsageError naming `flag` when the backend is not built in or cannot run here.
const Backend& require_backend(std::string_view name, std::string_view flag);

// What the launcher (mpirun, srun, mpiexec.hydra) told this process before any library
// initialization, from its environment: OMPI_COMM_WORLD_SIZE/RANK (Open MPI),
// PMI_SIZE/RANK and PMIX_SIZE/RANK (Hydra, srun --mpi=pmi2|pmix), SLURM_STEP_NUM_TASKS /
// SLURM_PROCID (srun). SLURM_NTASKS alone does not count: a batch script sees it too
// while it is a single process.
struct LaunchedWorld {
  std::string launcher;  // "" when not launched by one
  int size = 1;
  int rank = 0;
};
LaunchedWorld launched_world();

// The one line a failing rank of a job prints: "tandem: rank R: <what>" (the rank once,
// when <what> names it already), newlines flattened.
std::string failure_line(int rank, std::string what);

// Resolves --backend: "auto" is "mpi" when a launcher started more than one process and
// "local" otherwise; other names come back unchanged. Throws UsageError for unknown
// names and for a backend that was not built in.
std::string resolve_backend(std::string_view requested);

}  // namespace tandem
