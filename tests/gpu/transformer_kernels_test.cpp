// Each transformer kernel of the GPU (compute/cuda/transformer_kernels.h, attention.h, the
// aliased cross-entropy of kernels.h) against its CPU twin in layers::Ops<float>, on small
// shapes with a partial block and a partial warp. Forward and backward, the parameter
// gradients accumulated onto nonzero values (+=), the residual paths aliased as the
// model runs them. Each check prints the largest relative difference it saw; the bound is
// 1e-5 of the largest value (fp32, sums in another order).
#include "compute/cuda/transformer_kernels.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "compute/cuda/attention.h"
#include "compute/cuda/gemm.h"
#include "compute/cuda/kernels.h"
#include "gpu/gpu_support.h"
#include "model/layers.h"

namespace tandem {
namespace {

using testing::max_rel_diff;
using testing::random_floats;
using testing::to_device;
using testing::to_host;
using Cpu = layers::Ops<float>;

constexpr double kTolerance = 1e-5;

void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  const double diff = max_rel_diff(got, want);
  std::printf("%-28s largest relative difference %.3g\n", what.c_str(), diff);
  EXPECT_LE(diff, kTolerance) << what;
}

std::vector<std::int32_t> random_tokens(std::size_t n, int vocab, std::uint64_t seed) {
  return testing::random_labels(static_cast<int>(n), vocab, seed);
}

class TransformerKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      cudaGetLastError();
      return;
    }
    stream_ = std::make_unique<cuda::Stream>();
  }
  cudaStream_t stream() const { return stream_->get(); }
  template <typename T>
  cuda::DeviceBuffer<T> dev(const std::vector<T>& host) {
    return to_device(host, stream());
  }
  template <typename T>
  std::vector<T> host(const cuda::DeviceBuffer<T>& buffer) {
    return to_host(buffer, stream());
  }

  std::unique_ptr<cuda::Stream> stream_;
};

// B sequences of T tokens; D wide, H heads; V tokens; F inner width. D = 40 is not a
// multiple of 32 and 40 columns leave a partial column block in the (32 x 8) reductions.
constexpr int B = 3, Tn = 7, D = 40, H = 4, V = 13, F = 24;
constexpr int N = B * Tn;

TEST_F(TransformerKernelTest, EmbeddingForwardAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  // Tokens repeat (V < N): dwte rows take several contributions, in order.
  const auto tokens = random_tokens(N, V, 1);
  const auto wte = random_floats(static_cast<std::size_t>(V) * D, 2);
  const auto wpe = random_floats(static_cast<std::size_t>(Tn) * D, 3);
  const auto dout = random_floats(static_cast<std::size_t>(N) * D, 4);
  for (bool positions : {true, false}) {
    std::vector<float> out(static_cast<std::size_t>(N) * D);
    Cpu::embedding_forward(out.data(), tokens.data(), wte.data(), positions ? wpe.data() : nullptr,
                           B, Tn, D);
    auto d_tokens = dev(tokens);
    auto d_wte = dev(wte), d_wpe = dev(wpe), d_out = dev(std::vector<float>(out.size()));
    cuda::embedding_forward(d_out.data(), d_tokens.data(), d_wte.data(),
                            positions ? d_wpe.data() : nullptr, B, Tn, D, stream());
    expect_close(host(d_out), out, positions ? "embedding forward (gpt)" : "embedding forward");

    auto dwte = random_floats(wte.size(), 5), dwpe = random_floats(wpe.size(), 6);
    auto d_dwte = dev(dwte), d_dwpe = dev(dwpe), d_dout = dev(dout);
    Cpu::embedding_backward(dwte.data(), positions ? dwpe.data() : nullptr, dout.data(),
                            tokens.data(), B, Tn, D);
    cuda::embedding_backward(d_dwte.data(), positions ? d_dwpe.data() : nullptr, d_dout.data(),
                             d_tokens.data(), B, Tn, D, stream());
    expect_close(host(d_dwte), dwte, "embedding backward dwte");
    expect_close(host(d_dwpe), dwpe, "embedding backward dwpe");
  }
}

