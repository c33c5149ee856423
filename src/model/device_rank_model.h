// The one RankModel (rank_model.h): a model written once (MlpOn or TransformerOn over the
// device's backend, backend.h), its data and its optimizer, for every device. Included
// by the file that instantiates it for a device: rank_model.cpp (the CPU) and
// cuda/cuda_rank_model.cpp (CUDA).
//
// What a device adds at a rank's level is a Device class:
//   Backend                        the model layer's backend (cpu_backend.h, cuda_backend.h)
//   Device(config, recorder)       selects the device, makes its stream, its step timer
//   backend_config()               what the models' backends are constructed with, and
//   backend_config(config)         the same without a device (for sizes, nothing made)
//   MlpData, TokenStream           the rank's data in the device's memory, constructed
//                                  from (config, device): input(index) is micro-batch
//                                  `index` as the model's set_input takes it;
//                                  validation_batches() and validation_input(i) the
//                                  held-out batches (none for an mlp); bytes(config)
//                                  what they allocate
//   prepare(config, backend, numel)  the optimizer's state for `numel` parameters
//   timer(), quiet_timer()         what the passes record spans with (quiet: nothing)
//   begin_step(), end_step(backend)  the step's start on the spans' clock; its end, after
//                                  the device has finished and the spans are recorded
//   begin_span(...), end_span()    the engine's own intervals on the same clock
//   optimizer_step, sgd_step, narrow, widen, allocate_zeroed, stream, make_current, finish,
//   describe,
//   device_details, timing_source, reset_device_peak, device_peak_bytes, note_memory
//                                  as RankModel's members of the same names
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"
#include "model/mlp.h"
#include "model/rank_model.h"
#include "model/transformer.h"

namespace tandem {

template <typename Device>
class DeviceRankModel final : public RankModel {
 public:
  using Backend = typename Device::Backend;

  DeviceRankModel(const ModelConfig& config, RankRecorder& recorder)
      : device_(config, recorder),
        layer_drop_(config.spec.layer_drop),
        seed_(config.seed),
        rank_(config.rank) {
    if (config.spec.is_transformer()) {
      net_.template emplace<TransformerNet>(config, device_);
    } else {
      net_.template emplace<MlpNet>(config, device_);
    }
    with_model(
        [&](auto& model) { device_.prepare(config, model.backend(), model.flat_params().size()); });
  }
  // Work still queued on a device may use the buffers about to be freed.
  ~DeviceRankModel() override { device_.finish(); }

  const ModelLayout& layout() const override {
    return with_model([](const auto& model) -> const ModelLayout& { return model.layout(); });
  }
  std::span<float> params() override {
    return with_model([](auto& model) { return model.flat_params(); });
  }
  std::span<float> grads() override {
    return with_model([](auto& model) { return model.flat_grads(); });
  }
  void discard_params(std::size_t begin, std::size_t end) override {
    with_model([&](auto& model) { model.discard_params(begin, end); });
  }
  void discard_grads(std::size_t begin, std::size_t end) override {
    with_model([&](auto& model) { model.discard_grads(begin, end); });
  }
  void restore_params(std::size_t begin, std::size_t end) override {
    with_model([&](auto& model) { model.restore_params(begin, end); });
  }
  void restore_grads(std::size_t begin, std::size_t end) override {
    with_model([&](auto& model) { model.restore_grads(begin, end); });
  }
  void zero_grads(std::size_t begin, std::size_t end) override {
    with_model([&](auto& model) {
      TANDEM_CHECK(begin <= end && end <= model.flat_grads().size());
      model.backend().zero(model.flat_grads().subspan(begin, end - begin));
    });
  }
  ComputeStream stream() const override { return device_.stream(); }

