// The one rank loop on a GPU end to end (--device cuda: the CUDA RankModel and a device
// communicator): against the CPU on the same run, strategies against each other, and the
// timeline it records. One rank (the emulated ring) runs on
// any single GPU; the multi-rank test needs two devices and skips otherwise.
#include "engine/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <vector>

#include "gpu/gpu_support.h"
#include "gpu/train_support.h"
#include "model/rank_model.h"

namespace tandem {
namespace {

using testing::l2_rel_diff;

TrainConfig small_run(const char* strategy, int ranks = 1) {
  return testing::cuda_train_config({.model = "mlp:3x64",
                                     .strategy = strategy,
                                     .ranks = ranks,
                                     .batch = 16,
                                     .steps = 4,
                                     .bucket_cap_bytes = 8 << 10,
                                     .first_bucket_cap_bytes = 4 << 10});
}

TEST(CudaTrainTest, OneRankMatchesTheCpuTrainer) {
  TANDEM_SKIP_WITHOUT_GPU();
  TrainConfig gpu_config = small_run("bucketed");
  TrainConfig cpu_config = gpu_config;
  cpu_config.device = Device::kCpu;
  const TrainResult gpu = train_local(gpu_config);
  const TrainResult cpu = train_local(cpu_config);
  ASSERT_EQ(gpu.final_params.size(), cpu.final_params.size());
  const double diff = l2_rel_diff(gpu.final_params, cpu.final_params);
  std::printf("after %d steps: parameters differ by %.3g (l2 rel); loss %.5f vs %.5f\n",
              gpu_config.steps, diff, static_cast<double>(gpu.steps.back().loss),
              static_cast<double>(cpu.steps.back().loss));
  EXPECT_LE(diff, 1e-4);
  ASSERT_EQ(gpu.steps.size(), cpu.steps.size());
  for (std::size_t i = 0; i < gpu.steps.size(); ++i) {
    EXPECT_NEAR(gpu.steps[i].loss, cpu.steps[i].loss, 1e-4 * (1 + std::abs(cpu.steps[i].loss)));
    EXPECT_LE(gpu.steps[i].start_ns, gpu.steps[i].end_ns);
  }
  EXPECT_EQ(gpu.buckets.size(), cpu.buckets.size());
  EXPECT_EQ(gpu.device, "cuda");
  EXPECT_EQ(gpu.timing_source, "cuda-events");
}

TEST(CudaTrainTest, RecordsComputeSpansEveryStepAndCommSpansFromTheCommunicator) {
  TANDEM_SKIP_WITHOUT_GPU();
  const TrainConfig config = small_run("layerwise");
  const TrainResult r = train_local(config);
  std::set<int> compute_steps;
  int comm = 0, optimizer = 0;
  for (const Span& s : r.timeline.spans) {
    EXPECT_LE(s.start_ns, s.end_ns);
    if (s.lane == Lane::kCompute) compute_steps.insert(s.step);
    if (s.lane == Lane::kComm) ++comm;
    if (s.kind == SpanKind::kOptimizer) ++optimizer;
  }
  EXPECT_EQ(compute_steps, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(optimizer, config.steps);
  // Layerwise: one all-reduce per layer per step.
  EXPECT_EQ(comm, 3 * config.steps);
  EXPECT_EQ(r.spans_dropped, 0u);
}

TEST(CudaTrainTest, StrategiesAndAccumulationAgree) {
  TANDEM_SKIP_WITHOUT_GPU();
  const TrainResult reference = train_local(small_run("sequential"));
  for (const char* strategy : {"layerwise", "bucketed", "chunked:5"}) {
    const TrainResult r = train_local(small_run(strategy));
    const double diff = l2_rel_diff(r.final_params, reference.final_params);
    std::printf("%s vs sequential: %.3g\n", strategy, diff);
    EXPECT_LE(diff, 1e-5) << strategy;
  }
  // Accumulation: 2 micro-batches per step on the GPU as on the CPU.
  TrainConfig gpu_config = small_run("bucketed");
  gpu_config.accumulate = 2;
  TrainConfig cpu_config = gpu_config;
  cpu_config.device = Device::kCpu;
  const double diff =
      l2_rel_diff(train_local(gpu_config).final_params, train_local(cpu_config).final_params);
  std::printf("accumulate 2, gpu vs cpu: %.3g\n", diff);
  EXPECT_LE(diff, 1e-4);
}

TEST(CudaTrainTest, ReducedPrecisionsTrain) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (Precision p : {Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
    TrainConfig config = small_run("bucketed");
    config.precision = p;
    config.steps = 20;
    config.sgd.lr = 0.05f;
    const TrainResult r = train_local(config);
    const float first = r.steps.front().loss, last = r.steps.back().loss;
    std::printf("%s: loss %.4f -> %.4f\n", std::string(to_string(p)).c_str(),
                static_cast<double>(first), static_cast<double>(last));
    EXPECT_TRUE(std::isfinite(last)) << to_string(p);
    EXPECT_LT(last, first) << to_string(p);
  }
}

// --compress on a GPU (docs/REDUCER.md): the casts are the device's kernels and the
// all-reduce sums 16-bit values (the emulated ring's kernel or NCCL); the run keeps close to
// the uncompressed one and moves half the bytes. Sharded strategies too.
TEST(CudaTrainTest, CompressedGradientsTrain) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (const char* strategy : {"bucketed", "zero2"}) {
    TrainConfig plain = small_run(strategy);
    plain.steps = 20;
    plain.sgd.lr = 0.05f;
    const TrainResult base = train_local(plain);
    for (const char* compress : {"fp16", "bf16"}) {
      TrainConfig config = plain;
      config.reducer.compress = Compression::parse(compress);
      const TrainResult r = train_local(config);
      ASSERT_EQ(r.final_params.size(), base.final_params.size());
      const double diff = l2_rel_diff(r.final_params, base.final_params);
      std::printf("%s %s: loss %.4f -> %.4f, parameters %.2e from fp32's\n", strategy, compress,
                  static_cast<double>(r.steps.front().loss),
                  static_cast<double>(r.steps.back().loss), diff);
      EXPECT_GT(diff, 0) << strategy << " " << compress;
      EXPECT_LT(diff, 1e-2) << strategy << " " << compress;
      EXPECT_LT(r.bytes_per_step, r.uncompressed_bytes_per_step) << strategy << " " << compress;
    }
  }
}

// Two ranks: on two GPUs (nccl) or both on one (shared). The ranks end with the same
// parameters (verify throws otherwise), which are the CPU engine's two ranks'.
TEST(CudaTrainTest, TwoRanksHoldIdenticalParametersAsOnTheCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  TrainConfig config = small_run("bucketed", 2);
  config.device_comm = testing::device_comm_for(2);
  const TrainResult r = train_local(config);  // verify: throws if the ranks differ
  EXPECT_EQ(r.steps.size(), 2u * config.steps);
  EXPECT_EQ(r.backend, config.device_comm);
  TrainConfig cpu_config = config;
  cpu_config.device = Device::kCpu;
  const TrainResult cpu = train_local(cpu_config);
  ASSERT_EQ(r.final_params.size(), cpu.final_params.size());
  EXPECT_LE(l2_rel_diff(r.final_params, cpu.final_params), 1e-4) << config.device_comm;
  for (const char* strategy : {"layerwise", "chunked:2"}) {
    TrainConfig other = config;
    other.reducer.plan.strategy = Strategy::parse(strategy);
    const TrainResult s = train_local(other);
    EXPECT_LE(l2_rel_diff(s.final_params, cpu.final_params), 1e-4) << strategy;
  }
  config.reducer.compress = Compression::parse("bf16");  // 16-bit sums on the device
  const TrainResult compressed = train_local(config);
  const double diff = l2_rel_diff(compressed.final_params, cpu.final_params);
  EXPECT_GT(diff, 0) << "bf16 sums should round";
  EXPECT_LT(diff, 1e-2);
}

TEST(CudaTrainTest, RegisteredAsTheCudaDevice) {
  // No device needed: registration is static, availability is what the machine says.
  const DeviceModels* models = find_device_models(Device::kCuda);
  ASSERT_NE(models, nullptr);
  int devices = 0;
  const bool present = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  cudaGetLastError();
  EXPECT_EQ(models->unavailable().empty(), present) << models->unavailable();
  EXPECT_EQ(models->count(), present ? devices : 0);
  if (!present) {
    TrainConfig config = small_run("bucketed");
    EXPECT_THROW(train_local(config), UsageError);
  }
}

}  // namespace
}  // namespace tandem
