// The CPU RankModel (Mlp + its data shard + SGD) and the device registry.
#include "model/rank_model.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "compute/cpu/blas.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/page_array.h"
#include "core/parse.h"
#include "model/dataset.h"
#include "model/mlp.h"
#include "model/token_data.h"
#include "model/transformer.h"

namespace tandem {

namespace {
[[noreturn]] void no_stages(const RankModel& model) {
  throw RuntimeError("pipeline stages are not implemented for this device's model (" +
                     model.describe() + ")");
}
}  // namespace

void RankModel::configure_stage(const std::vector<bool>&, int) { no_stages(*this); }
void RankModel::select_slot(int) { no_stages(*this); }
std::span<float> RankModel::unit_input(int, int) { no_stages(*this); }
void RankModel::begin_backward(int, std::span<const float>) { no_stages(*this); }
std::span<const float> RankModel::input_grad(int) { no_stages(*this); }

namespace {

// What CpuRankModel needs of a network on the CPU: the unit-by-unit passes over its flat
// arrays, fed from its own data.
class CpuNet {
 public:
  virtual ~CpuNet() = default;
  virtual const ModelLayout& layout() const = 0;
  virtual std::span<float> params() = 0;
  virtual std::span<float> grads() = 0;
  virtual void discard_params(std::size_t begin, std::size_t end) = 0;
  virtual void discard_grads(std::size_t begin, std::size_t end) = 0;
  virtual void set_micro_batch(int index) = 0;
  virtual void forward_unit(int unit, RankRecorder& recorder, int step) = 0;
  virtual double forward_loss(RankRecorder& recorder, int step) = 0;
  virtual void backward_loss(RankRecorder& recorder, int step) = 0;
  virtual void backward_unit(int unit, RankRecorder& recorder, int step) = 0;
  virtual void zero_grad() = 0;
  virtual std::optional<double> validation_loss() { return std::nullopt; }
  virtual void configure_stage(const std::vector<bool>& owned, int slots) = 0;
  virtual void select_slot(int slot) = 0;
  virtual std::span<float> unit_input(int unit, int slot) = 0;
  virtual void begin_backward(int unit, std::span<const float> output_grad) = 0;
  virtual std::span<const float> input_grad(int unit) = 0;
  virtual std::int64_t activation_bytes() const = 0;
};

// The passes of a CPU model class (Mlp, Transformer), which spell them alike; a
// subclass adds its data.
template <typename M>
class NetOver : public CpuNet {
 public:
  template <typename... Args>
  explicit NetOver(Args&&... args) : model_(std::forward<Args>(args)...) {}

  const ModelLayout& layout() const override { return model_.layout(); }
  std::span<float> params() override { return model_.flat_params(); }
  std::span<float> grads() override { return model_.flat_grads(); }
  void discard_params(std::size_t begin, std::size_t end) override {
    model_.discard_params(begin, end);
  }
  void discard_grads(std::size_t begin, std::size_t end) override {
    model_.discard_grads(begin, end);
  }
  void forward_unit(int unit, RankRecorder& r, int step) override {
    model_.forward_unit(unit, r, step);
  }
  double forward_loss(RankRecorder& r, int step) override { return model_.forward_loss(r, step); }
  void backward_loss(RankRecorder& r, int step) override { model_.backward_loss(r, step); }
  void backward_unit(int unit, RankRecorder& r, int step) override {
    model_.backward_unit(unit, r, step);
  }
  void zero_grad() override { model_.zero_grad(); }
  void configure_stage(const std::vector<bool>& owned, int slots) override {
    model_.configure_stage(owned, slots);
  }
  void select_slot(int slot) override { model_.select_slot(slot); }
  std::span<float> unit_input(int unit, int slot) override {
    return model_.unit_input(unit, slot);
  }
  void begin_backward(int unit, std::span<const float> output_grad) override {
    model_.begin_backward(unit, output_grad);
  }
  std::span<const float> input_grad(int unit) override { return model_.input_grad(unit); }
  std::int64_t activation_bytes() const override { return model_.activation_bytes(); }

 protected:
  M model_;
};

// An mlp on its synthetic teacher's data.
class MlpNet final : public NetOver<Mlp> {
 public:
  explicit MlpNet(const ModelConfig& c)
      : NetOver(c.spec, c.batch, c.seed, c.layout),
        data_(c.spec.input, c.spec.classes, c.batch, c.data_batches, c.seed, c.rank) {}

  void set_micro_batch(int index) override { model_.set_input(data_.batch(index)); }

