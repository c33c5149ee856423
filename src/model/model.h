// A feed-forward model with explicit forward and backward passes on the CPU (fp32,
// CBLAS sgemm), built from a spec string.
//
// Storage: all parameters live in one flat array and all gradients in another, laid
// out in *reverse* registration order (last layer first). That is the order in which
// backward produces gradients, so every gradient-reduction strategy (a bucket, a layer,
// a chunk) is a contiguous range of the flat gradient and is all-reduced in place.
//
// Gradient rule (as in llm.c): parameter gradients accumulate with +=, activation
// gradients are overwritten. zero_grad() clears the flat gradient.
//
// Within one layer's range the weight comes first, then the bias:
//   [fc{D-1}.weight, fc{D-1}.bias, ..., fc0.weight, fc0.bias]
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
#include <string>
#include <string_view>
#include <vector>

#include "timeline/recorder.h"

namespace tandem {

enum class Activation : std::uint8_t { kNone, kReLU, kGELU };

// "mlp:DxW": D Linear layers (+bias); the first D-1 are W->W followed by the
// activation, the last W->classes. Input width W.
// "linear:IxO": one Linear I->O without bias (y = x.W).
// "course": the course-report baseline, linear:512x512 with a batch of 1024.
// A ",gelu" (or ",relu", the default) suffix picks the mlp activation. For linear and
// course, width == input (there is no hidden layer) and activation is kNone.
// Limits: dimensions <= 65536, depth <= 1024, parameter_count() <= 2^31.
struct ModelSpec {
  std::string text;  // as given
  int depth = 1;
  int input = 0;     // input features
  int width = 0;     // hidden width
  int classes = 0;   // output features
  bool bias = true;
  Activation activation = Activation::kReLU;
  int default_batch = 0;  // a preset's batch (0: none)

  // Throws UsageError naming the spec on bad input.
  static ModelSpec parse(std::string_view text, int classes = 16);
  std::int64_t parameter_count() const;
};

struct ParamInfo {
  std::string name;         // "fc3.weight"
  int layer = 0;            // index of the Linear layer that owns it (forward order)
  std::size_t numel = 0;
  std::size_t offset = 0;   // into flat_params() / flat_grads()
};

struct Batch {
  std::span<const float> x;        // [rows, input]
  std::span<const std::int32_t> y;  // [rows] class labels
  int rows = 0;
};

class Model {
 public:
  // Deterministic initialization from seed (Kaiming-uniform weights, zero biases):
  // the same seed gives the same parameters on every rank. Every buffer forward and
  // backward need is allocated here for up to max_batch rows; steps do not allocate.
  // Throws UsageError when max_batch < 1 or max_batch rows do not fit.
  Model(const ModelSpec& spec, int max_batch, std::uint64_t seed);
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  const ModelSpec& spec() const { return spec_; }
  int layer_count() const;  // Linear layers
  int max_batch() const;
  // Forward registration order; offsets follow the reverse layout described above.
  const std::vector<ParamInfo>& params() const { return params_; }
  std::span<float> flat_params() { return params_flat_; }
  std::span<const float> flat_params() const { return params_flat_; }
  std::span<float> flat_grads() { return grads_flat_; }
  std::span<const float> flat_grads() const { return grads_flat_; }
  void zero_grad();
  // Range of the flat gradient holding Linear layer `layer`'s parameters.
  std::size_t layer_grad_begin(int layer) const;
  std::size_t layer_grad_end(int layer) const;

  // Forward + softmax cross-entropy (mean over rows). Records one compute span per
  // Linear layer (activation included) and one for the loss into `recorder`.
  // 1 <= batch.rows <= max_batch, labels in [0, classes). The batch is copied, so it
  // need not outlive the call.
  float forward(const Batch& batch, RankRecorder& recorder, int step);
  // Backward in reverse layer order; gradients accumulate into flat_grads(). After
  // Linear layer L's parameter gradients are complete, calls on_layer_ready(L), so a
  // reducer can launch communication while earlier layers still compute.
  // on_layer_ready runs after layer L's span has ended (its time is not charged to the
  // layer) and may be empty. Needs a preceding forward; calling backward twice after one
  // forward adds the same gradients twice.
  void backward(RankRecorder& recorder, int step,
                const std::function<void(int layer)>& on_layer_ready);

  // FLOPs of one forward (backward is about twice that) for `rows` rows.
  double forward_flops(int rows) const;

  // For tests: the last forward's logits [rows, classes].
  std::span<const float> logits() const;

 private:
  struct Impl;
  ModelSpec spec_;
  std::vector<float> params_flat_;
  std::vector<float> grads_flat_;
  std::vector<ParamInfo> params_;
  std::unique_ptr<Impl> impl_;
};

// SGD with momentum and decoupled-from-nothing L2 weight decay, on the flat arrays:
//   g = grad * grad_scale + weight_decay * w;  v = momentum * v + g;  w -= lr * v
struct SgdOptions {
  float lr = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
};

class Sgd {
 public:
  Sgd(SgdOptions options, std::size_t numel);
  void step(std::span<float> params, std::span<const float> grads, float grad_scale = 1.0f);
  const SgdOptions& options() const { return options_; }

 private:
  SgdOptions options_;
  std::vector<float> velocity_;
};

// A learnable synthetic task: inputs ~ N(0,1), labels = argmax of a fixed random
// teacher (one hidden layer, GELU) that is the same on every rank. Each rank draws its
// own shard deterministically from (seed, rank), `batches` batches cycled over steps.
class SyntheticDataset {
 public:
  SyntheticDataset(int input, int classes, int rows, int batches, std::uint64_t seed, int rank);
  Batch batch(int step) const;  // batch (step mod batches)
  int rows() const { return rows_; }

 private:
  int input_;
  int rows_;
  int batches_;
  std::vector<float> x_;
  std::vector<std::int32_t> y_;
};

}  // namespace tandem
