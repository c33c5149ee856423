// The rank loop with a transformer on a GPU (--device cuda, one rank over the emulated
// ring): against the CPU trainer on the same run, every strategy against sequential,
// two runs bit for bit the same, a text file with its validation loss, bf16 and fp16
// against the cpu; and the refusals that need no GPU (fp16 with shards) or need one (a run
// too large for the device).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/trainer.h"
#include "gpu/gpu_support.h"
#include "gpu/train_support.h"

namespace tandem {
namespace {

using testing::l2_rel_diff;

TrainConfig transformer_run(const char* model, const char* strategy) {
  return testing::cuda_train_config({.model = model,
                                     .strategy = strategy,
                                     .batch = 4,
                                     .steps = 3,
                                     .bucket_cap_bytes = 16 << 10,
                                     .first_bucket_cap_bytes = 8 << 10});
}

constexpr const char* kGpt = "gpt:layers=2,dim=32,heads=4,seq=16,vocab=64";
constexpr const char* kLlama = "llama:layers=2,dim=32,heads=4,seq=16,hidden=48,vocab=64";

TEST(CudaTransformerTrainerTest, OneRankMatchesTheCpuTrainer) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (const char* model : {kGpt, kLlama}) {
    const TrainConfig gpu_config = transformer_run(model, "bucketed");
    TrainConfig cpu_config = gpu_config;
    cpu_config.device = Device::kCpu;
    const TrainResult gpu = train_local(gpu_config);
    const TrainResult cpu = train_local(cpu_config);
    ASSERT_EQ(gpu.final_params.size(), cpu.final_params.size());
    const double diff = l2_rel_diff(gpu.final_params, cpu.final_params);
    std::printf("%s: parameters differ by %.3g (l2 rel) after %d steps; loss %.5f vs %.5f\n", model,
                diff, gpu_config.steps, static_cast<double>(gpu.steps.back().loss),
                static_cast<double>(cpu.steps.back().loss));
    EXPECT_LE(diff, 1e-4) << model;
    ASSERT_EQ(gpu.steps.size(), cpu.steps.size());
    for (std::size_t i = 0; i < gpu.steps.size(); ++i) {
      EXPECT_NEAR(gpu.steps[i].loss, cpu.steps[i].loss, 1e-4 * (1 + std::abs(cpu.steps[i].loss)))
          << model << " step " << i;
    }
    EXPECT_EQ(gpu.device, "cuda");
    EXPECT_EQ(gpu.timing_source, "cuda-events");
  }
}

TEST(CudaTransformerTrainerTest, EveryStrategyAgreesWithSequential) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (const char* model : {kGpt, kLlama}) {
    const TrainResult reference = train_local(transformer_run(model, "sequential"));
    for (const char* strategy : {"layerwise", "bucketed", "chunked:5"}) {
      const TrainResult r = train_local(transformer_run(model, strategy));
      const double diff = l2_rel_diff(r.final_params, reference.final_params);
      std::printf("%s %s vs sequential: %.3g\n", model, strategy, diff);
      EXPECT_LE(diff, 1e-5) << model << " " << strategy;
    }
    // Accumulation: two micro-batches per step.
    TrainConfig accumulate = transformer_run(model, "bucketed");
    accumulate.accumulate = 2;
    TrainConfig sequential = accumulate;
    sequential.reducer.plan.strategy = Strategy::parse("sequential");
    const double diff =
        l2_rel_diff(train_local(accumulate).final_params, train_local(sequential).final_params);
    std::printf("%s accumulate 2, bucketed vs sequential: %.3g\n", model, diff);
    EXPECT_LE(diff, 1e-5) << model;
  }
}

TEST(CudaTransformerTrainerTest, TwoRunsAreBitwiseEqual) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (const char* model : {kGpt, kLlama}) {
    const TrainResult a = train_local(transformer_run(model, "bucketed"));
    const TrainResult b = train_local(transformer_run(model, "bucketed"));
    EXPECT_TRUE(a.final_params == b.final_params) << model;
    ASSERT_EQ(a.steps.size(), b.steps.size());
    for (std::size_t i = 0; i < a.steps.size(); ++i) EXPECT_EQ(a.steps[i].loss, b.steps[i].loss);
  }
}

