// Mlp: a feed-forward model with explicit forward and backward passes, written once over a
// device backend (backend.h): MlpOn<CpuBackend<float>> (Mlp, the CPU) and
// MlpOn<cuda::CudaBackend> (cuda/cuda_models.h). The passes are mlp_passes.h; the flat
// layout is layout.h's, so every device has the same parameters for a seed.
//
// Gradient rule (as in llm.c): parameter gradients accumulate with +=, activation
// gradients are overwritten. zero_grad() clears the flat gradient.
//
// The engine drives it unit by unit (a unit is one Linear layer with the activation that
// follows it): set_input, forward_unit(0..D-1), forward_loss, backward_loss,
// backward_unit(D-1..0). forward()/backward() run whole passes the same way.
//
// Spans (Lane::kCompute, all with the caller's step):
//   forward:  SpanKind::kForward, tag = L for Linear layer L (activation included),
//             flops = 2*B*in*out; then the loss, tag = layer_count(), flops = 0.
//   backward: SpanKind::kBackward, first the loss gradient (tag = layer_count(), flops = 0),
//             then tag = L for L = last..0, flops = 4*B*in*out (2*B*in*out for layer 0,
//             whose input gradient is never computed). A layer's backward span includes
//             the backward of the activation that follows it in forward.
// flops count the matrix products only; bias, activation and softmax are elementwise.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "model/cpu_backend.h"
#include "model/layout.h"
#include "model/model_on.h"

namespace tandem {

template <typename Backend>
class MlpOn : public ModelOn<Backend> {
 public:
  using Base = ModelOn<Backend>;
  using typename Base::Config, typename Base::LossValue, typename Base::T, typename Base::Timer;
  using Batch = typename Backend::Batch;

  // Deterministic initialization from seed (Kaiming-uniform weights, zero biases):
  // the same seed gives the same parameters on every rank. Every buffer forward and
  // backward need is allocated here for up to max_batch rows; steps do not allocate.
  // Throws UsageError when max_batch < 1 or max_batch rows do not fit. The flat arrays
  // are laid out as `layout` asks (layout.h).
  MlpOn(const ModelSpec& spec, int max_batch, std::uint64_t seed, LayoutOptions layout = {},
        Config config = {});
  // Bytes of the buffers that constructor allocates besides the parameters and gradients.
  static std::int64_t buffer_bytes(const ModelSpec& spec, int max_batch, Config config = {});
  ~MlpOn();
  MlpOn(MlpOn&&) noexcept;
  MlpOn& operator=(MlpOn&&) noexcept;

  int layer_count() const { return this->layout().units(); }  // Linear layers (units)
  int max_batch() const;
  // Forward registration order; offsets follow the reverse layout of layout.h.
  const std::vector<ParamInfo>& params() const { return this->layout().params(); }
  // Range of the flat gradient holding Linear layer `layer`'s parameters.
  std::size_t layer_grad_begin(int layer) const;
  std::size_t layer_grad_end(int layer) const;

  // ---- unit by unit ----
  // Copies the batch in: 1 <= batch.rows <= max_batch, labels in [0, classes) (the CPU
  // checks).
  void set_input(const Batch& batch);
  // Linear layer `layer` and the activation after it; layers in order from 0.
  void forward_unit(int layer, Timer timer, int step);
  // Softmax cross-entropy of the last layer's output: the mean loss over rows (the CPU
  // returns it; a device adds it to its step's sum).
  LossValue forward_loss(Timer timer, int step);
  // The loss gradient; then backward_unit for layers last..0, in that order.
  void backward_loss(Timer timer, int step);
  void backward_unit(int layer, Timer timer, int step);

  // ---- pipeline stages: RankModel's members of the same names (rank_model.h), over
  // this model's units and its activation slots (Note [activation slots]) ----
  void configure_stage(const std::vector<bool>& owned, int slots);
  void select_slot(int slot);
  std::span<T> unit_input(int layer, int slot);
  void begin_backward(int layer, std::span<const T> output_grad);
  std::span<const T> input_grad(int layer) const;
  std::int64_t activation_bytes() const;

  // ---- whole passes ----
  // set_input, every forward_unit and forward_loss.
  LossValue forward(const Batch& batch, Timer timer, int step);
  // Backward in reverse layer order; gradients accumulate into flat_grads(). After
  // Linear layer L's parameter gradients are complete (on a device: enqueued), calls
  // on_layer_ready(L), so a reducer can launch communication while earlier layers still
  // compute; its time is not charged to the layer's span. May be empty. Calling backward
  // twice after one forward adds the same gradients twice.
  void backward(Timer timer, int step, const std::function<void(int layer)>& on_layer_ready);

  // FLOPs of one forward (backward is about twice that) for `rows` rows.
  double forward_flops(int rows) const { return this->layout().forward_flops(rows); }

  // For tests: the last forward's logits [rows, classes], in the backend's memory.
  std::span<const T> logits() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

using Mlp = MlpOn<CpuBackend<float>>;
extern template class MlpOn<CpuBackend<float>>;

}  // namespace tandem