TEST_F(TransformerKernelTest, LayerNormForwardAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  const auto inp = random_floats(static_cast<std::size_t>(N) * D, 11, 2.0);
  const auto weight = random_floats(D, 12), bias = random_floats(D, 13);
  std::vector<float> out(inp.size()), mean(N), rstd(N);
  Cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                         bias.data(), N, D);
  auto d_inp = dev(inp), d_w = dev(weight), d_b = dev(bias);
  auto d_out = dev(std::vector<float>(out.size())), d_mean = dev(std::vector<float>(N)),
       d_rstd = dev(std::vector<float>(N));
  cuda::layernorm_forward(d_out.data(), d_mean.data(), d_rstd.data(), d_inp.data(), d_w.data(),
                          d_b.data(), N, D, stream());
  expect_close(host(d_out), out, "layernorm forward");
  expect_close(host(d_mean), mean, "layernorm mean");
  expect_close(host(d_rstd), rstd, "layernorm rstd");

  // Backward as the model runs it: dinp aliases dresidual (the stream's gradient).
  const auto dout = random_floats(inp.size(), 14);
  auto dx = random_floats(inp.size(), 15);
  auto dweight = random_floats(D, 16), dbias = random_floats(D, 17);
  auto d_dout = dev(dout), d_dx = dev(dx), d_dw = dev(dweight), d_db = dev(dbias);
  Cpu::layernorm_backward(dx.data(), dweight.data(), dbias.data(), dx.data(), dout.data(),
                          inp.data(), weight.data(), mean.data(), rstd.data(), N, D);
  cuda::layernorm_backward(d_dx.data(), d_dw.data(), d_db.data(), d_dx.data(), d_dout.data(),
                           d_inp.data(), d_w.data(), d_mean.data(), d_rstd.data(), N, D, stream());
  expect_close(host(d_dx), dx, "layernorm backward dinp");
  expect_close(host(d_dw), dweight, "layernorm backward dweight");
  expect_close(host(d_db), dbias, "layernorm backward dbias");
}

TEST_F(TransformerKernelTest, RmsNormForwardAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  const auto inp = random_floats(static_cast<std::size_t>(N) * D, 21, 2.0);
  const auto weight = random_floats(D, 22);
  std::vector<float> out(inp.size()), rstd(N);
  Cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, D);
  auto d_inp = dev(inp), d_w = dev(weight);
  auto d_out = dev(std::vector<float>(out.size())), d_rstd = dev(std::vector<float>(N));
  cuda::rmsnorm_forward(d_out.data(), d_rstd.data(), d_inp.data(), d_w.data(), N, D, stream());
  expect_close(host(d_out), out, "rmsnorm forward");
  expect_close(host(d_rstd), rstd, "rmsnorm rstd");

  const auto dout = random_floats(inp.size(), 24);
  for (bool residual : {true, false}) {
    auto dx = random_floats(inp.size(), 25);
    auto dweight = random_floats(D, 26);
    auto d_dout = dev(dout), d_dx = dev(dx), d_dw = dev(dweight);
    Cpu::rmsnorm_backward(dx.data(), dweight.data(), residual ? dx.data() : nullptr, dout.data(),
                          inp.data(), weight.data(), rstd.data(), N, D);
    cuda::rmsnorm_backward(d_dx.data(), d_dw.data(), residual ? d_dx.data() : nullptr,
                           d_dout.data(), d_inp.data(), d_w.data(), d_rstd.data(), N, D, stream());
    expect_close(host(d_dx), dx, residual ? "rmsnorm backward dinp (+res)" : "rmsnorm dinp");
    expect_close(host(d_dw), dweight, "rmsnorm backward dweight");
  }
}

TEST_F(TransformerKernelTest, ResidualAddThenGemmIsTheCpuLinearResidual) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int I = 24;
  const auto residual = random_floats(static_cast<std::size_t>(N) * D, 31);
  const auto inp = random_floats(static_cast<std::size_t>(N) * I, 32);
  const auto weight = random_floats(static_cast<std::size_t>(I) * D, 33);
  const auto bias = random_floats(D, 34);
  cuda::CublasHandle blas;
  blas.set_stream(stream());
  for (bool with_bias : {true, false}) {
    std::vector<float> out(residual.size());
    Cpu::linear_residual_forward(out.data(), residual.data(), inp.data(), weight.data(),
                                 with_bias ? bias.data() : nullptr, N, I, D);
    auto d_res = dev(residual), d_inp = dev(inp), d_w = dev(weight), d_b = dev(bias);
    auto d_out = dev(std::vector<float>(out.size()));
    cuda::residual_forward(d_out.data(), d_res.data(), with_bias ? d_b.data() : nullptr, N, D,
                           stream());
    cuda::gemm(blas, Precision::kFp32, false, false, N, D, I, 1.0f, d_inp.data(), I, d_w.data(), D,
               1.0f, d_out.data(), D);
    expect_close(host(d_out), out, with_bias ? "residual + bias + x.W" : "residual + x.W");
  }
}

