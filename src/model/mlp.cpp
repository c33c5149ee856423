// Mlp: composes the kernels of layers.h over the flat reverse-ordered storage.
#include "model/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "core/error.h"
#include "model/activation_slots.h"
#include "model/layers.h"

namespace tandem {

// Note [Mlp buffers]
// acts[L] is Linear layer L's input: acts[0] is a copy of the batch's x, acts[L+1] is
// activation(pre[L]). pre[L] is layer L's output before the activation, kept because
// the GELU backward needs it (pre[last] are the logits). Backward ping-pongs between
// two scratch arrays: dout holds dL/d(output of layer L), the layer turns it into
// dL/d(input of layer L) in dinp, and the two swap.
namespace {

// What one micro-batch keeps from its forward to its backward (Note [activation slots] in
// transformer.cpp): a whole model keeps one, a pipeline stage one per micro-batch in
// flight, holding only its layers' arrays.
struct MlpActs {
  int rows = 0;  // of the last set_input; 0 before the first
  std::vector<std::vector<float>> acts;
  std::vector<std::vector<float>> pre;
  std::vector<float> probs;
  std::vector<std::int32_t> targets;

  std::int64_t bytes() const {
    std::size_t n = probs.size() + targets.size();
    for (const auto& v : acts) n += v.size();
    for (const auto& v : pre) n += v.size();
    return static_cast<std::int64_t>(n * sizeof(float));
  }
};

// Sizes `a` for `rows` rows and the layers in `owned`: a layer's input and output.
void allocate_acts(MlpActs& a, const ModelLayout& layout, int rows,
                   const std::vector<bool>& owned) {
  const auto n = static_cast<std::size_t>(rows);
  const auto depth = static_cast<std::size_t>(layout.units());
  auto own = [&](std::size_t l) { return l < owned.size() && owned[l]; };
  auto sized = [](std::vector<float>& v, std::size_t size, bool keep) {
    if (keep) {
      v.assign(size, 0.0f);
    } else {
      std::vector<float>().swap(v);
    }
  };
  a.rows = 0;
  a.acts.resize(depth);
  a.pre.resize(depth);
  for (std::size_t l = 0; l < depth; ++l) {
    const LinearLayout& layer = layout.layer(static_cast<int>(l));
    sized(a.acts[l], n * static_cast<std::size_t>(layer.in), own(l) || (l > 0 && own(l - 1)));
    sized(a.pre[l], n * static_cast<std::size_t>(layer.out), own(l));
  }
  sized(a.probs, n * static_cast<std::size_t>(layout.spec().classes), own(depth - 1));
  a.targets.assign(n, 0);
}

}  // namespace

struct Mlp::Impl : MlpActs {
  int max_batch = 0;
  std::vector<float> grad_a;
  std::vector<float> grad_b;
  float* dout = nullptr;  // backward's current output gradient
  float* dinp = nullptr;
  int next_backward = -1;  // the layer backward_unit expects next (-1: none)
  // Pipeline stages: the layers this model runs, and the other slots' activations.
  std::vector<bool> owned;
  ActivationSlots<MlpActs> slots;

