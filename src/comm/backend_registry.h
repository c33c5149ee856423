// One registry of communication backends by name: local, mpi, nccl, shared, emulated. Each
// backend's target registers itself from a static initializer (for example
// src/comm/mpi/mpi_register.cpp) and programs link the targets whole
// (CMake: tandem_backends), so the engine and the CLI choose a backend without including
// its headers, and a build without a toolkit simply has no such entry: asking for it is
// one clear UsageError.
//
// Two ways ranks can exist:
// - in-process: every rank is a thread of this process (make_world: local; nccl and the
//   emulated ring with one GPU per rank; shared, every rank on one GPU);
// - one rank per process of an mpirun/srun job (make_job: mpi, which also carries the
//   job's control: clock alignment, gathers, aborting the job). A device backend joins
//   such a job through the host one (make_job_member: nccl, its unique id broadcast over
//   mpi).
// The options every backend is given are comm/backend_options.h; the communicator of a
// job's process comm/process_communicator.h; what the launcher said
// comm/launched_world.h.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/backend_options.h"
#include "comm/communicator.h"
#include "comm/launched_world.h"  // launched_world() decides --backend auto
#include "comm/process_communicator.h"

namespace tandem {

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

// Resolves --backend: "auto" is "mpi" when a launcher started more than one process and
// "local" otherwise; other names come back unchanged. Throws UsageError for unknown
// names and for a backend that was not built in.
std::string resolve_backend(std::string_view requested);

}  // namespace tandem
