// Model: composes the kernels of layers.h over the flat reverse-ordered storage.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "core/error.h"
#include "model/layers.h"
#include "model/rng.h"

namespace tandem {

// Note [Model buffers]
// acts[L] is Linear layer L's input: acts[0] is a copy of the batch's x, acts[L+1] is
// activation(pre[L]). pre[L] is layer L's output before the activation, kept because
// the GELU backward needs it (pre[last] are the logits). Backward ping-pongs between
// two scratch arrays: grad_a holds dL/d(output of layer L), the layer turns it into
// dL/d(input of layer L) in grad_b, and the two swap.
struct Model::Impl {
  struct Layer {
    int in = 0;
    int out = 0;
    std::size_t weight = 0;  // offsets into the flat arrays
    std::size_t bias = 0;    // valid when has_bias
    bool has_bias = false;
    std::size_t begin = 0;  // [begin, end): this layer's range of the flat arrays
    std::size_t end = 0;
  };

  std::vector<Layer> layers;
  int max_batch = 0;
  int rows = 0;  // of the last forward; 0 before the first

  std::vector<std::vector<float>> acts;
  std::vector<std::vector<float>> pre;
  std::vector<float> probs;
  std::vector<std::int32_t> targets;
  std::vector<float> grad_a;
  std::vector<float> grad_b;
};

Model::Model(const ModelSpec& spec, int max_batch, std::uint64_t seed)
    : spec_(spec), impl_(std::make_unique<Impl>()) {
  TANDEM_CHECK(spec.depth >= 1 && spec.input >= 1 && spec.classes >= 1);
  TANDEM_CHECK(spec.depth == 1 || spec.width >= 1);
  if (max_batch < 1) {
    throw UsageError("model '" + spec.text + "': batch must be >= 1 (got " +
                     std::to_string(max_batch) + ")");
  }
  Impl& m = *impl_;
  m.max_batch = max_batch;

  // Shapes in forward order.
  const int depth = spec.depth;
  m.layers.resize(depth);
  int widest = 0;
  for (int l = 0; l < depth; ++l) {
    m.layers[l].in = l == 0 ? spec.input : spec.width;
    m.layers[l].out = l == depth - 1 ? spec.classes : spec.width;
    m.layers[l].has_bias = spec.bias;
    widest = std::max({widest, m.layers[l].in, m.layers[l].out});
  }
  // Activation buffers are indexed with int rows * int width inside BLAS calls.
  if (static_cast<std::int64_t>(max_batch) * widest > std::numeric_limits<int>::max()) {
    throw UsageError("model '" + spec.text + "': batch " + std::to_string(max_batch) +
                     " is too large for width " + std::to_string(widest));
  }

  // Flat layout in reverse order, weight then bias within a layer (see model.h).
  std::size_t offset = 0;
  for (int l = depth - 1; l >= 0; --l) {
    Impl::Layer& layer = m.layers[l];
    layer.begin = offset;
    layer.weight = offset;
    offset += static_cast<std::size_t>(layer.in) * layer.out;
    if (layer.has_bias) {
      layer.bias = offset;
      offset += layer.out;
    }
    layer.end = offset;
  }
  TANDEM_CHECK_EQ(static_cast<std::int64_t>(offset), spec.parameter_count());
  params_flat_.assign(offset, 0.0f);
  grads_flat_.assign(offset, 0.0f);

  // ParamInfo in forward registration order.
  for (int l = 0; l < depth; ++l) {
    const Impl::Layer& layer = m.layers[l];
    const std::string prefix = "fc" + std::to_string(l);
    params_.push_back(
        {prefix + ".weight", l, static_cast<std::size_t>(layer.in) * layer.out, layer.weight});
    if (layer.has_bias) {
      params_.push_back({prefix + ".bias", l, static_cast<std::size_t>(layer.out), layer.bias});
    }
  }

  // Kaiming-uniform: U(-b, b) with b = gain * sqrt(3 / fan_in) gives Var = gain^2 / fan_in.
  // gain = sqrt(2) for layers followed by ReLU/GELU (they halve the variance), 1 for the
  // last layer so the initial logits are O(1) and the initial loss is near log(classes).
  // One stream in forward order: the same seed gives the same parameters everywhere.
  detail::SplitMix64 rng(detail::mix64(seed ^ 0x6d6f64656c696e69ULL));  // "modelini"
  for (int l = 0; l < depth; ++l) {
    const Impl::Layer& layer = m.layers[l];
    const double gain = l < depth - 1 ? std::sqrt(2.0) : 1.0;
    const double bound = gain * std::sqrt(3.0 / layer.in);
    float* w = params_flat_.data() + layer.weight;
    const std::size_t n = static_cast<std::size_t>(layer.in) * layer.out;
    for (std::size_t i = 0; i < n; ++i) w[i] = static_cast<float>(rng.uniform(-bound, bound));
  }

  const std::size_t rows = static_cast<std::size_t>(max_batch);
  m.acts.resize(depth);
  m.pre.resize(depth);
  for (int l = 0; l < depth; ++l) {
    m.acts[l].assign(rows * m.layers[l].in, 0.0f);
    m.pre[l].assign(rows * m.layers[l].out, 0.0f);
  }
  m.probs.assign(rows * spec.classes, 0.0f);
  m.targets.assign(rows, 0);
  m.grad_a.assign(rows * widest, 0.0f);
  m.grad_b.assign(rows * widest, 0.0f);
}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

int Model::layer_count() const { return static_cast<int>(impl_->layers.size()); }
int Model::max_batch() const { return impl_->max_batch; }

void Model::zero_grad() { std::fill(grads_flat_.begin(), grads_flat_.end(), 0.0f); }

std::size_t Model::layer_grad_begin(int layer) const {
  TANDEM_CHECK(layer >= 0 && layer < layer_count());
  return impl_->layers[layer].begin;
}

std::size_t Model::layer_grad_end(int layer) const {
  TANDEM_CHECK(layer >= 0 && layer < layer_count());
  return impl_->layers[layer].end;
}

double Model::forward_flops(int rows) const {
  double flops = 0;
  for (const Impl::Layer& layer : impl_->layers) {
    flops += 2.0 * rows * layer.in * layer.out;
  }
  return flops;
}

std::span<const float> Model::logits() const {
  const Impl& m = *impl_;
  return {m.pre.back().data(), static_cast<std::size_t>(m.rows) * spec_.classes};
}

namespace {

void activation_forward(Activation activation, float* out, const float* inp, std::int64_t n) {
  switch (activation) {
    case Activation::kReLU:
      layers::relu_forward(out, inp, n);
      break;
    case Activation::kGELU:
      layers::gelu_forward(out, inp, n);
      break;
    case Activation::kNone:
      std::copy_n(inp, n, out);
      break;
  }
}

void activation_backward(Activation activation, float* dinp, const float* inp, const float* dout,
                         std::int64_t n) {
  switch (activation) {
    case Activation::kReLU:
      layers::relu_backward(dinp, inp, dout, n);
      break;
    case Activation::kGELU:
      layers::gelu_backward(dinp, inp, dout, n);
      break;
    case Activation::kNone:
      std::copy_n(dout, n, dinp);
      break;
  }
}

}  // namespace

// Shapes, B = rows: x [B, input] -> layer L: [B, in_L] . [in_L, out_L] + [out_L] ->
// activation (all but the last) -> logits [B, classes] -> mean softmax cross-entropy.
float Model::forward(const Batch& batch, RankRecorder& recorder, int step) {
  Impl& m = *impl_;
  const int B = batch.rows;
  TANDEM_CHECK(B >= 1 && B <= m.max_batch);
  TANDEM_CHECK(batch.x.size() >= static_cast<std::size_t>(B) * spec_.input);
  TANDEM_CHECK(batch.y.size() >= static_cast<std::size_t>(B));
  for (int b = 0; b < B; ++b) {
    TANDEM_CHECK(batch.y[b] >= 0 && batch.y[b] < spec_.classes);
  }
  m.rows = B;
  // Copied so backward does not depend on the caller keeping the batch alive; B*input
  // floats are small next to the layer's B*input*output multiply-adds.
  std::copy_n(batch.x.data(), static_cast<std::size_t>(B) * spec_.input, m.acts[0].data());
  std::copy_n(batch.y.data(), B, m.targets.data());

  const int last = layer_count() - 1;
  for (int l = 0; l <= last; ++l) {
    const Impl::Layer& layer = m.layers[l];
    ScopedSpan span(recorder, Lane::kCompute, SpanKind::kForward, step, l, kNoName,
                    2.0 * B * layer.in * layer.out);
    const float* w = params_flat_.data() + layer.weight;
    const float* bias = layer.has_bias ? params_flat_.data() + layer.bias : nullptr;
    layers::linear_forward(m.pre[l].data(), m.acts[l].data(), w, bias, B, layer.in, layer.out);
    if (l < last) {
      activation_forward(spec_.activation, m.acts[l + 1].data(), m.pre[l].data(),
                         static_cast<std::int64_t>(B) * layer.out);
    }
  }
  ScopedSpan span(recorder, Lane::kCompute, SpanKind::kForward, step, layer_count());
  return layers::softmax_cross_entropy_forward(m.probs.data(), m.pre[last].data(), m.targets.data(),
                                               B, spec_.classes);
}

// Reverse of forward: dlogits [B, classes]; for L = last..0: d(out_L) [B, out_L] ->
// activation backward (L < last) -> dW_L [in_L, out_L] +=, db_L [out_L] +=,
// d(in_L) [B, in_L] = (L > 0) -> on_layer_ready(L).
void Model::backward(RankRecorder& recorder, int step,
                     const std::function<void(int layer)>& on_layer_ready) {
  Impl& m = *impl_;
  const int B = m.rows;
  TANDEM_CHECK(B >= 1);  // forward() must run first
  const int last = layer_count() - 1;

  float* dout = m.grad_a.data();
  float* dinp = m.grad_b.data();
  {
    ScopedSpan span(recorder, Lane::kCompute, SpanKind::kBackward, step, layer_count());
    layers::softmax_cross_entropy_backward(dout, m.probs.data(), m.targets.data(), B,
                                           spec_.classes);
  }
  for (int l = last; l >= 0; --l) {
    const Impl::Layer& layer = m.layers[l];
    {
      const double flops = (l > 0 ? 4.0 : 2.0) * B * layer.in * layer.out;
      ScopedSpan span(recorder, Lane::kCompute, SpanKind::kBackward, step, l, kNoName, flops);
      if (l < last) {
        // dout holds dL/d(activation output); turn it into dL/d(pre-activation) in place.
        activation_backward(spec_.activation, dout, m.pre[l].data(), dout,
                            static_cast<std::int64_t>(B) * layer.out);
      }
      float* dw = grads_flat_.data() + layer.weight;
      float* db = layer.has_bias ? grads_flat_.data() + layer.bias : nullptr;
      const float* w = params_flat_.data() + layer.weight;
      // Layer 0's input gradient would be dL/dx, which nothing uses.
      layers::linear_backward(l > 0 ? dinp : nullptr, dw, db, dout, m.acts[l].data(), w, B,
                              layer.in, layer.out);
    }
    if (on_layer_ready) on_layer_ready(l);
    std::swap(dout, dinp);
  }
}

}  // namespace tandem
