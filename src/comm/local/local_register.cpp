// Registers the `local` backend at start-up (comm/backend_registry.h). Linked whole into
// the programs that offer it (src/CMakeLists.txt: tandem_backends).
#include "comm/backend_registry.h"
#include "comm/local/local_comm.h"

namespace tandem {
namespace {

std::vector<std::unique_ptr<Communicator>> make_world(const BackendOptions& options) {
  return make_local_communicators(
      {.ranks = options.ranks, .link = options.local.link, .timeout = options.timeout});
}

[[maybe_unused]] const bool kRegistered =
    register_backend({.name = "local", .memory = MemoryKind::kHost, .make_world = &make_world});

}  // namespace
}  // namespace tandem
