// Registers the `shared` device backend (comm/backend_registry.h): several ranks, threads
// of one process, on one GPU (device 0). Not across the processes of a job.
#include "comm/backend_registry.h"
#include "comm/device/device_select.h"
#include "comm/device/shared_gpu.h"
#include "cuda/resources.h"

namespace tandem {
namespace {

std::string unavailable() { return cuda::unavailable_reason(); }

std::vector<std::unique_ptr<Communicator>> shared_world(const BackendOptions& options) {
  (void)visible_devices();  // none: a usage error naming --device cuda
  const CurrentDeviceRestorer restore;
  return make_shared_gpu_world(options, 0);
}

[[maybe_unused]] const bool kSharedRegistered = register_backend({.name = "shared",
                                                                  .memory = MemoryKind::kDevice,
                                                                  .unavailable = &unavailable,
                                                                  .make_world = &shared_world});

}  // namespace
}  // namespace tandem
