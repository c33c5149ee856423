// Each CUDA building block against its CPU twin (compute/cpu/blas.h, model/layers.h,
// Mlp's Sgd): GEMM in every precision and transpose, the linear layer's forward and
// backward, activations, softmax cross-entropy, bias gradient, SGD and the casts. Each
// check prints the largest relative difference it saw.
#include "compute/cuda/kernels.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "compute/cpu/blas.h"
#include "compute/cuda/gemm.h"
#include "gpu/gpu_support.h"
#include "model/cuda/cuda_models.h"
#include "model/layers.h"
#include "model/mlp.h"
#include "model/sgd.h"
#include "timeline/gpu/event_timer.h"

namespace tandem {
namespace {

using testing::kAllPrecisions;
using testing::max_rel_diff;
using testing::random_floats;
using testing::to_device;
using testing::to_host;
using testing::tolerance;

bool low_precision(Precision p) { return p == Precision::kFp16 || p == Precision::kBf16; }

// The GEMM operand as the precision reads it: the fp32 buffer itself, or a cast copy.
class GemmOperand {
 public:
  GemmOperand(const cuda::DeviceBuffer<float>& values, Precision precision, cudaStream_t stream)
      : values_(values) {
    if (low_precision(precision)) {
      cast_ = cuda::DeviceBuffer<std::uint16_t>(values.size());
      cuda::cast_from_float(cast_.data(), values.data(), values.size(), precision, 1.0f, stream);
    }
  }
  const void* get() const {
    return cast_.size() > 0 ? static_cast<const void*>(cast_.data()) : values_.data();
  }

 private:
  const cuda::DeviceBuffer<float>& values_;
  cuda::DeviceBuffer<std::uint16_t> cast_;
};

class GemmTest : public ::testing::TestWithParam<std::tuple<Precision, bool, bool>> {};

TEST_P(GemmTest, RowMajorProductMatchesCpuSgemm) {
  TANDEM_SKIP_WITHOUT_GPU();
  const auto [precision, trans_a, trans_b] = GetParam();
  const int m = 37, n = 29, k = 53;  // odd and distinct: a swapped dimension cannot pass
  const float alpha = 0.75f, beta = 0.5f;
  const int lda = trans_a ? m : k;
  const int ldb = trans_b ? k : n;
  const auto a = random_floats(static_cast<std::size_t>(m) * k, 1);
  const auto b = random_floats(static_cast<std::size_t>(k) * n, 2);
  auto c = random_floats(static_cast<std::size_t>(m) * n, 3);

  cuda::Stream stream;
  cuda::CublasHandle blas;
  blas.set_stream(stream.get());
  const auto da = to_device(a, stream.get());
  const auto db = to_device(b, stream.get());
  auto dc = to_device(c, stream.get());
  const GemmOperand oa(da, precision, stream.get());
  const GemmOperand ob(db, precision, stream.get());
  cuda::gemm(blas, precision, trans_a, trans_b, m, n, k, alpha, oa.get(), lda, ob.get(), ldb, beta,
             dc.data(), n);
  const auto got = to_host(dc, stream.get());

  sgemm(trans_a, trans_b, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), n);
  const double diff = max_rel_diff(got, c);
  std::printf("gemm %s trans_a=%d trans_b=%d: max rel diff %.3g\n",
              std::string(to_string(precision)).c_str(), trans_a, trans_b, diff);
  EXPECT_LE(diff, tolerance(precision));
}

INSTANTIATE_TEST_SUITE_P(AllPrecisionsAndTransposes, GemmTest,
                         ::testing::Combine(::testing::ValuesIn(kAllPrecisions), ::testing::Bool(),
                                            ::testing::Bool()));

class LinearLayerTest : public ::testing::TestWithParam<Precision> {};

// The composition the CUDA backend uses: bias broadcast + GEMM forward; weight GEMM, bias
// reduction and input GEMM backward, with += on the parameter gradients.
TEST_P(LinearLayerTest, ForwardAndBackwardMatchCpuLayer) {
  TANDEM_SKIP_WITHOUT_GPU();
  const Precision precision = GetParam();
  const int B = 19, I = 45, O = 33;
  const auto inp = random_floats(static_cast<std::size_t>(B) * I, 10);
  const auto weight = random_floats(static_cast<std::size_t>(I) * O, 11, 0.3);
  const auto bias = random_floats(O, 12);
  const auto dout = random_floats(static_cast<std::size_t>(B) * O, 13);
  // Parameter gradients start non-zero: backward must add, not overwrite.
  auto dweight = random_floats(static_cast<std::size_t>(I) * O, 14);
  auto dbias = random_floats(O, 15);
  std::vector<float> out(static_cast<std::size_t>(B) * O), dinp(static_cast<std::size_t>(B) * I);

  cuda::Stream stream;
  const cudaStream_t s = stream.get();
  cuda::CublasHandle blas;
  blas.set_stream(s);
  const auto d_inp = to_device(inp, s);
  const auto d_weight = to_device(weight, s);
  const auto d_bias = to_device(bias, s);
  const auto d_dout = to_device(dout, s);
  auto d_dweight = to_device(dweight, s);
  auto d_dbias = to_device(dbias, s);
  auto d_out = to_device(out, s);
  auto d_dinp = to_device(dinp, s);
  const GemmOperand o_inp(d_inp, precision, s);
  const GemmOperand o_weight(d_weight, precision, s);
  const GemmOperand o_dout(d_dout, precision, s);

  cuda::bias_broadcast(d_out.data(), d_bias.data(), B, O, s);
  cuda::gemm(blas, precision, false, false, B, O, I, 1.0f, o_inp.get(), I, o_weight.get(), O, 1.0f,
             d_out.data(), O);
  cuda::gemm(blas, precision, true, false, I, O, B, 1.0f, o_inp.get(), I, o_dout.get(), O, 1.0f,
             d_dweight.data(), O);
  cuda::bias_backward(d_dbias.data(), d_dout.data(), B, O, s);
  cuda::gemm(blas, precision, false, true, B, I, O, 1.0f, o_dout.get(), O, o_weight.get(), O, 0.0f,
             d_dinp.data(), I);

  layers::Ops<float>::linear_forward(out.data(), inp.data(), weight.data(), bias.data(), B, I, O);
  layers::Ops<float>::linear_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                          weight.data(), B, I, O);
  const double tol = tolerance(precision);
  const double d_out_diff = max_rel_diff(to_host(d_out, s), out);
  const double d_dw_diff = max_rel_diff(to_host(d_dweight, s), dweight);
  const double d_db_diff = max_rel_diff(to_host(d_dbias, s), dbias);
  const double d_dinp_diff = max_rel_diff(to_host(d_dinp, s), dinp);
  std::printf("linear %s: out %.3g, dweight %.3g, dbias %.3g, dinp %.3g\n",
              std::string(to_string(precision)).c_str(), d_out_diff, d_dw_diff, d_db_diff,
              d_dinp_diff);
  EXPECT_LE(d_out_diff, tol);
  EXPECT_LE(d_dw_diff, tol);
  EXPECT_LE(d_db_diff, 1e-5);  // fp32 in every precision
  EXPECT_LE(d_dinp_diff, tol);
}

