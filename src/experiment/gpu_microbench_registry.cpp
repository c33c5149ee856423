// The GPU microbenchmark's registration point (experiment/gpu_microbench.h): the CUDA
// target registers its factory; builds without CUDA answer with one UsageError.
#include <atomic>

#include "core/error.h"
#include "experiment/gpu_microbench.h"
#include "model/rank_model.h"

namespace tandem {
namespace {

std::atomic<GpuMicrobenchFactory>& factory() {
  static std::atomic<GpuMicrobenchFactory> registered{nullptr};
  return registered;
}

}  // namespace

bool register_gpu_microbench(GpuMicrobenchFactory make) {
  factory().store(make);
  return true;
}

std::unique_ptr<Workload> make_gpu_microbench_workload(const GpuMicrobenchSpec& spec) {
  check_device_available(Device::kCuda);  // names --device when CUDA is not here
  const GpuMicrobenchFactory make = factory().load();
  if (make == nullptr) {
    throw UsageError("--device cuda --microbench: this build of tandem has no GPU microbenchmark");
  }
  return make(spec);
}

int cuda_device_count() {
  const DeviceModels* cuda = find_device_models(Device::kCuda);
  return cuda != nullptr && cuda->count != nullptr ? cuda->count() : 0;
}

std::vector<std::string> cuda_pci_bus_ids() {
  const DeviceModels* cuda = find_device_models(Device::kCuda);
  std::vector<std::string> out;
  if (cuda == nullptr || cuda->pci_bus_id == nullptr) return out;
  for (int i = 0; i < cuda_device_count(); ++i) out.push_back(cuda->pci_bus_id(i));
  return out;
}

}  // namespace tandem
