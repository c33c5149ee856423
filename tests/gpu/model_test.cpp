// The whole GPU model against the CPU engine: same spec, same parameters, same batch ->
// loss, logits and every parameter's gradient within the precision's tolerance; the
// same layer-ready order and the same list of compute spans.
#include <gtest/gtest.h>

#include <cstdio>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "gpu/gpu_support.h"
#include "model/cuda/cuda_models.h"
#include "model/mlp.h"
#include "model/test_util.h"
#include "timeline/gpu/event_timer.h"
#include "timeline/recorder.h"

namespace tandem {
namespace {

using testing::l2_rel_diff;
using testing::max_rel_diff;
using testing::to_device;
using testing::tolerance;

struct ModelCase {
  std::string spec;
  Precision precision;
};

void PrintTo(const ModelCase& c, std::ostream* os) {
  *os << c.spec << " " << to_string(c.precision);
}

class CudaModelTest : public ::testing::TestWithParam<ModelCase> {};

TEST_P(CudaModelTest, LossLogitsAndGradientsMatchCpuModel) {
  TANDEM_SKIP_WITHOUT_GPU();
  const ModelCase& c = GetParam();
  const ModelSpec spec = ModelSpec::parse(c.spec, 10);
  const int rows = 16, max_batch = 21;  // strides must follow the batch, not the capacity
  Mlp cpu(spec, max_batch, 7);
  testing::randomize_params(cpu, 8);  // non-zero biases exercise the bias paths
  const testing::OwnedBatch batch = testing::random_batch(rows, spec.input, spec.classes, 9);

  RankRecorder cpu_spans(0, 256);
  cpu.zero_grad();
  const float cpu_loss = cpu.forward(batch.view(), cpu_spans, 3);
  std::vector<int> cpu_order;
  cpu.backward(cpu_spans, 3, [&](int layer) { cpu_order.push_back(layer); });

  cuda::Stream stream;
  cuda::CudaModel gpu(spec, max_batch, 7, {}, {c.precision, stream.get()});
  ASSERT_EQ(gpu.flat_params().size(), cpu.flat_params().size());
  gpu.backend().upload(gpu.flat_params(), cpu.flat_params());
  const auto x = to_device(batch.x, stream.get());
  const auto y = to_device(batch.y, stream.get());
  cuda::EventTimer timer(0);
  RankRecorder gpu_spans(0, 256);
  timer.start_step(stream.get());
  gpu.zero_grad();
  gpu.backend().reset_loss_sum();
  gpu.forward({.x = x.data(), .y = y.data(), .rows = rows}, &timer, 3);
  std::vector<int> gpu_order;
  gpu.backward(&timer, 3, [&](int layer) { gpu_order.push_back(layer); });
  const double gpu_loss = gpu.backend().read_loss_sum();
  timer.flush(gpu_spans);

  const double tol = tolerance(c.precision);
  EXPECT_EQ(gpu_order, cpu_order);
  EXPECT_NEAR(gpu_loss, cpu_loss, tol * (1 + std::abs(cpu_loss)));
  const double logit_diff = max_rel_diff(gpu.backend().download(gpu.logits()), cpu.logits());
  EXPECT_LE(logit_diff, tol);
  const std::vector<float> grads = gpu.backend().download(gpu.flat_grads());
  const auto cpu_grads = cpu.flat_grads();
  double worst = 0;
  for (const ParamInfo& p : cpu.params()) {
    const double diff = l2_rel_diff(std::span<const float>(grads).subspan(p.offset, p.numel),
                                    cpu_grads.subspan(p.offset, p.numel));
    worst = std::max(worst, diff);
    EXPECT_LE(diff, tol) << p.name;
  }
  std::printf("%s %s: loss %.6f vs %.6f, logits %.3g, worst gradient (l2 rel) %.3g\n",
              c.spec.c_str(), std::string(to_string(c.precision)).c_str(), gpu_loss,
              static_cast<double>(cpu_loss), logit_diff, worst);

  // Same spans as the CPU model, in the same order: kind, tag and flops.
  const auto want = cpu_spans.collect();
  const auto got = gpu_spans.collect();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].kind, want[i].kind) << i;
    EXPECT_EQ(got[i].tag, want[i].tag) << i;
    EXPECT_EQ(got[i].step, 3) << i;
    EXPECT_DOUBLE_EQ(got[i].flops, want[i].flops) << i;
    EXPECT_LE(got[i].start_ns, got[i].end_ns) << i;
    if (i > 0) {
      EXPECT_GE(got[i].start_ns, got[i - 1].end_ns) << "one stream: spans in order";
    }
  }
}

