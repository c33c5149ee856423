// The CPU's RankModel (device_rank_model.h over CpuDevice) and the device registry.
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
#include "core/plugin.h"
#include "model/dataset.h"
#include "model/device_rank_model.h"
#include "model/mlp.h"
#include "model/token_data.h"
#include "model/transformer.h"

namespace tandem {

namespace {

// The CPU at a rank's level (device_rank_model.h's Device): data in host memory, spans
// on the host clock as each call runs, SGD on the host.
class CpuDevice {
 public:
  using Backend = CpuBackend<float>;

  // An mlp's synthetic shard.
  class MlpData {
   public:
    MlpData(const ModelConfig& c, CpuDevice&)
        : data_(c.spec.input, c.spec.classes, c.batch, c.data_batches, c.seed, c.rank) {}
    Batch input(int index) const { return data_.batch(index); }
    // The synthetic set's features and labels, and the teacher's outputs while labelling.
    static double bytes(const ModelConfig& c) {
      const double samples = static_cast<double>(c.batch) * c.data_batches;
      return 4 * samples * (c.spec.input + 1 + 64 + c.spec.classes);
    }
    int validation_batches() const { return 0; }
    Batch validation_input(int) const {
      throw RuntimeError("an mlp's synthetic data has no held-out batches");
    }

   private:
    SyntheticDataset data_;
  };

  // A transformer's tokens: synthetic, or a file's bytes (token_data.h).
  class TokenStream {
   public:
    TokenStream(const ModelConfig& c, CpuDevice&)
        : data_(c.data_path.empty()
                    ? TokenData::synthetic(c.spec.transformer.vocab, c.spec.transformer.seq,
                                           c.batch, c.seed, c.rank)
                    : TokenData::from_file(c.data_path, c.spec.transformer.seq, c.batch, c.seed,
                                           c.rank, c.ranks)),
          tokens_(static_cast<std::size_t>(c.batch) * (c.spec.transformer.seq + 1)),
          rows_(c.batch) {
      TANDEM_CHECK_EQ(data_.vocab(), c.spec.transformer.vocab);
    }
    TokenBatch input(int index) {
      data_.batch(index, tokens_);
      return {.tokens = tokens_, .rows = rows_};
    }
    // One batch of tokens, and the synthetic chain's successor table.
    static double bytes(const ModelConfig& c) {
      const TransformerShape& s = c.spec.transformer;
      const double tokens = static_cast<double>(c.batch) * (s.seq + 1);
      const double chain = static_cast<double>(s.vocab) * TokenData::kSuccessors;
      return 4 * (tokens + (c.data_path.empty() ? chain : 0));
    }
    int validation_batches() const { return data_.validation_batches(); }
    TokenBatch validation_input(int index) {
      data_.validation_batch(index, tokens_);
      return {.tokens = tokens_, .rows = rows_};
    }

   private:
    TokenData data_;
    std::vector<std::int32_t> tokens_;  // one batch [rows, seq + 1]
    int rows_;
  };

  CpuDevice(const ModelConfig&, RankRecorder& recorder) : recorder_(recorder) {}

  Backend::Config backend_config() const { return {}; }
  static Backend::Config backend_config(const ModelConfig&) { return {}; }
  void prepare(const ModelConfig& config, Backend&, std::size_t numel) {
    sgd_.emplace(config.sgd, numel);
  }
  RankRecorder& timer() { return recorder_; }
  RankRecorder& quiet_timer() { return quiet_; }
  ComputeStream stream() const { return nullptr; }
  void make_current() {}
  void finish() {}

  std::unique_ptr<ModelArray> allocate_zeroed(std::size_t numel) {
    return std::make_unique<HostArray>(numel);
  }
  void sgd_step(std::span<float> params, std::span<const float> grads, std::span<float> velocity,
                float grad_scale) {
    sgd_update(sgd_->options(), params, grads, velocity, grad_scale);
  }
  void optimizer_step(std::span<float> params, std::span<const float> grads, float grad_scale) {
    sgd_->step(params, grads, grad_scale);
  }
  void narrow(std::span<const float> from, std::uint16_t* to, DataType type, float scale) {
    tandem::narrow(type, to, from.data(), from.size(), scale);
  }
  void widen(const std::uint16_t* from, std::span<float> to, DataType type) {
    tandem::widen(type, to.data(), from, to.size());
  }

  std::int64_t begin_step() { return now_ns(); }
  void begin_span(Lane lane, SpanKind kind, int step, int tag, NameId name) {
    open_.push_back(Span{.lane = lane,
                         .kind = kind,
                         .name = name,
                         .step = step,
                         .tag = tag,
                         .start_ns = now_ns()});
  }
  void end_span() {
    TANDEM_CHECK(!open_.empty());
    Span span = open_.back();
    open_.pop_back();
    span.end_ns = now_ns();
    recorder_.record(span);
  }
  RankModel::StepEnd end_step(Backend& backend) {
    return {.loss_sum = backend.read_loss_sum(), .end_ns = now_ns()};
  }

  std::string describe() const { return blas_description(); }
  std::string device_details() const { return {}; }
  std::string timing_source() const { return "host-clock"; }
  // The CPU's peak is the process's resident set (trainer.cpp), not a device's.
  void reset_device_peak() {}
  void note_memory() {}
  std::int64_t device_peak_bytes() const { return -1; }

 private:
  // Anonymous pages (core/page_array.h): zero without being touched, resident once written.
  class HostArray final : public ModelArray {
   public:
    explicit HostArray(std::size_t numel) : array_(numel) {}
    std::span<float> span() override { return array_; }

   private:
    PageArray<float> array_;
  };

  RankRecorder& recorder_;
  RankRecorder quiet_{0, 0, /*enabled=*/false};
  std::optional<Sgd> sgd_;
  std::vector<Span> open_;  // begin_span's, innermost last
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

namespace {
const DeviceModels* registered(Device device) {
  std::lock_guard lock(registry_mutex());
  const auto it = registry().find(device);
  return it == registry().end() ? nullptr : &it->second;
}
}  // namespace

// A device's models live in the GPU plug-in (core/plugin.h), loaded on the first miss.
const DeviceModels* find_device_models(Device device) {
  if (const DeviceModels* models = registered(device)) return models;
  if (device == Device::kCpu || !load_gpu_plugin().empty()) return nullptr;
  return registered(device);
}

void check_device_available(Device device) {
  if (device == Device::kCpu) return;
  const std::string name(to_string(device));
  const DeviceModels* models = find_device_models(device);
  if (models == nullptr) {
    throw UsageError("--device " + name + ": " +
                     (load_gpu_plugin().empty()
                          ? "this tandem's GPU plug-in has no " + name + " support"
                          : load_gpu_plugin()));
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
  return replica_bytes_on<CpuDevice>(config);
}

std::unique_ptr<RankModel> make_rank_model(const ModelConfig& config, RankRecorder& recorder) {
  if (config.device == Device::kCpu) {
    return std::make_unique<DeviceRankModel<CpuDevice>>(config, recorder);
  }
  check_device_available(config.device);
  return find_device_models(config.device)->make(config, recorder);
}

}  // namespace tandem