  std::unique_ptr<ModelArray> allocate_zeroed(std::size_t numel) override {
    return device_.allocate_zeroed(numel);
  }
  void copy(std::span<const float> from, std::span<float> to) override {
    TANDEM_CHECK_EQ(from.size(), to.size());
    with_model([&](auto& model) { model.backend().copy(to.data(), from.data(), from.size()); });
  }
  void sgd_step(std::span<float> params, std::span<const float> grads, std::span<float> velocity,
                float grad_scale) override {
    device_.sgd_step(params, grads, velocity, grad_scale);
  }
  void narrow(std::span<const float> from, std::uint16_t* to, DataType type,
              float scale) override {
    device_.narrow(from, to, type, scale);
  }
  void widen(const std::uint16_t* from, std::span<float> to, DataType type) override {
    device_.widen(from, to, type);
  }

  // ---- pipeline stages ----
  void configure_stage(const std::vector<bool>& owned, int slots) override {
    device_.make_current();
    with_model([&](auto& model) { model.configure_stage(owned, slots); });
  }
  void select_slot(int slot) override {
    with_model([&](auto& model) { model.select_slot(slot); });
  }
  std::span<float> unit_input(int unit, int slot) override {
    return with_model([&](auto& model) { return model.unit_input(unit, slot); });
  }
  void begin_backward(int unit, std::span<const float> output_grad) override {
    with_model([&](auto& model) { model.begin_backward(unit, output_grad); });
  }
  std::span<const float> input_grad(int unit) override {
    return with_model([&](auto& model) { return model.input_grad(unit); });
  }
  std::int64_t activation_bytes() const override {
    return with_model([](const auto& model) { return model.activation_bytes(); });
  }

  void set_tensor_group(TensorGroup* group) override {
    with_net([&](auto& net) {
      if constexpr (requires { net.model.set_tensor_group(group); }) {
        net.model.set_tensor_group(group);
      } else {
        TANDEM_CHECK(false);  // only transformers split (ModelSpec::tensor)
      }
    });
  }

  // ---- a step ----
  std::int64_t begin_step(int step) override {
    step_ = step;
    const std::int64_t start = device_.begin_step();
    with_model([](auto& model) { model.backend().reset_loss_sum(); });
    return start;
  }
  void set_micro_batch(int index) override {
    with_net([&](auto& net) {
      net.model.set_input(net.data.input(index));
      if constexpr (requires { net.model.set_skipped(std::vector<bool>{}); }) {
        if (layer_drop_ > 0) {  // each block, this micro-batch, this rank
          std::vector<bool> skipped(static_cast<std::size_t>(net.model.units()), false);
          for (int u = 1; u + 1 < net.model.units(); ++u) {
            skipped[static_cast<std::size_t>(u)] =
                layer_dropped(layer_drop_, seed_, rank_, index, u);
          }
          net.model.set_skipped(std::move(skipped));
        }
      }
    });
  }
  bool unit_ran(int unit) const override {
    return with_model([&](const auto& model) {
      if constexpr (requires { model.unit_ran(unit); }) {
        return model.unit_ran(unit);
      } else {
        return true;
      }
    });
  }
  void forward_unit(int unit) override {
    with_model([&](auto& model) { model.forward_unit(unit, device_.timer(), step_); });
  }
  void forward_loss() override {  // the backend adds the loss to its step's sum
    with_model([&](auto& model) { model.forward_loss(device_.timer(), step_); });
  }
  void backward_loss() override {
    with_model([&](auto& model) { model.backward_loss(device_.timer(), step_); });
  }
  void backward_unit(int unit) override {
    with_model([&](auto& model) { model.backward_unit(unit, device_.timer(), step_); });
  }
  // Forward passes over the held-out batches between steps, recording nothing:
  // evaluation is not part of a step's timeline (the next begin_step resets the sum).
  std::optional<double> validation_loss() override {
    device_.make_current();
    return with_net([&](auto& net) -> std::optional<double> {
      const int batches = net.data.validation_batches();
      if (batches == 0) return std::nullopt;
      Backend& dev = net.model.backend();
      dev.reset_loss_sum();
      for (int i = 0; i < batches; ++i) {
        net.model.forward(net.data.validation_input(i), device_.quiet_timer(), -1);
      }
      const double sum = dev.read_loss_sum();
      dev.reset_loss_sum();
      return sum / batches;
    });
  }
  void optimizer_step(float grad_scale) override {
    with_model([&](auto& model) {
      device_.optimizer_step(model.flat_params(), model.flat_grads(), grad_scale);
    });
  }
  void zero_grad() override {
    with_model([](auto& model) { model.zero_grad(); });
  }
  void begin_span(Lane lane, SpanKind kind, int tag, NameId name) override {
    device_.begin_span(lane, kind, step_, tag, name);
  }
  void end_span() override { device_.end_span(); }
  StepEnd end_step() override {
    return with_model([&](auto& model) {
      const StepEnd out = device_.end_step(model.backend());  // the device has finished
      model.settle();
      device_.note_memory();
      return out;
    });
  }

