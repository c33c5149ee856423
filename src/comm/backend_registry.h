// Backends whose ranks are the processes of a job (mpi; later nccl), registered by name
// at start-up, so that the engine and the CLI choose one without including its headers
// (core code never sees mpi.h).
//
// A backend's target registers itself from a static initializer (see
// src/comm/mpi/mpi_register.cpp); targets that want it link that library whole
// (CMake: $<LINK_LIBRARY:WHOLE_ARCHIVE,tandem_mpi>). A build without the toolkit simply
// has no such entry, and asking for it gives one clear UsageError.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"

namespace tandem {

// Rank r's clock against rank 0's: t_rank0 = t_r - offset_ns, known within
// +-uncertainty_ns (half the round trip of the best ping-pong), measured at rank 0's
// time at_ns.
struct ClockOffset {
  std::int64_t offset_ns = 0;
  std::int64_t uncertainty_ns = 0;
  std::int64_t at_ns = 0;
};

struct ProcessBackendOptions {
  // Bound on the backend's own blocking steps (clock ping-pong, gathers).
  std::int64_t timeout_ns = 300'000'000'000;
  // Allreduce algorithm, backend-specific ("auto", "native", "ring" for mpi); empty: default.
  std::string allreduce_algorithm;
  // The communication thread's idle poll: 0 yields the core between polls; > 0 sleeps
  // that long once polling has found nothing for a while (see docs/MPI.md).
  std::int64_t poll_sleep_ns = -1;  // -1: the backend's default
};

// A Communicator for the one rank this process holds, plus what a multi-process job
// needs on top of the contract. All collectives here run on the backend's
// communication thread, in issue order with the other operations.
class ProcessCommunicator : public Communicator {
 public:
  // One line for reports: library, version, thread level, algorithm, progress mode.
  virtual std::string describe() const = 0;
  virtual int hosts() const = 0;          // distinct hosts in the job
  virtual int ranks_on_host() const = 0;  // ranks sharing this rank's host
  virtual std::string host_name() const = 0;

  // Collective: estimates every rank's clock offset to rank 0 by `rounds` ping-pongs
  // per rank. On rank 0 returns size() entries (its own is zero); elsewhere empty.
  virtual std::vector<ClockOffset> estimate_clock_offsets(int rounds) = 0;
  // Collective: every rank's bytes, in rank order, on `root`; empty elsewhere.
  virtual std::vector<std::string> gather_bytes(std::string_view mine, int root) = 0;
  // Ends every process of the job with `exit_code` (MPI_Abort). Print first: this
  // prints nothing of its own.
  [[noreturn]] virtual void abort_job(int exit_code) = 0;
};

using ProcessBackendFactory =
    std::unique_ptr<ProcessCommunicator> (*)(const ProcessBackendOptions& options);

// Adds a backend; returns true so a static initializer can call it. A second
// registration of the same name replaces the first.
bool register_process_backend(std::string_view name, ProcessBackendFactory factory);
// Null when no backend of that name was built into this program.
ProcessBackendFactory find_process_backend(std::string_view name);
std::vector<std::string> process_backend_names();

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

// Resolves --backend: "auto" is "mpi" when a launcher started more than one process and
// "local" otherwise; other names come back unchanged. Throws UsageError for unknown
// names and for a process backend that was not built in.
std::string resolve_backend(std::string_view requested);

}  // namespace tandem