std::vector<ModelCase> cases() {
  std::vector<ModelCase> out;
  for (const char* spec : {"mlp:3x64", "mlp:3x64,gelu", "linear:48x24", "mlp:1x40"}) {
    for (Precision p : testing::kAllPrecisions) out.push_back({spec, p});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(SpecsAndPrecisions, CudaModelTest, ::testing::ValuesIn(cases()));

TEST(CudaModelLayoutTest, SameFlatLayoutAndInitialParametersAsCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  const ModelSpec spec = ModelSpec::parse("mlp:4x32", 10);
  const Mlp cpu(spec, 8, 123);
  cuda::Stream stream;
  const cuda::CudaModel gpu(spec, 8, 123, {}, {Precision::kFp32, stream.get()});
  ASSERT_EQ(gpu.params().size(), cpu.params().size());
  for (std::size_t i = 0; i < cpu.params().size(); ++i) {
    EXPECT_EQ(gpu.params()[i].name, cpu.params()[i].name);
    EXPECT_EQ(gpu.params()[i].offset, cpu.params()[i].offset);
    EXPECT_EQ(gpu.params()[i].numel, cpu.params()[i].numel);
  }
  for (int l = 0; l < cpu.layer_count(); ++l) {
    EXPECT_EQ(gpu.layer_grad_begin(l), cpu.layer_grad_begin(l));
    EXPECT_EQ(gpu.layer_grad_end(l), cpu.layer_grad_end(l));
  }
  const std::vector<float> params = gpu.backend().download(gpu.flat_params());
  EXPECT_EQ(params, std::vector<float>(cpu.flat_params().begin(), cpu.flat_params().end()));
}

TEST(CudaModelAccumulateTest, TwoBackwardsAddTheirGradients) {
  TANDEM_SKIP_WITHOUT_GPU();
  const ModelSpec spec = ModelSpec::parse("mlp:2x32", 10);
  const testing::OwnedBatch batch = testing::random_batch(8, spec.input, spec.classes, 5);
  cuda::Stream stream;
  cuda::CudaModel gpu(spec, 8, 1, {}, {Precision::kFp32, stream.get()});
  const auto x = to_device(batch.x, stream.get());
  const auto y = to_device(batch.y, stream.get());
  const cuda::DeviceBatch b{.x = x.data(), .y = y.data(), .rows = 8};
  gpu.backend().reset_loss_sum();
  gpu.forward(b, nullptr, 0);
  gpu.backward(nullptr, 0, {});
  const std::vector<float> once = gpu.backend().download(gpu.flat_grads());
  const double loss_once = gpu.backend().read_loss_sum();
  gpu.forward(b, nullptr, 0);
  gpu.backward(nullptr, 0, {});
  const std::vector<float> twice = gpu.backend().download(gpu.flat_grads());
  std::vector<float> doubled(once);
  for (float& g : doubled) g *= 2;
  EXPECT_LE(max_rel_diff(twice, doubled), 1e-6);
  EXPECT_NEAR(gpu.backend().read_loss_sum(), 2 * loss_once,
              1e-9 * loss_once);  // the loss adds up too
}

}  // namespace
}  // namespace tandem