TEST(CudaTransformerTrainerTest, TrainsOnATextFileWithAValidationLoss) {
  TANDEM_SKIP_WITHOUT_GPU();
  TrainConfig gpu_config =
      transformer_run("gpt:layers=1,dim=32,heads=4,seq=16,vocab=256", "bucketed");
  gpu_config.data_path = TANDEM_SOURCE_DIR "/README.md";
  gpu_config.eval_every = 2;
  TrainConfig cpu_config = gpu_config;
  cpu_config.device = Device::kCpu;
  const TrainResult gpu = train_local(gpu_config);
  const TrainResult cpu = train_local(cpu_config);
  ASSERT_TRUE(gpu.steps.back().has_val_loss);
  ASSERT_TRUE(cpu.steps.back().has_val_loss);
  std::printf("validation loss %.5f vs cpu %.5f\n", static_cast<double>(gpu.steps.back().val_loss),
              static_cast<double>(cpu.steps.back().val_loss));
  EXPECT_NEAR(gpu.steps.back().val_loss, cpu.steps.back().val_loss,
              1e-4 * (1 + std::abs(cpu.steps.back().val_loss)));
  EXPECT_LE(l2_rel_diff(gpu.final_params, cpu.final_params), 1e-4);
}

TEST(CudaTransformerTrainerTest, ARunTooLargeForTheDeviceIsOneLineNamingTheBytes) {
  TANDEM_SKIP_WITHOUT_GPU();
  TrainConfig config = transformer_run("gpt3-xl", "bucketed");
  config.batch = 64;  // terabytes of activations
  try {
    validate(config);
    ADD_FAILURE() << "gpt3-xl with batch 64 was accepted";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    std::printf("%s\n", what.c_str());
    EXPECT_NE(what.find("device memory"), std::string::npos) << what;
    EXPECT_NE(what.find("bytes"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

// Mixed precision (docs/GPU.md, "Mixed precision"): bf16 and fp16 linear layers with
// fp32 master weights train like the fp32 cpu reference within the 16-bit formats'
// rounding (bf16 keeps 8 bits of mantissa, fp16 11); fp16 reports its loss scale.
TEST(CudaTransformerTrainerTest, Bf16AndFp16TrainLikeTheCpuWithinTheirRounding) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (const char* model : {kGpt, kLlama}) {
    TrainConfig cpu_config = transformer_run(model, "bucketed");
    cpu_config.steps = 6;
    cpu_config.device = Device::kCpu;
    const TrainResult cpu = train_local(cpu_config);
    for (Precision p : {Precision::kBf16, Precision::kFp16}) {
      TrainConfig config = transformer_run(model, "bucketed");
      config.steps = 6;
      config.precision = p;
      const TrainResult gpu = train_local(config);
      ASSERT_EQ(gpu.steps.size(), cpu.steps.size());
      const double tolerance = p == Precision::kBf16 ? 2e-2 : 4e-3;
      for (std::size_t i = 0; i < gpu.steps.size(); ++i) {
        EXPECT_NEAR(gpu.steps[i].loss, cpu.steps[i].loss,
                    tolerance * std::abs(cpu.steps[i].loss))
            << model << " " << to_string(p) << " step " << i;
      }
      const double diff = l2_rel_diff(gpu.final_params, cpu.final_params);
      std::printf("%s %s: loss %.5f vs cpu fp32 %.5f, parameters differ by %.3g (l2 rel)\n",
                  model, std::string(to_string(p)).c_str(),
                  static_cast<double>(gpu.steps.back().loss),
                  static_cast<double>(cpu.steps.back().loss), diff);
      EXPECT_LE(diff, tolerance) << model << " " << to_string(p);
      // Only fp16 carries a loss scale; nothing overflows here, so no step is skipped.
      EXPECT_EQ(gpu.steps.back().loss_scale, p == Precision::kFp16 ? 65536.0f : 0.0f);
      EXPECT_EQ(gpu.steps.back().skipped_steps, 0);
    }
  }
}

// Sharded strategies and pipelines see part of the gradient: fp16's loss scale would skip
// steps on some ranks only. No GPU needed: the check runs before the device.
TEST(CudaTransformerTrainerTest, Fp16WithShardsOrStagesIsRefusedNamingPrecision) {
  for (const char* strategy : {"zero2", "fsdp"}) {
    TrainConfig config = transformer_run(kGpt, strategy);
    config.precision = Precision::kFp16;
    try {
      validate(config);
      ADD_FAILURE() << strategy << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--precision fp16", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
    }
    config.precision = Precision::kBf16;
    EXPECT_NO_THROW(validate(config)) << strategy;
  }
}

}  // namespace
}  // namespace tandem
