// The CPU RankModel (Model + its data shard + SGD) and the device registry.
#include "model/rank_model.h"

#include <map>
#include <mutex>

#include "compute/cpu/blas.h"
#include "core/clock.h"
#include "core/error.h"

namespace tandem {
namespace {

class CpuRankModel final : public RankModel {
 public:
  CpuRankModel(const ModelConfig& config, RankRecorder& recorder)
      : model_(config.spec, config.batch, config.seed),
        data_(config.spec.input, config.spec.classes, config.batch, config.data_batches,
              config.seed, config.rank),
        sgd_(config.sgd, model_.flat_params().size()),
        recorder_(recorder) {}

  const ModelLayout& layout() const override { return model_.layout(); }
  std::span<float> params() override { return model_.flat_params(); }
  std::span<float> grads() override { return model_.flat_grads(); }

  std::int64_t begin_step(int step) override {
    step_ = step;
    loss_sum_ = 0;
    return now_ns();
  }
  void set_micro_batch(int index) override { model_.set_input(data_.batch(index)); }
  void forward_unit(int unit) override { model_.forward_unit(unit, recorder_, step_); }
  void forward_loss() override { loss_sum_ += model_.forward_loss(recorder_, step_); }
  void backward_loss() override { model_.backward_loss(recorder_, step_); }
  void backward_unit(int unit) override { model_.backward_unit(unit, recorder_, step_); }
  void optimizer_step(float grad_scale) override {
    sgd_.step(model_.flat_params(), model_.flat_grads(), grad_scale);
  }
  void zero_grad() override { model_.zero_grad(); }

  void begin_span(Lane lane, SpanKind kind, int tag) override {
    open_.push_back(Span{.lane = lane, .kind = kind, .step = step_, .tag = tag, .start_ns = now_ns()});
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
    return {model_.flat_params().begin(), model_.flat_params().end()};
  }
  std::string describe() const override { return blas_description(); }
  std::string timing_source() const override { return "host-clock"; }

 private:
  Model model_;
  SyntheticDataset data_;
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

std::unique_ptr<RankModel> make_rank_model(const ModelConfig& config, RankRecorder& recorder) {
  if (config.device == Device::kCpu) return std::make_unique<CpuRankModel>(config, recorder);
  check_device_available(config.device);
  return find_device_models(config.device)->make(config, recorder);
}

}  // namespace tandem