 private:
  SyntheticDataset data_;
};

// A transformer on synthetic tokens or a file's bytes (token_data.h).
class TransformerNet final : public NetOver<Transformer> {
 public:
  explicit TransformerNet(const ModelConfig& c)
      : NetOver(c.spec, c.batch, c.seed, c.layout),
        data_(c.data_path.empty()
                  ? TokenData::synthetic(c.spec.transformer.vocab, c.spec.transformer.seq, c.batch,
                                         c.seed, c.rank)
                  : TokenData::from_file(c.data_path, c.spec.transformer.seq, c.batch, c.seed,
                                         c.rank, c.ranks)),
        tokens_(static_cast<std::size_t>(c.batch) * (c.spec.transformer.seq + 1)),
        rows_(c.batch) {
    TANDEM_CHECK_EQ(data_.vocab(), c.spec.transformer.vocab);
  }

  void set_micro_batch(int index) override {
    data_.batch(index, tokens_);
    model_.set_input({.tokens = tokens_, .rows = rows_});
  }

  // Forward passes over the held-out batches, recording nothing: evaluation is not part
  // of a training step's timeline.
  std::optional<double> validation_loss() override {
    if (data_.validation_batches() == 0) return std::nullopt;
    RankRecorder quiet(0, 0, /*enabled=*/false);
    double sum = 0;
    for (int i = 0; i < data_.validation_batches(); ++i) {
      data_.validation_batch(i, tokens_);
      sum += model_.forward({.tokens = tokens_, .rows = rows_}, quiet, -1);
    }
    return sum / data_.validation_batches();
  }

 private:
  TokenData data_;
  std::vector<std::int32_t> tokens_;  // one batch [rows, seq + 1]
  int rows_;
};

// Anonymous pages (core/page_array.h): zero without being touched, resident once written.
class HostArray final : public ModelArray {
 public:
  explicit HostArray(std::size_t numel) : array_(numel) {}
  std::span<float> span() override { return array_; }

 private:
  PageArray<float> array_;
};

class CpuRankModel final : public RankModel {
 public:
  CpuRankModel(const ModelConfig& config, RankRecorder& recorder)
      : net_(config.spec.is_transformer() ? std::unique_ptr<CpuNet>(new TransformerNet(config))
                                          : std::unique_ptr<CpuNet>(new MlpNet(config))),
        sgd_(config.sgd, net_->params().size()),
        recorder_(recorder) {}

  const ModelLayout& layout() const override { return net_->layout(); }
  std::span<float> params() override { return net_->params(); }
  std::span<float> grads() override { return net_->grads(); }
  void discard_params(std::size_t begin, std::size_t end) override {
    net_->discard_params(begin, end);
  }
  void discard_grads(std::size_t begin, std::size_t end) override {
    net_->discard_grads(begin, end);
  }
  void zero_grads(std::size_t begin, std::size_t end) override {
    TANDEM_CHECK(begin <= end && end <= net_->grads().size());
    std::fill(net_->grads().begin() + static_cast<std::ptrdiff_t>(begin),
              net_->grads().begin() + static_cast<std::ptrdiff_t>(end), 0.0f);
  }
  std::unique_ptr<ModelArray> allocate_zeroed(std::size_t numel) override {
    return std::make_unique<HostArray>(numel);
  }
  void copy(std::span<const float> from, std::span<float> to) override {
    TANDEM_CHECK_EQ(from.size(), to.size());
    std::copy(from.begin(), from.end(), to.begin());
  }
  void sgd_step(std::span<float> params, std::span<const float> grads, std::span<float> velocity,
                float grad_scale) override {
    sgd_update(sgd_.options(), params, grads, velocity, grad_scale);
  }

  std::int64_t begin_step(int step) override {
    step_ = step;
    loss_sum_ = 0;
    return now_ns();
  }
  void set_micro_batch(int index) override { net_->set_micro_batch(index); }
  void forward_unit(int unit) override { net_->forward_unit(unit, recorder_, step_); }
  void forward_loss() override { loss_sum_ += net_->forward_loss(recorder_, step_); }
  void backward_loss() override { net_->backward_loss(recorder_, step_); }
  void backward_unit(int unit) override { net_->backward_unit(unit, recorder_, step_); }
  void optimizer_step(float grad_scale) override {
    sgd_.step(net_->params(), net_->grads(), grad_scale);
  }
  void zero_grad() override { net_->zero_grad(); }
  std::optional<double> validation_loss() override { return net_->validation_loss(); }
  void configure_stage(const std::vector<bool>& owned, int slots) override {
    net_->configure_stage(owned, slots);
  }
  void select_slot(int slot) override { net_->select_slot(slot); }
  std::span<float> unit_input(int unit, int slot) override { return net_->unit_input(unit, slot); }
  void begin_backward(int unit, std::span<const float> output_grad) override {
    net_->begin_backward(unit, output_grad);
  }
  std::span<const float> input_grad(int unit) override { return net_->input_grad(unit); }
  std::int64_t activation_bytes() const override { return net_->activation_bytes(); }