INSTANTIATE_TEST_SUITE_P(AllPrecisions, LinearLayerTest, ::testing::ValuesIn(kAllPrecisions));

TEST(BiasBackwardTest, ManyRowsAndAPartialColumnBlock) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int B = 1001, O = 70;  // 70 = two full 32-column blocks and a partial one
  const auto dout = random_floats(static_cast<std::size_t>(B) * O, 20);
  auto dbias = random_floats(O, 21);
  cuda::Stream stream;
  auto d_dbias = to_device(dbias, stream.get());
  const auto d_dout = to_device(dout, stream.get());
  cuda::bias_backward(d_dbias.data(), d_dout.data(), B, O, stream.get());
  for (int b = 0; b < B; ++b) {
    for (int o = 0; o < O; ++o) dbias[o] += dout[static_cast<std::size_t>(b) * O + o];
  }
  const double diff = max_rel_diff(to_host(d_dbias, stream.get()), dbias);
  std::printf("bias backward: max rel diff %.3g\n", diff);
  EXPECT_LE(diff, 1e-5);
}

TEST(ActivationTest, ReluAndGeluForwardBackwardMatchCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  const std::int64_t n = 100'003;  // more than one block, not a multiple of one
  const auto x = random_floats(n, 30, 4.0);
  const auto dout = random_floats(n, 31);
  cuda::Stream stream;
  const cudaStream_t s = stream.get();
  const auto d_x = to_device(x, s);
  const auto d_dout = to_device(dout, s);
  cuda::DeviceBuffer<float> d_y(n), d_dx(n);
  std::vector<float> y(n), dx(n);

  cuda::relu_forward(d_y.data(), d_x.data(), n, s);
  layers::Ops<float>::relu_forward(y.data(), x.data(), n);
  EXPECT_EQ(to_host(d_y, s), y);  // exact: a comparison and a copy
  cuda::relu_backward(d_dx.data(), d_x.data(), d_dout.data(), n, s);
  layers::Ops<float>::relu_backward(dx.data(), x.data(), dout.data(), n);
  EXPECT_EQ(to_host(d_dx, s), dx);

  cuda::gelu_forward(d_y.data(), d_x.data(), n, s);
  layers::Ops<float>::gelu_forward(y.data(), x.data(), n);
  const double fwd = max_rel_diff(to_host(d_y, s), y);
  // In place, as the CUDA mlp runs it: dinp == dout.
  auto d_inplace = to_device(dout, s);
  cuda::gelu_backward(d_inplace.data(), d_x.data(), d_inplace.data(), n, s);
  layers::Ops<float>::gelu_backward(dx.data(), x.data(), dout.data(), n);
  const double bwd = max_rel_diff(to_host(d_inplace, s), dx);
  std::printf("gelu: forward %.3g, backward %.3g\n", fwd, bwd);
  EXPECT_LE(fwd, 1e-5);
  EXPECT_LE(bwd, 1e-5);
}

