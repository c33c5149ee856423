// Built instead of gpu_microbench.cpp where CMake found no CUDA toolkit.
#include "core/error.h"
#include "experiment/gpu/gpu_microbench.h"

namespace tandem {

std::unique_ptr<Workload> make_gpu_microbench_workload(const GpuMicrobenchSpec&) {
  throw UsageError(
      "--device cuda: this build of tandem has no CUDA (configure with the CUDA "
      "toolkit installed, or -DTANDEM_CUDA=ON to insist)");
}

int cuda_device_count() { return 0; }

}  // namespace tandem
