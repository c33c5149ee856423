// Registers the `emulated` device backend (comm/backend_registry.h): one real rank on one
// GPU, in-process or as the single process of a job.
#include "comm/backend_registry.h"
#include "comm/device/device_select.h"
#include "comm/device/emulated_ring.h"
#include "cuda/resources.h"

namespace tandem {
namespace {

std::string unavailable() { return cuda::unavailable_reason(); }

std::vector<std::unique_ptr<Communicator>> emulated_world(const BackendOptions& options) {
  if (options.ranks != 1) {
    throw UsageError(
        "--device-comm emulated: one real rank on one GPU (it emulates its peers; set their "
        "number with --emulated-peers), got --ranks " +
        std::to_string(options.ranks));
  }
  const CurrentDeviceRestorer restore;
  std::vector<std::unique_ptr<Communicator>> out;
  out.push_back(make_emulated_ring(options, 0));
  return out;
}

std::unique_ptr<Communicator> emulated_member(const BackendOptions& options,
                                              ProcessCommunicator& host) {
  if (host.size() != 1) {
    throw UsageError("--device-comm emulated: one real rank on one GPU, but this job has " +
                     std::to_string(host.size()) + " processes");
  }
  const CurrentDeviceRestorer restore;
  return make_emulated_ring(options, host.local_rank() % visible_devices());
}

[[maybe_unused]] const bool kEmulatedRegistered =
    register_backend({.name = "emulated",
                      .memory = MemoryKind::kDevice,
                      .unavailable = &unavailable,
                      .make_world = &emulated_world,
                      .make_job_member = &emulated_member});

}  // namespace

}  // namespace tandem