class SoftmaxTest : public ::testing::TestWithParam<std::tuple<int, int, double>> {};

TEST_P(SoftmaxTest, LossProbabilitiesAndGradientMatchCpu) {
  TANDEM_SKIP_WITHOUT_GPU();
  const auto [B, C, scale] = GetParam();
  const auto logits = random_floats(static_cast<std::size_t>(B) * C, 40, scale);
  const auto targets = testing::random_labels(B, C, 41);
  cuda::Stream stream;
  const cudaStream_t s = stream.get();
  const auto d_logits = to_device(logits, s);
  const auto d_targets = to_device(targets, s);
  cuda::DeviceBuffer<float> d_probs(logits.size()), d_row_loss(B), d_dlogits(logits.size());
  cuda::DeviceBuffer<double> d_loss(1);
  d_loss.zero(s);

  cuda::softmax_cross_entropy_forward(d_probs.data(), d_row_loss.data(), d_logits.data(),
                                      d_targets.data(), B, C, s);
  cuda::accumulate_mean(d_loss.data(), d_row_loss.data(), B, s);
  cuda::accumulate_mean(d_loss.data(), d_row_loss.data(), B, s);  // accumulates: twice the mean
  cuda::softmax_cross_entropy_backward(d_dlogits.data(), d_probs.data(), d_targets.data(), B, C, s);

  std::vector<float> probs(logits.size()), dlogits(logits.size());
  const float loss =
      layers::Ops<float>::cross_entropy_forward(probs.data(), logits.data(), targets.data(), B, C);
  layers::Ops<float>::cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), B, C);

  const double got_loss = to_host(d_loss, s)[0] / 2;
  const double p_diff = max_rel_diff(to_host(d_probs, s), probs);
  const double d_diff = max_rel_diff(to_host(d_dlogits, s), dlogits);
  std::printf("softmax-ce B=%d C=%d scale=%g: loss %.6g vs %.6g, probs %.3g, dlogits %.3g\n", B, C,
              scale, got_loss, static_cast<double>(loss), p_diff, d_diff);
  EXPECT_TRUE(std::isfinite(got_loss));
  EXPECT_NEAR(got_loss, loss, 1e-5 * (1 + std::abs(loss)));
  EXPECT_LE(p_diff, 1e-5);
  EXPECT_LE(d_diff, 1e-5);
}

// Few and many classes (more than one pass of the block), and logits of +-100, where a
// softmax without the max shift overflows.
INSTANTIATE_TEST_SUITE_P(Shapes, SoftmaxTest,
                         ::testing::Values(std::make_tuple(13, 10, 3.0),
                                           std::make_tuple(7, 1000, 3.0),
                                           std::make_tuple(5, 3, 100.0),
                                           std::make_tuple(300, 1, 1.0)));

TEST(SgdTest, StepsMatchCpuSgd) {
  TANDEM_SKIP_WITHOUT_GPU();
  const std::size_t n = 1'000'003;
  const SgdOptions options{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f};
  auto params = random_floats(n, 50);
  cuda::Stream stream;
  const cudaStream_t s = stream.get();
  auto d_params = to_device(params, s);
  cuda::CudaSgd gpu(options, n);
  Sgd cpu(options, n);
  for (int step = 0; step < 3; ++step) {
    const auto grads = random_floats(n, 51 + step);
    const auto d_grads = to_device(grads, s);
    gpu.step(d_params.data(), d_grads.data(), 0.5f, s);
    cpu.step(params, grads, 0.5f);
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(s));  // d_grads dies at the end of the loop body
  }
  const double diff = max_rel_diff(to_host(d_params, s), params);
  std::printf("sgd: max rel diff %.3g after 3 steps\n", diff);
  EXPECT_LE(diff, 1e-6);
}

