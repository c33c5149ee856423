// Mlp: a feed-forward model with explicit forward and backward passes, written once over a
// device backend (backend.h): MlpOn<CpuBackend<float>> (Mlp, the CPU) and
// MlpOn<cuda::CudaBackend> (cuda/cuda_model.h). The passes are mlp_passes.h; the flat
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

namespace tandem {

template <typename Backend>
class MlpOn {
 public:
  using T = typename Backend::Scalar;
  using Timer = typename Backend::Timer;
  using Batch = typename Backend::Batch;
  using LossValue = typename Backend::LossValue;
  using Config = typename Backend::Config;

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

  const ModelSpec& spec() const { return layout_.spec(); }
  const ModelLayout& layout() const { return layout_; }
  int units() const { return layout_.units(); }
  int layer_count() const { return layout_.units(); }  // Linear layers (units)
  int max_batch() const;
  // Forward registration order; offsets follow the reverse layout of layout.h.
  const std::vector<ParamInfo>& params() const { return layout_.params(); }
  // The flat arrays in the backend's memory.
  std::span<T> flat_params();
  std::span<T> flat_grads();
  std::span<const T> flat_params() const;
  std::span<const T> flat_grads() const;
  Backend& backend();
  const Backend& backend() const;
  void zero_grad();
  // Elements [begin, end) of the flat parameters or gradients read as zero afterwards;
  // the backend may give their memory back (the CPU's whole pages go to the OS).
  void discard_params(std::size_t begin, std::size_t end);
  void discard_grads(std::size_t begin, std::size_t end);
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

  // ---- pipeline stages (rank_model.h) ----
  // Runs only the layers marked in `owned` (one flag per layer), keeping activations for
  // `slots` micro-batches in flight, of those layers only; slot 0 is current.
  void configure_stage(const std::vector<bool>& owned, int slots);
  // The slot that set_input and the passes use from now on.
  void select_slot(int slot);
  // The activation `layer` reads (layer - 1's output) in `slot`, max_batch rows.
  std::span<T> unit_input(int layer, int slot);
  // A layer whose output feeds another stage starts backward from dL/d(its output).
  void begin_backward(int layer, std::span<const T> output_grad);
  // After backward_unit(layer): dL/d(layer's input), until the next backward_unit.
  std::span<const T> input_grad(int layer) const;
  // Bytes of the activations one slot keeps.
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
  double forward_flops(int rows) const { return layout_.forward_flops(rows); }

  // For tests: the last forward's logits [rows, classes], in the backend's memory.
  std::span<const T> logits() const;

 private:
  struct Impl;
  ModelLayout layout_;
  std::unique_ptr<Impl> impl_;
};

using Mlp = MlpOn<CpuBackend<float>>;
extern template class MlpOn<CpuBackend<float>>;

}  // namespace tandem
