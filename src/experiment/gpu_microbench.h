// The GEMM + all-reduce microbenchmark on GPUs (`tandem characterize --device cuda
// --microbench ...`): on every rank a loop of N x N x N cuBLAS GEMMs on a compute stream
// while an all-reduce of the given size runs on the device communicator's stream (nccl
// with a GPU per rank, the emulated ring on one GPU), in the four scenarios. Kernel spans
// come from CUPTI (CUDA events where CUPTI is unavailable); comm spans from the
// communicator's events. See docs/GPU.md ("Microbenchmark").
//
// Ranks are those of the Job it runs on (engine/launch.h): devices of this process driven
// by threads, or one device per process of an mpirun job. The workload lives in a target
// that builds only with the CUDA toolkit and registers its factory here at start-up;
// without it, asking for it is one UsageError.
#pragma once

#include <memory>
#include <string>

#include "experiment/workload.h"

namespace tandem {

struct GpuMicrobenchSpec {
  MicrobenchSpec bench;            // gemm_n, gemm_count (0: calibrated), allreduce_bytes, ranks
  std::string precision = "bf16";  // GEMM inputs: fp32, tf32, fp16, bf16 (fp32 accumulate)
  // The device communicator (comm/backend_registry.h's BackendOptions).
  std::string comm_backend = "auto";  // auto, nccl, shared, emulated
  int emulated_peers = 8;
  int emulated_blocks = 0;  // 0: the emulation's default
  int nccl_min_ctas = 0;
  int nccl_max_ctas = 0;
  double timeout_s = 300;
  bool prefer_cupti = true;
};

// Throws UsageError naming --device when this build has no CUDA.
std::unique_ptr<Workload> make_gpu_microbench_workload(const GpuMicrobenchSpec& spec);

// Visible CUDA devices, 0 when there is no device or no CUDA in this build.
int cuda_device_count();
// The PCI bus ids of the visible CUDA devices (CUDA_VISIBLE_DEVICES), in ordinal order.
std::vector<std::string> cuda_pci_bus_ids();

// The CUDA target's factory; returns true so a static initializer can call it.
using GpuMicrobenchFactory = std::unique_ptr<Workload> (*)(const GpuMicrobenchSpec& spec);
bool register_gpu_microbench(GpuMicrobenchFactory factory);

}  // namespace tandem