  void begin_span(Lane lane, SpanKind kind, int tag) override {
    open_.push_back(
        Span{.lane = lane, .kind = kind, .step = step_, .tag = tag, .start_ns = now_ns()});
  }
  void end_span() override {
    TANDEM_CHECK(!open_.empty());
    Span span = open_.back();
    open_.pop_back();
    span.end_ns = now_ns();
    recorder_.record(span);
  }

  StepEnd end_step() override { return {.loss_sum = loss_sum_, .end_ns = now_ns()}; }

  std::vector<float> download_params() override {
    return {net_->params().begin(), net_->params().end()};
  }
  std::string describe() const override { return blas_description(); }
  std::string timing_source() const override { return "host-clock"; }

 private:
  std::unique_ptr<CpuNet> net_;
  Sgd sgd_;
  RankRecorder& recorder_;
  int step_ = -1;
  double loss_sum_ = 0;
  std::vector<Span> open_;
};

// Function-local statics: registration runs from other translation units' static
// initializers, in an order nobody controls.
std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<Device, DeviceModels>& registry() {
  static std::map<Device, DeviceModels> models;
  return models;
}

}  // namespace

bool register_device_models(Device device, DeviceModels models) {
  TANDEM_CHECK(device != Device::kCpu);
  std::lock_guard lock(registry_mutex());
  registry()[device] = models;
  return true;
}

const DeviceModels* find_device_models(Device device) {
  std::lock_guard lock(registry_mutex());
  const auto it = registry().find(device);
  return it == registry().end() ? nullptr : &it->second;
}

void check_device_available(Device device) {
  if (device == Device::kCpu) return;
  const std::string name(to_string(device));
  const DeviceModels* models = find_device_models(device);
  if (models == nullptr) {
    throw UsageError("--device " + name + ": this tandem was built without " + name +
                     " support (no CUDA toolkit at build time; see docs/GPU.md)");
  }
  if (const std::string why = models->unavailable(); !why.empty()) {
    throw UsageError("--device " + name + ": " + why);
  }
}

void check_device_memory(const ModelConfig& config, int ranks_here) {
  if (config.device == Device::kCpu) return;
  const DeviceModels* models = find_device_models(config.device);
  if (models == nullptr || models->replica_bytes == nullptr || models->free_bytes == nullptr ||
      !models->unavailable().empty()) {
    return;
  }
  const int devices = models->count();
  if (devices < 1) return;
  // In-process rank r runs on device r (the device communicators place them so).
  const int checked = ranks_here > 0 ? std::min(ranks_here, devices) : devices;
  std::int64_t free = -1;
  int ordinal = 0;
  for (int d = 0; d < checked; ++d) {
    const std::int64_t f = models->free_bytes(d);
    if (f < 0) return;  // unknown: no check
    const bool tighter = ranks_here > 0 ? (free < 0 || f < free) : f > free;
    if (tighter) {
      free = f;
      ordinal = d;
    }
  }
  const ReplicaBytes need = models->replica_bytes(config);
  const double total = need.state + need.working;
  if (total <= static_cast<double>(free)) return;
  const std::string name(to_string(config.device));
  throw UsageError("--model " + config.spec.text + " with --batch " + std::to_string(config.batch) +
                   " on --device " + name + " needs at least " + format_bytes(total) +
                   " of device memory per rank (" + std::to_string(static_cast<long long>(total)) +
                   " bytes: " + format_bytes(need.state) +
                   " of parameters, gradients and momentum and " + format_bytes(need.working) +
                   " of activations and data), but " + name + " device " + std::to_string(ordinal) +
                   " has " + format_bytes(static_cast<double>(free)) + " free");
}

ReplicaBytes replica_bytes(const ModelConfig& config) {
  const ModelSpec& spec = config.spec;
  ReplicaBytes out;
  out.state = 3.0 * static_cast<double>(spec.parameter_count()) * sizeof(float);
  if (spec.is_transformer()) {
    const TransformerShape& s = spec.transformer;
    const double tokens = static_cast<double>(config.batch) * (s.seq + 1);
    const double chain = static_cast<double>(s.vocab) * TokenData::kSuccessors;
    out.working = static_cast<double>(Transformer::buffer_bytes(spec, config.batch)) +
                  4 * (tokens + (config.data_path.empty() ? chain : 0));
    return out;
  }
  // The synthetic set's features and labels, and the teacher's outputs while labelling.
  const double samples = static_cast<double>(config.batch) * config.data_batches;
  out.working = static_cast<double>(Mlp::buffer_bytes(spec, config.batch)) +
                4 * samples * (spec.input + 1 + 64 + spec.classes);
  return out;
}

std::unique_ptr<RankModel> make_rank_model(const ModelConfig& config, RankRecorder& recorder) {
  if (config.device == Device::kCpu) return std::make_unique<CpuRankModel>(config, recorder);
  check_device_available(config.device);
  return find_device_models(config.device)->make(config, recorder);
}

}  // namespace tandem
