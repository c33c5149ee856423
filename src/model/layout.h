// A model's shapes and flat parameter layout, shared by the CPU model (model.h) and the
// CUDA model (model/cuda/cuda_model.h), so that gradient bucket plans, parameter hashes
// and initial parameters are the same on every device.
//
// Units: what the engine's rank loop drives one at a time (forward in order, backward in
// reverse); a unit's parameters are one contiguous range of the flat arrays. For an mlp
// every Linear layer is a unit.
//
// Storage: all parameters live in one flat array and all gradients in another, laid out
// in *reverse* unit order (last unit first). That is the order in which backward
// produces gradients, so every gradient-reduction strategy (a bucket, a unit, a chunk)
// is a contiguous range of the flat gradient and is reduced in place. Within one
// Linear layer the weight comes first, then the bias:
//   [fc{D-1}.weight, fc{D-1}.bias, ..., fc0.weight, fc0.bias]
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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

// One parameter tensor of the flat layout.
struct ParamInfo {
  std::string name;        // "fc3.weight"
  int unit = 0;            // the unit that owns it (forward order; a Linear layer of an mlp)
  std::size_t numel = 0;
  std::size_t offset = 0;  // into the flat parameter / gradient arrays
};

// One Linear layer: out = inp . weight (+ bias), weight [in, out] row-major.
struct LinearLayout {
  int in = 0;
  int out = 0;
  bool has_bias = false;
  std::size_t weight = 0;  // offsets into the flat arrays
  std::size_t bias = 0;    // valid when has_bias
  std::size_t begin = 0;   // [begin, end): this layer's range of the flat arrays
  std::size_t end = 0;
};

class ModelLayout {
 public:
  explicit ModelLayout(const ModelSpec& spec);

  const ModelSpec& spec() const { return spec_; }
  int units() const { return static_cast<int>(layers_.size()); }
  const LinearLayout& layer(int unit) const { return layers_.at(static_cast<std::size_t>(unit)); }
  // Forward registration order; offsets follow the reverse layout described above.
  const std::vector<ParamInfo>& params() const { return params_; }
  std::size_t numel() const { return numel_; }
  int widest() const { return widest_; }  // the widest layer input or output
  std::size_t unit_begin(int unit) const { return layer(unit).begin; }
  std::size_t unit_end(int unit) const { return layer(unit).end; }

  // Deterministic initialization from seed (Kaiming-uniform weights, zero biases): the
  // same seed gives the same parameters on every rank and every device.
  void initialize(std::span<float> flat, std::uint64_t seed) const;
  // FLOPs of one forward (backward is about twice that) for `rows` rows.
  double forward_flops(int rows) const;

 private:
  ModelSpec spec_;
  std::vector<LinearLayout> layers_;
  std::vector<ParamInfo> params_;
  std::size_t numel_ = 0;
  int widest_ = 0;
};

}  // namespace tandem
