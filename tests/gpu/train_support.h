// The CUDA training runs of the GPU trainer tests: one place for what every such run sets
// (the device, --verify, a generous timeout), the rest named per test.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "engine/trainer.h"

namespace tandem::testing {

// The device backend of a run of several ranks: a GPU each (nccl) where the machine has
// enough, else every rank on one GPU (shared), so that the multi-rank tests run on one.
inline std::string device_comm_for(int ranks) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    (void)cudaGetLastError();
    devices = 0;
  }
  return devices >= ranks ? "nccl" : "shared";
}

struct CudaRun {
  std::string model;
  std::string strategy = "bucketed";
  int ranks = 1;
  int batch = 16;
  int steps = 4;
  // Bucket caps; small ones give the tests' small models several buckets.
  std::int64_t bucket_cap_bytes = 25ll << 20;
  std::int64_t first_bucket_cap_bytes = 1ll << 20;
};

inline TrainConfig cuda_train_config(const CudaRun& run) {
  TrainConfig c;
  c.model = ModelSpec::parse(run.model);
  c.ranks = run.ranks;
  c.batch = run.batch;
  c.steps = run.steps;
  c.reducer.plan.strategy = Strategy::parse(run.strategy);
  c.reducer.plan.bucket_cap_bytes = run.bucket_cap_bytes;
  c.reducer.plan.first_bucket_cap_bytes = run.first_bucket_cap_bytes;
  c.timeout_ns = 60'000'000'000;
  c.device = Device::kCuda;
  c.verify = true;
  return c;
}

}  // namespace tandem::testing