TEST_F(TransformerKernelTest, SwigluForwardAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  const auto gate_up = random_floats(static_cast<std::size_t>(N) * 2 * F, 41, 3.0);
  const auto dout = random_floats(static_cast<std::size_t>(N) * F, 42);
  std::vector<float> out(dout.size()), dgu(gate_up.size());
  Cpu::swiglu_forward(out.data(), gate_up.data(), N, F);
  Cpu::swiglu_backward(dgu.data(), dout.data(), gate_up.data(), N, F);
  auto d_gu = dev(gate_up), d_dout = dev(dout);
  auto d_out = dev(std::vector<float>(out.size())), d_dgu = dev(std::vector<float>(dgu.size()));
  cuda::swiglu_forward(d_out.data(), d_gu.data(), N, F, stream());
  cuda::swiglu_backward(d_dgu.data(), d_dout.data(), d_gu.data(), N, F, stream());
  expect_close(host(d_out), out, "swiglu forward");
  expect_close(host(d_dgu), dgu, "swiglu backward");
}

TEST_F(TransformerKernelTest, GeluMatchesTheCpuOnTransformerSizedInputs) {
  TANDEM_SKIP_WITHOUT_GPU();
  const auto inp = random_floats(static_cast<std::size_t>(N) * F, 51, 4.0);
  const auto dout = random_floats(inp.size(), 52);
  std::vector<float> out(inp.size()), dinp(inp.size());
  Cpu::gelu_forward(out.data(), inp.data(), static_cast<std::int64_t>(inp.size()));
  Cpu::gelu_backward(dinp.data(), inp.data(), dout.data(), static_cast<std::int64_t>(inp.size()));
  auto d_inp = dev(inp), d_dout = dev(dout), d_out = dev(std::vector<float>(out.size()));
  auto d_dinp = dev(std::vector<float>(dinp.size()));
  cuda::gelu_forward(d_out.data(), d_inp.data(), static_cast<std::int64_t>(inp.size()), stream());
  cuda::gelu_backward(d_dinp.data(), d_inp.data(), d_dout.data(),
                      static_cast<std::int64_t>(inp.size()), stream());
  expect_close(host(d_out), out, "gelu forward");
  expect_close(host(d_dinp), dinp, "gelu backward");
}

TEST_F(TransformerKernelTest, RopeForwardAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  const int hd = D / H;
  std::vector<float> table(static_cast<std::size_t>(Tn) * hd);
  Cpu::rope_table(table.data(), Tn, hd);
  auto qkv = random_floats(static_cast<std::size_t>(N) * 3 * D, 61);
  auto d_qkv = dev(qkv), d_table = dev(table);
  Cpu::rope_forward(qkv.data(), table.data(), B, Tn, D, H);
  cuda::rope_forward(d_qkv.data(), d_table.data(), B, Tn, D, H, stream());
  expect_close(host(d_qkv), qkv, "rope forward");
  Cpu::rope_backward(qkv.data(), table.data(), B, Tn, D, H);
  cuda::rope_backward(d_qkv.data(), d_table.data(), B, Tn, D, H, stream());
  expect_close(host(d_qkv), qkv, "rope backward");
}

