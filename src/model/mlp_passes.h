// MlpOn<Backend>'s passes (mlp.h), written once for every device: included only by the
// files that instantiate them for a backend (mlp.cpp for the CPU, cuda/cuda_models.cpp for
// CUDA). Every kernel, buffer and span goes through `dev`, the backend (backend.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/activation_slots.h"
#include "model/mlp.h"

namespace tandem {

// Note [Mlp buffers]
// acts[L] is Linear layer L's input: acts[0] is a copy of the batch's x, acts[L+1] is
// activation(pre[L]). pre[L] is layer L's output before the activation, kept because
// the GELU backward needs it (pre[last] are the logits). Backward ping-pongs between
// two scratch arrays: dout holds dL/d(output of layer L), the layer turns it into
// dL/d(input of layer L) in dinp, and the two swap.
//
// What one micro-batch keeps from its forward to its backward (Note [activation slots]
// in transformer_passes.h): a whole model keeps one, a pipeline stage one per
// micro-batch in flight, holding only its layers' arrays.
template <typename Backend>
struct MlpActs {
  using T = typename Backend::Scalar;
  template <typename U>
  using Buffer = typename Backend::template Buffer<U>;
  int rows = 0;  // of the last set_input; 0 before the first
  std::vector<Buffer<T>> acts;
  std::vector<Buffer<T>> pre;
  Buffer<T> probs;
  Buffer<std::int32_t> targets;

  std::int64_t bytes() const {
    std::size_t n = (probs.size() + targets.size()) * sizeof(T);
    for (const auto& v : acts) n += v.size() * sizeof(T);
    for (const auto& v : pre) n += v.size() * sizeof(T);
    return static_cast<std::int64_t>(n);
  }

  // Sized for `max_rows` rows and the layers in `owned`: a layer's input and output.
  void allocate(const Backend& dev, const ModelLayout& layout, int max_rows,
                const std::vector<bool>& owned) {
    const auto n = static_cast<std::size_t>(max_rows);
    const auto depth = static_cast<std::size_t>(layout.units());
    auto own = [&](std::size_t l) { return l < owned.size() && owned[l]; };
    auto sized = [&](std::size_t size, bool keep) {
      return keep ? dev.template buffer<T>(size) : Buffer<T>();
    };
    rows = 0;
    acts.clear();
    pre.clear();
    for (std::size_t l = 0; l < depth; ++l) {
      const LinearLayout& layer = layout.layer(static_cast<int>(l));
      acts.push_back(
          sized(n * static_cast<std::size_t>(layer.in), own(l) || (l > 0 && own(l - 1))));
      pre.push_back(sized(n * static_cast<std::size_t>(layer.out), own(l)));
    }
    probs = sized(n * static_cast<std::size_t>(layout.spec().classes), own(depth - 1));
    targets = dev.template buffer<std::int32_t>(n);
  }
};

// What the passes ask the backend to hold (backend.h): a loss per row, and GEMM inputs and
// output gradients up to the widest layer.
inline BackendNeeds mlp_needs(const ModelLayout& layout, int max_batch) {
  const std::size_t widest = static_cast<std::size_t>(max_batch) * layout.widest();
  return {.loss_rows = static_cast<std::size_t>(max_batch),
          .widest_input = widest,
          .widest_output_grad = widest};
}

template <typename Backend>
struct MlpOn<Backend>::Impl : MlpActs<Backend> {
  template <typename U>
  using Buffer = typename Backend::template Buffer<U>;

  int max_batch = 0;
  Buffer<T> grad_a;
  Buffer<T> grad_b;
  T* dout = nullptr;  // backward's current output gradient
  T* dinp = nullptr;
  int next_backward = -1;  // the layer backward_unit expects next (-1: none)
  // Pipeline stages: the layers this model runs, and the other slots' activations.
  std::vector<bool> owned;
  ActivationSlots<MlpActs<Backend>> slots;