// fp16's dynamic loss scale on the device: an overflowed gradient skips the step and
// halves the scale; clean steps divide the scale out, and `growth_interval` of them in a
// row double it.
TEST(LossScaleTest, AnOverflowSkipsTheStepAndCleanStepsGrowTheScale) {
  TANDEM_SKIP_WITHOUT_GPU();
  const std::size_t n = 4099;
  const SgdOptions options{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f};
  auto params = random_floats(n, 70);
  cuda::Stream stream;
  const cudaStream_t s = stream.get();
  auto d_params = to_device(params, s);
  cuda::CudaSgd gpu(options, n);
  Sgd cpu(options, n);
  cuda::DeviceBuffer<cuda::LossScaleState> amp(1);
  const cuda::LossScaleState initial{.scale = 1024.0f};
  amp.upload(std::span<const cuda::LossScaleState>(&initial, 1), s);
  auto state = [&] {
    cuda::LossScaleState out;
    amp.download(std::span<cuda::LossScaleState>(&out, 1), s);
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(s));
    return out;
  };
  auto step = [&](const std::vector<float>& grads) {
    const auto d_grads = to_device(grads, s);
    cuda::find_nonfinite(d_grads.data(), n, amp.data(), s);
    gpu.step(d_params.data(), d_grads.data(), 0.5f, s, amp.data());
    cuda::update_loss_scale(amp.data(), /*growth_interval=*/2, s);
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(s));
  };

  // An infinity in the last element: nothing moves, the scale halves.
  auto grads = random_floats(n, 71);
  grads.back() = std::numeric_limits<float>::infinity();
  step(grads);
  EXPECT_EQ(to_host(d_params, s), params);
  cuda::LossScaleState now = state();
  EXPECT_EQ(now.scale, 512.0f);
  EXPECT_EQ(now.skipped, 1);
  EXPECT_EQ(now.found_inf, 0);
  // A NaN too.
  grads.back() = std::numeric_limits<float>::quiet_NaN();
  step(grads);
  EXPECT_EQ(state().scale, 256.0f);
  EXPECT_EQ(state().skipped, 2);

  // Two clean steps of gradients scaled by 256: the cpu's step on the unscaled ones, then
  // the scale doubles.
  for (int i = 0; i < 2; ++i) {
    const auto clean = random_floats(n, 72 + i);
    std::vector<float> scaled(clean);
    for (float& g : scaled) g *= 256.0f;  // a power of two: exact
    step(scaled);
    cpu.step(params, clean, 0.5f);
  }
  EXPECT_LE(max_rel_diff(to_host(d_params, s), params), 1e-6);
  now = state();
  EXPECT_EQ(now.scale, 512.0f);
  EXPECT_EQ(now.skipped, 2);
  EXPECT_EQ(now.clean_steps, 0);
}

TEST(CastTest, RoundTripsWithinTheFormatsPrecision) {
  TANDEM_SKIP_WITHOUT_GPU();
  const std::size_t n = 4097;
  const auto x = random_floats(n, 60, 10.0);
  cuda::Stream stream;
  const cudaStream_t s = stream.get();
  const auto d_x = to_device(x, s);
  // Round to nearest: the relative error is at most the unit roundoff 2^-p, p the
  // significand's bits with the implicit one: 2^-8 for bf16 (p = 8), 2^-11 for fp16
  // (p = 11). Truncation would reach twice that.
  for (const auto& [precision, bound] :
       {std::pair{Precision::kBf16, 1.0 / 256}, std::pair{Precision::kFp16, 1.0 / 2048}}) {
    cuda::DeviceBuffer<std::uint16_t> cast(n);
    cuda::DeviceBuffer<float> back(n);
    cuda::cast_from_float(cast.data(), d_x.data(), n, precision, 1.0f, s);
    cuda::cast_to_float(back.data(), cast.data(), n, precision, s);
    const auto got = to_host(back, s);
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (std::abs(x[i]) < 1e-3f) continue;  // fp16 subnormals round coarser
      worst = std::max(worst, std::abs(static_cast<double>(got[i]) - x[i]) / std::abs(x[i]));
    }
    std::printf("cast %s: worst relative rounding %.3g\n",
                std::string(to_string(precision)).c_str(), worst);
    EXPECT_LE(worst, bound) << to_string(precision);
  }
}

}  // namespace
}  // namespace tandem