TEST_F(TransformerKernelTest, CausalAttentionForwardAndBackward) {
  TANDEM_SKIP_WITHOUT_GPU();
  const auto qkv = random_floats(static_cast<std::size_t>(N) * 3 * D, 71, 2.0);
  const auto dout = random_floats(static_cast<std::size_t>(N) * D, 72);
  const std::size_t att_size = static_cast<std::size_t>(B) * H * Tn * Tn;
  std::vector<float> out(dout.size()), att(att_size), dqkv(qkv.size());
  std::vector<float> scratch(static_cast<std::size_t>(Tn) * Tn);
  Cpu::attention_forward(out.data(), att.data(), qkv.data(), B, Tn, D, H);
  Cpu::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, Tn,
                          D, H);
  cuda::CublasHandle blas;
  blas.set_stream(stream());
  auto d_qkv = dev(qkv), d_dout = dev(dout);
  auto d_out = dev(std::vector<float>(out.size())), d_att = dev(std::vector<float>(att_size));
  auto d_dqkv = dev(std::vector<float>(qkv.size()));
  auto d_scratch = dev(std::vector<float>(static_cast<std::size_t>(H) * Tn * Tn));
  cuda::attention_forward(blas, Precision::kFp32, d_out.data(), d_att.data(), d_qkv.data(), B, Tn,
                          D, H, stream());
  cuda::attention_backward(blas, Precision::kFp32, d_dqkv.data(), d_scratch.data(), d_dout.data(),
                           d_qkv.data(), d_att.data(), B, Tn, D, H, stream());
  const auto got_att = host(d_att);
  expect_close(got_att, att, "attention probabilities");
  // The mask: exactly zero above the diagonal.
  for (std::size_t row = 0; row < att_size / Tn; ++row) {
    const std::size_t t = row % Tn;
    for (std::size_t s = t + 1; s < static_cast<std::size_t>(Tn); ++s) {
      ASSERT_EQ(got_att[row * Tn + s], 0.0f) << "row " << row << " s " << s;
    }
  }
  expect_close(host(d_out), out, "attention forward");
  expect_close(host(d_dqkv), dqkv, "attention backward dqkv");
}

TEST_F(TransformerKernelTest, CrossEntropyInPlaceOverAVocabularyRow) {
  TANDEM_SKIP_WITHOUT_GPU();
  // Rows wider than a block (the vocabulary), the probabilities written over the logits
  // and the gradient over the probabilities, as the transformer runs it.
  const int C = 700;
  auto logits = random_floats(static_cast<std::size_t>(N) * C, 81, 8.0);
  const auto targets = random_tokens(N, C, 82);
  auto d_logits = dev(logits);
  auto d_targets = dev(targets);
  auto d_rows = dev(std::vector<float>(N));
  cuda::DeviceBuffer<double> d_sum(1);
  d_sum.zero(stream());
  const double loss =
      Cpu::cross_entropy_forward(logits.data(), logits.data(), targets.data(), N, C);
  cuda::softmax_cross_entropy_forward(d_logits.data(), d_rows.data(), d_logits.data(),
                                      d_targets.data(), N, C, stream());
  cuda::accumulate_mean(d_sum.data(), d_rows.data(), N, stream());
  expect_close(host(d_logits), logits, "softmax in place");
  const double got = host(d_sum)[0];
  std::printf("cross-entropy %.7f vs cpu %.7f\n", got, loss);
  EXPECT_NEAR(got, loss, 1e-5 * (1 + loss));
  Cpu::cross_entropy_backward(logits.data(), logits.data(), targets.data(), N, C);
  cuda::softmax_cross_entropy_backward(d_logits.data(), d_logits.data(), d_targets.data(), N, C,
                                       stream());
  expect_close(host(d_logits), logits, "cross-entropy backward");
}

TEST_F(TransformerKernelTest, RepeatedKernelsAreBitwiseEqual) {
  TANDEM_SKIP_WITHOUT_GPU();
  // The reductions over rows (dweight, dwte) and within rows run in a fixed order.
  const auto inp = random_floats(static_cast<std::size_t>(N) * D, 91);
  const auto dout = random_floats(inp.size(), 92);
  const auto weight = random_floats(D, 93);
  const auto tokens = random_tokens(N, V, 94);
  auto run = [&] {
    auto d_inp = dev(inp), d_dout = dev(dout), d_w = dev(weight);
    auto d_tokens = dev(tokens);
    auto d_rstd = dev(std::vector<float>(N)), d_out = dev(std::vector<float>(inp.size()));
    auto d_dx = dev(std::vector<float>(inp.size())), d_dw = dev(std::vector<float>(D));
    auto d_dwte = dev(std::vector<float>(static_cast<std::size_t>(V) * D));
    cuda::rmsnorm_forward(d_out.data(), d_rstd.data(), d_inp.data(), d_w.data(), N, D, stream());
    cuda::rmsnorm_backward(d_dx.data(), d_dw.data(), nullptr, d_dout.data(), d_inp.data(),
                           d_w.data(), d_rstd.data(), N, D, stream());
    cuda::embedding_backward(d_dwte.data(), nullptr, d_dout.data(), d_tokens.data(), B, Tn, D,
                             stream());
    return std::vector<std::vector<float>>{host(d_out), host(d_dx), host(d_dw), host(d_dwte)};
  };
  EXPECT_EQ(run(), run());
}

}  // namespace
}  // namespace tandem
