// Registers the `mpi` backend at start-up (comm/backend_registry.h). Linked whole into
// the programs that offer it (see src/CMakeLists.txt), so this initializer runs without
// anyone naming it.
#include "comm/backend_registry.h"
#include "comm/mpi/mpi_comm.h"

namespace tandem {
namespace {

[[maybe_unused]] const bool kRegistered = register_backend(
    {.name = "mpi", .memory = MemoryKind::kHost, .make_job = &make_mpi_communicator});

}  // namespace
}  // namespace tandem