  MlpActs& current() { return *this; }
};

Mlp::Mlp(const ModelSpec& spec, int max_batch, std::uint64_t seed, LayoutOptions layout)
    : layout_(spec, layout), impl_(std::make_unique<Impl>()) {
  if (max_batch < 1) {
    throw UsageError("model '" + spec.text + "': batch must be >= 1 (got " +
                     std::to_string(max_batch) + ")");
  }
  // Activation buffers are indexed with int rows * int width inside BLAS calls.
  if (static_cast<std::int64_t>(max_batch) * layout_.widest() > std::numeric_limits<int>::max()) {
    throw UsageError("model '" + spec.text + "': batch " + std::to_string(max_batch) +
                     " is too large for width " + std::to_string(layout_.widest()));
  }
  Impl& m = *impl_;
  m.max_batch = max_batch;
  params_flat_ = flat_array<float>(layout_);
  grads_flat_ = flat_array<float>(layout_);
  layout_.initialize(params_flat_, seed);

  const std::size_t rows = static_cast<std::size_t>(max_batch);
  m.owned.assign(static_cast<std::size_t>(layout_.units()), true);
  allocate_acts(m, layout_, max_batch, m.owned);
  m.grad_a.assign(rows * static_cast<std::size_t>(layout_.widest()), 0.0f);
  m.grad_b.assign(rows * static_cast<std::size_t>(layout_.widest()), 0.0f);
}

std::int64_t Mlp::buffer_bytes(const ModelSpec& spec, int max_batch) {
  // As the constructor allocates them (Note [Mlp buffers]).
  const ModelLayout layout(spec);
  std::int64_t per_row = spec.classes + 1 + 2 * static_cast<std::int64_t>(layout.widest());
  for (int l = 0; l < layout.units(); ++l) per_row += layout.layer(l).in + layout.layer(l).out;
  return static_cast<std::int64_t>(sizeof(float)) * max_batch * per_row;
}

Mlp::~Mlp() = default;
Mlp::Mlp(Mlp&&) noexcept = default;
Mlp& Mlp::operator=(Mlp&&) noexcept = default;

int Mlp::max_batch() const { return impl_->max_batch; }

void Mlp::zero_grad() { std::fill(grads_flat_.begin(), grads_flat_.end(), 0.0f); }

std::size_t Mlp::layer_grad_begin(int layer) const {
  TANDEM_CHECK(layer >= 0 && layer < layer_count());
  return layout_.unit_begin(layer);
}

std::size_t Mlp::layer_grad_end(int layer) const {
  TANDEM_CHECK(layer >= 0 && layer < layer_count());
  return layout_.unit_end(layer);
}

void Mlp::configure_stage(const std::vector<bool>& owned, int slots) {
  Impl& m = *impl_;
  TANDEM_CHECK_EQ(owned.size(), static_cast<std::size_t>(layer_count()));
  TANDEM_CHECK(slots >= 1);
  m.owned = owned;
  allocate_acts(m, layout_, m.max_batch, owned);
  m.slots.configure(slots, [&](MlpActs& a) { allocate_acts(a, layout_, m.max_batch, owned); });
  m.next_backward = -1;
}

void Mlp::select_slot(int slot) { impl_->slots.select(impl_->current(), slot); }

std::span<float> Mlp::unit_input(int layer, int slot) {
  Impl& m = *impl_;
  TANDEM_CHECK(layer >= 1 && layer < layer_count());
  std::vector<float>& in = m.slots.of(m.current(), slot).acts[static_cast<std::size_t>(layer)];
  TANDEM_CHECK(!in.empty());  // a layer of this stage, or the one after it
  return in;
}

void Mlp::begin_backward(int layer, std::span<const float> output_grad) {
  Impl& m = *impl_;
  TANDEM_CHECK(layer >= 0 && layer < layer_count() - 1);  // the last starts from the loss
  TANDEM_CHECK_EQ(output_grad.size(),
                  static_cast<std::size_t>(m.max_batch) * layout_.layer(layer).out);
  m.dout = m.grad_a.data();
  m.dinp = m.grad_b.data();
  std::copy(output_grad.begin(), output_grad.end(), m.dout);
  m.next_backward = layer;
}

std::span<const float> Mlp::input_grad(int layer) const {
  const Impl& m = *impl_;
  TANDEM_CHECK(layer >= 1 && layer < layer_count() && m.next_backward == layer - 1);
  return {m.dout, static_cast<std::size_t>(m.max_batch) * layout_.layer(layer).in};
}

std::int64_t Mlp::activation_bytes() const { return impl_->bytes(); }

std::span<const float> Mlp::logits() const {
  const Impl& m = *impl_;
  return {m.pre.back().data(), static_cast<std::size_t>(m.rows) * spec().classes};
}

namespace {

void activation_forward(Activation activation, float* out, const float* inp, std::int64_t n) {
  switch (activation) {
    case Activation::kReLU:
      layers::Ops<float>::relu_forward(out, inp, n);
      break;
    case Activation::kGELU:
      layers::Ops<float>::gelu_forward(out, inp, n);
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
      layers::Ops<float>::relu_backward(dinp, inp, dout, n);
      break;
    case Activation::kGELU:
      layers::Ops<float>::gelu_backward(dinp, inp, dout, n);
      break;
    case Activation::kNone:
      std::copy_n(dout, n, dinp);
      break;
  }
}

}  // namespace

// Shapes, B = rows: x [B, input] -> layer L: [B, in_L] . [in_L, out_L] + [out_L] ->
// activation (all but the last) -> logits [B, classes] -> mean softmax cross-entropy.
void Mlp::set_input(const Batch& batch) {
  Impl& m = *impl_;
  const int B = batch.rows;
  TANDEM_CHECK(B >= 1 && B <= m.max_batch);
  TANDEM_CHECK(batch.x.size() >= static_cast<std::size_t>(B) * spec().input);
  TANDEM_CHECK(batch.y.size() >= static_cast<std::size_t>(B));
  for (int b = 0; b < B; ++b) {
    TANDEM_CHECK(batch.y[b] >= 0 && batch.y[b] < spec().classes);
  }
  m.rows = B;
  // Copied so backward does not depend on the caller keeping the batch alive; B*input
  // floats are small next to the layer's B*input*output multiply-adds.
  if (!m.acts[0].empty()) {  // a pipeline stage without layer 0 reads no x
    std::copy_n(batch.x.data(), static_cast<std::size_t>(B) * spec().input, m.acts[0].data());
  }
  std::copy_n(batch.y.data(), B, m.targets.data());
  m.next_backward = -1;
}

void Mlp::forward_unit(int l, RankRecorder& recorder, int step) {
  Impl& m = *impl_;
  const int B = m.rows;
  TANDEM_CHECK(B >= 1);  // set_input() first
  TANDEM_CHECK(l >= 0 && l < layer_count() && m.owned[static_cast<std::size_t>(l)]);
  const LinearLayout& layer = layout_.layer(l);
  ScopedSpan span(recorder, Lane::kCompute, SpanKind::kForward, step, l, kNoName,
                  2.0 * B * layer.in * layer.out);
  const float* w = params_flat_.data() + layer.weight;
  const float* bias = layer.has_bias ? params_flat_.data() + layer.bias : nullptr;
  const auto u = static_cast<std::size_t>(l);
  layers::Ops<float>::linear_forward(m.pre[u].data(), m.acts[u].data(), w, bias, B, layer.in, layer.out);
  if (l < layer_count() - 1) {
    activation_forward(spec().activation, m.acts[u + 1].data(), m.pre[u].data(),
                       static_cast<std::int64_t>(B) * layer.out);
  }
}

float Mlp::forward_loss(RankRecorder& recorder, int step) {
  Impl& m = *impl_;
  ScopedSpan span(recorder, Lane::kCompute, SpanKind::kForward, step, layer_count());
  return static_cast<float>(layers::Ops<float>::cross_entropy_forward(m.probs.data(), m.pre.back().data(),
                                               m.targets.data(), m.rows, spec().classes));
}

void Mlp::backward_loss(RankRecorder& recorder, int step) {
  Impl& m = *impl_;
  TANDEM_CHECK(m.rows >= 1);  // forward() must run first
  m.dout = m.grad_a.data();
  m.dinp = m.grad_b.data();
  ScopedSpan span(recorder, Lane::kCompute, SpanKind::kBackward, step, layer_count());
  layers::Ops<float>::cross_entropy_backward(m.dout, m.probs.data(), m.targets.data(), m.rows,
                                         spec().classes);
  m.next_backward = layer_count() - 1;
}

// dout [B, out_L] -> activation backward (L < last) -> dW_L [in_L, out_L] +=,
// db_L [out_L] +=, d(in_L) [B, in_L] = (L > 0).
void Mlp::backward_unit(int l, RankRecorder& recorder, int step) {
  Impl& m = *impl_;
  TANDEM_CHECK_EQ(l, m.next_backward);  // backward_loss, then layers last..0
  TANDEM_CHECK(m.owned[static_cast<std::size_t>(l)]);
  const int B = m.rows;
  const LinearLayout& layer = layout_.layer(l);
  {
    const double flops = (l > 0 ? 4.0 : 2.0) * B * layer.in * layer.out;
    ScopedSpan span(recorder, Lane::kCompute, SpanKind::kBackward, step, l, kNoName, flops);
    if (l < layer_count() - 1) {
      // dout holds dL/d(activation output); turn it into dL/d(pre-activation) in place.
      activation_backward(spec().activation, m.dout, m.pre[static_cast<std::size_t>(l)].data(),
                          m.dout, static_cast<std::int64_t>(B) * layer.out);
    }
    float* dw = grads_flat_.data() + layer.weight;
    float* db = layer.has_bias ? grads_flat_.data() + layer.bias : nullptr;
    const float* w = params_flat_.data() + layer.weight;
    // Layer 0's input gradient would be dL/dx, which nothing uses.
    layers::Ops<float>::linear_backward(l > 0 ? m.dinp : nullptr, dw, db, m.dout,
                            m.acts[static_cast<std::size_t>(l)].data(), w, B, layer.in, layer.out);
  }
  std::swap(m.dout, m.dinp);
  m.next_backward = l - 1;
}

float Mlp::forward(const Batch& batch, RankRecorder& recorder, int step) {
  set_input(batch);
  for (int l = 0; l < layer_count(); ++l) forward_unit(l, recorder, step);
  return forward_loss(recorder, step);
}

void Mlp::backward(RankRecorder& recorder, int step,
                     const std::function<void(int layer)>& on_layer_ready) {
  backward_loss(recorder, step);
  for (int l = layer_count() - 1; l >= 0; --l) {
    backward_unit(l, recorder, step);
    if (on_layer_ready) on_layer_ready(l);
  }
}

}  // namespace tandem
