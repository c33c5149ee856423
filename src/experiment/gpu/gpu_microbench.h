// The GEMM + all-reduce microbenchmark on GPUs (`tandem characterize --device cuda
// --microbench ...`): on every rank a loop of N x N x N cuBLAS GEMMs on a compute stream
// while an all-reduce of the given size runs on the device communicator's stream (nccl
// with a GPU per rank, the emulated ring on one GPU), in the four scenarios. Kernel spans
// come from CUPTI (CUDA events where CUPTI is unavailable); comm spans from the
// communicator's events. See docs/GPU.md ("Microbenchmark").
//
// Ranks are devices of this process (threads drive them). Builds without CUDA link a
// stub whose factory throws UsageError.
#pragma once

#include <memory>
#include <string>

#include "experiment/workload.h"

namespace tandem {

struct GpuMicrobenchSpec {
  MicrobenchSpec bench;            // gemm_n, gemm_count (0: calibrated), allreduce_bytes, ranks
  std::string precision = "bf16";  // GEMM inputs: fp32, tf32, fp16, bf16 (fp32 accumulate)
  // The device communicator (comm/device/device_backends.h's DeviceCommOptions, kept free
  // of CUDA headers here so that CPU-only builds compile the CLI).
  std::string comm_backend = "auto";  // auto, nccl, emulated
  int emulated_peers = 8;
  int emulated_blocks = 0;  // 0: the emulation's default
  int nccl_min_ctas = 0;
  int nccl_max_ctas = 0;
  double timeout_s = 300;
  bool prefer_cupti = true;
};

std::unique_ptr<Workload> make_gpu_microbench_workload(const GpuMicrobenchSpec& spec);

// Visible CUDA devices, 0 when there is no device or no CUDA in this build.
int cuda_device_count();

}  // namespace tandem
