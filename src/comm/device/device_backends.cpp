// The device communicator factories (device_backends.h): which backend, which device.
#include "comm/device/device_backends.h"

#include "comm/device/device_progress.h"
#include "comm/device/emulated_ring.h"
#include "comm/nccl/nccl_comm.h"
#include "core/error.h"

namespace tandem {

std::size_t element_size(DeviceDtype dtype) {
  switch (dtype) {
    case DeviceDtype::kFloat32:
      return 4;
    case DeviceDtype::kFloat16:
      return 2;
    case DeviceDtype::kBfloat16:
      return 2;
  }
  return 4;
}

namespace {

// Visible CUDA devices; none (or no driver) is a usage error: the user asked for a GPU.
int visible_devices() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count < 1) {
    (void)cudaGetLastError();
    throw UsageError(std::string("--device cuda: no usable CUDA device (cudaGetDeviceCount: ") +
                     (status == cudaSuccess ? "0 devices" : cudaGetErrorString(status)) + ")");
  }
  return count;
}

// The factories set devices while they build communicators; the caller's current device
// is put back when they return.
class CurrentDeviceRestorer {
 public:
  CurrentDeviceRestorer() { ok_ = cudaGetDevice(&device_) == cudaSuccess; }
  ~CurrentDeviceRestorer() {
    if (ok_) cudaSetDevice(device_);
  }
  CurrentDeviceRestorer(const CurrentDeviceRestorer&) = delete;
  CurrentDeviceRestorer& operator=(const CurrentDeviceRestorer&) = delete;

 private:
  int device_ = 0;
  bool ok_ = false;
};

std::string resolve(const DeviceCommOptions& options, int ranks) {
  const std::string& b = options.backend;
  if (b == "auto" || b.empty()) return ranks > 1 ? "nccl" : "emulated";
  if (b == "nccl" || b == "emulated") return b;
  throw UsageError("--backend: unknown device backend '" + b +
                   "' (expected auto, nccl or emulated)");
}

}  // namespace

std::vector<std::unique_ptr<DeviceCommunicator>> make_local_device_communicators(
    const DeviceCommOptions& options, int ranks) {
  if (ranks < 1) throw UsageError("--ranks: must be >= 1");
  const std::string backend = resolve(options, ranks);
  const int devices = visible_devices();
  const CurrentDeviceRestorer restore;
  std::vector<std::unique_ptr<DeviceCommunicator>> out;
  if (backend == "emulated") {
    if (ranks != 1) {
      throw UsageError(
          "--backend emulated: one real rank on one GPU (it emulates its peers; "
          "set their number with --emulated-peers), got --ranks " +
          std::to_string(ranks));
    }
    out.push_back(make_emulated_ring(options, 0));
    return out;
  }
  if (ranks > devices) {
    throw UsageError("--ranks " + std::to_string(ranks) +
                     " with --backend nccl needs a GPU per "
                     "rank, but " +
                     std::to_string(devices) +
                     " CUDA device(s) are visible (on "
                     "one GPU use --ranks 1, which emulates a ring)");
  }
  return make_nccl_local(options, ranks);
}

std::unique_ptr<DeviceCommunicator> make_process_device_communicator(
    const DeviceCommOptions& options, Communicator& host) {
  const std::string backend = resolve(options, host.size());
  const int devices = visible_devices();
  const int device = host.rank() % devices;
  const CurrentDeviceRestorer restore;
  if (backend == "emulated") {
    if (host.size() != 1) {
      throw UsageError("--backend emulated: one real rank on one GPU, but this job has " +
                       std::to_string(host.size()) + " processes");
    }
    return make_emulated_ring(options, device);
  }
  return make_nccl_process(options, host, device);
}

void destroy_device_communicators(std::vector<std::unique_ptr<DeviceCommunicator>>& comms) {
  for (auto& comm : comms) {
    if (!comm) continue;
    try {
      comm->begin_shutdown();
    } catch (const std::exception&) {
      comm->abort();  // the destructor then skips finalize
    }
  }
  comms.clear();
}

}  // namespace tandem