  MlpActs<Backend>& current() { return *this; }
};

template <typename Backend>
MlpOn<Backend>::MlpOn(const ModelSpec& model_spec, int max_batch, std::uint64_t seed,
                      LayoutOptions layout_options, Config config)
    : Base(model_spec, layout_options, seed, config), impl_(std::make_unique<Impl>()) {
  if (max_batch < 1) {
    throw UsageError("model '" + model_spec.text + "': batch must be >= 1 (got " +
                     std::to_string(max_batch) + ")");
  }
  // Activation buffers are indexed with int rows * int width inside BLAS calls.
  if (static_cast<std::int64_t>(max_batch) * this->layout().widest() >
      std::numeric_limits<int>::max()) {
    throw UsageError("model '" + model_spec.text + "': batch " + std::to_string(max_batch) +
                     " is too large for width " + std::to_string(this->layout().widest()));
  }
  Impl& m = *impl_;
  const Backend& dev = this->backend();
  m.max_batch = max_batch;

  const auto widest = static_cast<std::size_t>(max_batch) * this->layout().widest();
  m.owned.assign(static_cast<std::size_t>(this->units()), true);
  m.current().allocate(dev, this->layout(), max_batch, m.owned);
  m.grad_a = dev.template buffer<T>(widest);
  m.grad_b = dev.template buffer<T>(widest);
  this->backend().prepare(this->flat_params(), mlp_needs(this->layout(), max_batch));
}

template <typename Backend>
std::int64_t MlpOn<Backend>::buffer_bytes(const ModelSpec& model_spec, int max_batch,
                                          Config config) {
  // As the constructor allocates them (Note [Mlp buffers]).
  const ModelLayout flat(model_spec);
  std::int64_t per_row = model_spec.classes + 1 + 2 * static_cast<std::int64_t>(flat.widest());
  for (int l = 0; l < flat.units(); ++l) per_row += flat.layer(l).in + flat.layer(l).out;
  return static_cast<std::int64_t>(sizeof(T)) * max_batch * per_row +
         Backend::extra_bytes(flat.numel(), mlp_needs(flat, max_batch), config);
}

template <typename Backend>
MlpOn<Backend>::~MlpOn() = default;
template <typename Backend>
MlpOn<Backend>::MlpOn(MlpOn&&) noexcept = default;
template <typename Backend>
MlpOn<Backend>& MlpOn<Backend>::operator=(MlpOn&&) noexcept = default;

template <typename Backend>
int MlpOn<Backend>::max_batch() const {
  return impl_->max_batch;
}

template <typename Backend>
std::size_t MlpOn<Backend>::layer_grad_begin(int layer) const {
  TANDEM_CHECK(layer >= 0 && layer < layer_count());
  return this->layout().unit_begin(layer);
}

template <typename Backend>
std::size_t MlpOn<Backend>::layer_grad_end(int layer) const {
  TANDEM_CHECK(layer >= 0 && layer < layer_count());
  return this->layout().unit_end(layer);
}

template <typename Backend>
void MlpOn<Backend>::configure_stage(const std::vector<bool>& owned, int slots) {
  Impl& m = *impl_;
  TANDEM_CHECK_EQ(owned.size(), static_cast<std::size_t>(layer_count()));
  TANDEM_CHECK(slots >= 1);
  m.owned = owned;
  m.current().allocate(this->backend(), this->layout(), m.max_batch, owned);
  m.slots.configure(slots, [&](MlpActs<Backend>& a) {
    a.allocate(this->backend(), this->layout(), m.max_batch, owned);
  });
  m.next_backward = -1;
}

template <typename Backend>
void MlpOn<Backend>::select_slot(int slot) {
  impl_->slots.select(impl_->current(), slot);
}

template <typename Backend>
auto MlpOn<Backend>::unit_input(int layer, int slot) -> std::span<T> {
  Impl& m = *impl_;
  TANDEM_CHECK(layer >= 1 && layer < layer_count());
  auto& in = m.slots.of(m.current(), slot).acts[static_cast<std::size_t>(layer)];
  TANDEM_CHECK(in.size() > 0);  // a layer of this stage, or the one after it
  return {in.data(), in.size()};
}

template <typename Backend>
void MlpOn<Backend>::begin_backward(int layer, std::span<const T> output_grad) {
  Impl& m = *impl_;
  TANDEM_CHECK(layer >= 0 && layer < layer_count() - 1);  // the last starts from the loss
  TANDEM_CHECK_EQ(output_grad.size(),
                  static_cast<std::size_t>(m.max_batch) * this->layout().layer(layer).out);
  m.dout = m.grad_a.data();
  m.dinp = m.grad_b.data();
  this->backend().copy(m.dout, output_grad.data(), output_grad.size());
  m.next_backward = layer;
}

template <typename Backend>
auto MlpOn<Backend>::input_grad(int layer) const -> std::span<const T> {
  const Impl& m = *impl_;
  TANDEM_CHECK(layer >= 1 && layer < layer_count() && m.next_backward == layer - 1);
  return {m.dout, static_cast<std::size_t>(m.max_batch) * this->layout().layer(layer).in};
}

template <typename Backend>
std::int64_t MlpOn<Backend>::activation_bytes() const {
  return impl_->slots.count() * impl_->bytes();  // every slot alike
}

template <typename Backend>
auto MlpOn<Backend>::logits() const -> std::span<const T> {
  const Impl& m = *impl_;
  return {m.pre.back().data(), static_cast<std::size_t>(m.rows) * this->spec().classes};
}

// Shapes, B = rows: x [B, input] -> layer L: [B, in_L] . [in_L, out_L] + [out_L] ->
// activation (all but the last) -> logits [B, classes] -> mean softmax cross-entropy.
template <typename Backend>
void MlpOn<Backend>::set_input(const Batch& batch) {
  Impl& m = *impl_;
  TANDEM_CHECK(batch.rows >= 1 && batch.rows <= m.max_batch);
  // Copied so backward does not depend on the caller keeping the batch alive; B*input
  // floats are small next to the layer's B*input*output multiply-adds. A pipeline stage
  // without layer 0 reads no x.
  T* x = m.acts[0].size() > 0 ? m.acts[0].data() : nullptr;
  m.rows = this->backend().load_batch(batch, x, m.targets.data(), this->spec().input,
                                      this->spec().classes);
  m.next_backward = -1;
}

template <typename Backend>
void MlpOn<Backend>::forward_unit(int l, Timer timer, int step) {
  Impl& m = *impl_;
  Backend& dev = this->backend();
  const int B = m.rows;
  TANDEM_CHECK(B >= 1);  // set_input() first
  TANDEM_CHECK(l >= 0 && l < layer_count() && m.owned[static_cast<std::size_t>(l)]);
  const LinearLayout& layer = this->layout().layer(l);
  auto span =
      dev.section(timer, SpanKind::kForward, step, l, kNoName, 2.0 * B * layer.in * layer.out);
  dev.before_forward_unit(this->layout(), l);
  const T* w = this->flat_params().data() + layer.weight;
  const T* bias = layer.has_bias ? this->flat_params().data() + layer.bias : nullptr;
  const auto u = static_cast<std::size_t>(l);
  dev.linear_forward(m.pre[u].data(), m.acts[u].data(), w, bias, B, layer.in, layer.out);
  if (l == layer_count() - 1) return;
  T* out = m.acts[u + 1].data();
  const T* pre = m.pre[u].data();
  const std::int64_t n = static_cast<std::int64_t>(B) * layer.out;
  switch (this->spec().activation) {
    case Activation::kReLU:
      dev.relu_forward(out, pre, n);
      break;
    case Activation::kGELU:
      dev.gelu_forward(out, pre, n);
      break;
    case Activation::kNone:
      dev.copy(out, pre, static_cast<std::size_t>(n));
      break;
  }
}

template <typename Backend>
auto MlpOn<Backend>::forward_loss(Timer timer, int step) -> LossValue {
  Impl& m = *impl_;
  TANDEM_CHECK(m.rows >= 1);
  auto span = this->backend().section(timer, SpanKind::kForward, step, layer_count(), kNoName, 0);
  return this->backend().cross_entropy_forward(m.probs.data(), m.pre.back().data(),
                                               m.targets.data(), m.rows, this->spec().classes);
}

template <typename Backend>
void MlpOn<Backend>::backward_loss(Timer timer, int step) {
  Impl& m = *impl_;
  TANDEM_CHECK(m.rows >= 1);  // forward() must run first
  m.dout = m.grad_a.data();
  m.dinp = m.grad_b.data();
  auto span = this->backend().section(timer, SpanKind::kBackward, step, layer_count(), kNoName, 0);
  this->backend().cross_entropy_backward(m.dout, m.probs.data(), m.targets.data(), m.rows,
                                         this->spec().classes);
  m.next_backward = layer_count() - 1;
}

// dout [B, out_L] -> activation backward (L < last) -> dW_L [in_L, out_L] +=,
// db_L [out_L] +=, d(in_L) [B, in_L] = (L > 0).
template <typename Backend>
void MlpOn<Backend>::backward_unit(int l, Timer timer, int step) {
  Impl& m = *impl_;
  Backend& dev = this->backend();
  TANDEM_CHECK_EQ(l, m.next_backward);  // backward_loss, then layers last..0
  TANDEM_CHECK(m.owned[static_cast<std::size_t>(l)]);
  const int B = m.rows;
  const LinearLayout& layer = this->layout().layer(l);
  const auto u = static_cast<std::size_t>(l);
  {
    const double flops = (l > 0 ? 4.0 : 2.0) * B * layer.in * layer.out;
    auto span = dev.section(timer, SpanKind::kBackward, step, l, kNoName, flops);
    if (l < layer_count() - 1) {
      // dout holds dL/d(activation output); turn it into dL/d(pre-activation) in place.
      const std::int64_t n = static_cast<std::int64_t>(B) * layer.out;
      switch (this->spec().activation) {
        case Activation::kReLU:
          dev.relu_backward(m.dout, m.pre[u].data(), m.dout, n);
          break;
        case Activation::kGELU:
          dev.gelu_backward(m.dout, m.pre[u].data(), m.dout, n);
          break;
        case Activation::kNone:
          break;  // the identity
      }
    }
    T* dw = this->flat_grads().data() + layer.weight;
    T* db = layer.has_bias ? this->flat_grads().data() + layer.bias : nullptr;
    const T* w = this->flat_params().data() + layer.weight;
    // Layer 0's input gradient would be dL/dx, which nothing uses.
    dev.linear_backward(l > 0 ? m.dinp : nullptr, dw, db, m.dout, m.acts[u].data(), w, B, layer.in,
                        layer.out);
  }
  std::swap(m.dout, m.dinp);
  m.next_backward = l - 1;
}

template <typename Backend>
auto MlpOn<Backend>::forward(const Batch& batch, Timer timer, int step) -> LossValue {
  set_input(batch);
  for (int l = 0; l < layer_count(); ++l) forward_unit(l, timer, step);
  return forward_loss(timer, step);
}

template <typename Backend>
void MlpOn<Backend>::backward(Timer timer, int step,
                              const std::function<void(int layer)>& on_layer_ready) {
  backward_loss(timer, step);
  for (int l = layer_count() - 1; l >= 0; --l) {
    backward_unit(l, timer, step);
    if (on_layer_ready) on_layer_ready(l);
  }
}

}  // namespace tandem