  std::vector<float> download_params() override {
    return with_model([](auto& model) { return model.download_params(); });
  }
  std::string describe() const override { return device_.describe(); }
  std::string device_details() const override { return device_.device_details(); }
  std::string timing_source() const override { return device_.timing_source(); }
  void reset_device_peak() override { device_.reset_device_peak(); }
  std::int64_t device_peak_bytes() const override { return device_.device_peak_bytes(); }

 private:
  template <typename Model, typename Data>
  struct Net {
    Net(const ModelConfig& c, Device& device)
        : model(c.spec, c.batch, c.seed, c.layout, device.backend_config()), data(c, device) {}
    Model model;
    Data data;
  };
  using MlpNet = Net<MlpOn<Backend>, typename Device::MlpData>;
  using TransformerNet = Net<TransformerOn<Backend>, typename Device::TokenStream>;

  template <typename F>
  decltype(auto) with_net(F&& f) {
    if (auto* mlp = std::get_if<MlpNet>(&net_)) return f(*mlp);
    return f(std::get<TransformerNet>(net_));
  }
  template <typename F>
  decltype(auto) with_model(F&& f) {
    return with_net([&](auto& net) -> decltype(auto) { return f(net.model); });
  }
  template <typename F>
  decltype(auto) with_model(F&& f) const {
    if (const auto* mlp = std::get_if<MlpNet>(&net_)) return f(mlp->model);
    return f(std::get<TransformerNet>(net_).model);
  }

  Device device_;  // first: the device and its stream outlive the model's buffers
  double layer_drop_ = 0;  // --layer-drop (ModelSpec::layer_drop)
  std::uint64_t seed_ = 0;
  int rank_ = 0;
  std::variant<std::monostate, MlpNet, TransformerNet> net_;
  int step_ = -1;
};

// Note [replica bytes]: what one replica of `config` allocates on Device, as the
// constructors allocate it (rank_model.h's ReplicaBytes): parameters, gradients and SGD
// velocity; the model's buffers and its data. Nothing is allocated to compute it. On a
// GPU the library's workspaces and the context are left out: a floor.
template <typename Device>
ReplicaBytes replica_bytes_on(const ModelConfig& config) {
  using Backend = typename Device::Backend;
  const ModelSpec& spec = config.spec;
  const typename Backend::Config sizing = Device::backend_config(config);
  ReplicaBytes out;
  out.state = 3.0 * static_cast<double>(spec.rank_parameter_count()) * sizeof(float);
  out.working =
      spec.is_transformer()
          ? static_cast<double>(TransformerOn<Backend>::buffer_bytes(spec, config.batch, sizing)) +
                Device::TokenStream::bytes(config)
          : static_cast<double>(MlpOn<Backend>::buffer_bytes(spec, config.batch, sizing)) +
                Device::MlpData::bytes(config);
  return out;
}

}  // namespace tandem
