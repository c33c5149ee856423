// The CUDA RankModel (model/rank_model.h): device_rank_model.h over CudaDevice, registered
// for --device cuda. The models' passes run on one stream through the CUDA backend
// (cuda_backend.h); spans are timed by CUDA events.
//
// Nothing waits on the host until end_step(): the step's loss is copied to pinned memory
// on the stream, the stream is synchronized once, and the events become spans.
#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "compute/cuda/gemm.h"
#include "compute/cuda/kernels.h"
#include "core/clock.h"
#include "core/error.h"
#include "cuda/check.h"
#include "cuda/device_pages.h"
#include "cuda/resources.h"
#include "model/cuda/cuda_models.h"
#include "model/dataset.h"
#include "model/device_rank_model.h"
#include "model/mlp.h"
#include "model/rank_model.h"
#include "model/token_data.h"
#include "timeline/gpu/event_timer.h"

namespace tandem {
namespace {

// The cast kernels take the GEMM precision whose input type a compressed gradient has.
Precision precision_of(DataType type) {
  TANDEM_CHECK(type != DataType::kFloat32);
  return type == DataType::kBFloat16 ? Precision::kBf16 : Precision::kFp16;
}

// The mlp's synthetic shard: generated on the host by the CPU model's code (so both
// devices train on the same samples) and copied to the device once, before step 0.
class DeviceDataset {
 public:
  DeviceDataset(const ModelConfig& config, cudaStream_t stream)
      : rows_(config.batch),
        batches_(config.data_batches),
        input_(static_cast<std::size_t>(config.spec.input)) {
    const SyntheticDataset data(config.spec.input, config.spec.classes, config.batch,
                                config.data_batches, config.seed, config.rank);
    const auto rows = static_cast<std::size_t>(rows_);
    const auto batches = static_cast<std::size_t>(batches_);
    x_ = cuda::DeviceBuffer<float>(batches * rows * input_);
    y_ = cuda::DeviceBuffer<std::int32_t>(batches * rows);
    for (int i = 0; i < batches_; ++i) {
      const Batch batch = data.batch(i);
      const std::size_t first = static_cast<std::size_t>(i) * rows;
      x_.upload(batch.x, stream, first * input_);
      y_.upload(batch.y, stream, first);
    }
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));  // `data` is freed on return
  }

  // Batch (index mod batches), as SyntheticDataset::batch.
  cuda::DeviceBatch input(int index) const {
    const int i = ((index % batches_) + batches_) % batches_;
    const std::size_t first = static_cast<std::size_t>(i) * static_cast<std::size_t>(rows_);
    return {.x = x_.data() + first * input_, .y = y_.data() + first, .rows = rows_};
  }

  int validation_batches() const { return 0; }
  cuda::DeviceBatch validation_input(int) const {
    throw RuntimeError("an mlp's synthetic data has no held-out batches");
  }

  static double bytes(const ModelConfig& config) {
    return 4.0 * config.batch * config.data_batches * (config.spec.input + 1.0);
  }

 private:
  int rows_;
  int batches_;
  std::size_t input_;
  cuda::DeviceBuffer<float> x_;
  cuda::DeviceBuffer<std::int32_t> y_;
};

// A transformer's tokens (token_data.h: synthetic or a file's bytes, the CPU's), drawn on
// the host per micro-batch and split into inputs and targets in pinned memory, then
// copied to the device on the stream. The device copy is one buffer: the next copy is
// ordered on the stream after every kernel that reads the last one. The pinned slots
// rotate; a slot is refilled only after its last copy completed (an event), which within
// a step of up to kSlots micro-batches is always already the case: the previous step
// ended with a synchronization.
class DeviceTokenStream {
 public:
  static constexpr int kSlots = 4;

  DeviceTokenStream(const ModelConfig& c, cudaStream_t stream)
      : stream_(stream),
        data_(c.data_path.empty()
                  ? TokenData::synthetic(c.spec.transformer.vocab, c.spec.transformer.seq, c.batch,
                                         c.seed, c.rank)
                  : TokenData::from_file(c.data_path, c.spec.transformer.seq, c.batch, c.seed,
                                         c.rank, c.ranks)),
        rows_(c.batch),
        seq_(c.spec.transformer.seq),
        vocab_(c.spec.transformer.vocab),
        tokens_(static_cast<std::size_t>(rows_) * (seq_ + 1)),
        pinned_(kSlots * slot_size()),
        device_(slot_size()) {
    TANDEM_CHECK_EQ(data_.vocab(), vocab_);
  }

  cuda::DeviceTokens input(int index) { return next(index, /*validation=*/false); }
  // The device copy of one batch's inputs and targets (the pinned slots are host memory).
  static double bytes(const ModelConfig& c) { return 4.0 * 2 * c.batch * c.spec.transformer.seq; }
  int validation_batches() const { return data_.validation_batches(); }
  cuda::DeviceTokens validation_input(int index) { return next(index, /*validation=*/true); }

 private:
  // Micro-batch `index` (or held-out batch `index` when validation) on the device.
  cuda::DeviceTokens next(int index, bool validation) {
    const cudaStream_t stream = stream_;
    if (validation) {
      data_.validation_batch(index, tokens_);
    } else {
      data_.batch(index, tokens_);
    }
    const int slot = next_slot_;
    next_slot_ = (next_slot_ + 1) % kSlots;
    if (used_[static_cast<std::size_t>(slot)]) done_[static_cast<std::size_t>(slot)].synchronize();
    std::int32_t* inputs = pinned_.data() + static_cast<std::size_t>(slot) * slot_size();
    std::int32_t* targets = inputs + slot_size() / 2;
    for (int b = 0; b < rows_; ++b) {
      const std::int32_t* seq = tokens_.data() + static_cast<std::ptrdiff_t>(b) * (seq_ + 1);
      for (int t = 0; t < seq_; ++t) {
        TANDEM_CHECK(seq[t] >= 0 && seq[t] < vocab_ && seq[t + 1] >= 0 && seq[t + 1] < vocab_);
        inputs[static_cast<std::ptrdiff_t>(b) * seq_ + t] = seq[t];
        targets[static_cast<std::ptrdiff_t>(b) * seq_ + t] = seq[t + 1];
      }
    }
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(device_.data(), inputs, slot_size() * sizeof(std::int32_t),
                                      cudaMemcpyHostToDevice, stream));
    done_[static_cast<std::size_t>(slot)].record(stream);
    used_[static_cast<std::size_t>(slot)] = true;
    return {.inputs = device_.data(), .targets = device_.data() + slot_size() / 2, .rows = rows_};
  }

  std::size_t slot_size() const { return 2 * static_cast<std::size_t>(rows_) * seq_; }

  cudaStream_t stream_;
  TokenData data_;
  int rows_, seq_, vocab_;
  std::vector<std::int32_t> tokens_;  // one batch [rows, seq + 1]
  cuda::PinnedBuffer<std::int32_t> pinned_;
  cuda::DeviceBuffer<std::int32_t> device_;  // inputs [rows, seq], then targets
  std::array<cuda::Event, kSlots> done_;
  std::array<bool, kSlots> used_{};
  int next_slot_ = 0;
};

// Device memory, zeroed on the stream that will use it. Freeing it (cudaFree) waits for
// the device, so no queued kernel outlives it.
class DeviceArray final : public ModelArray {
 public:
  DeviceArray(std::size_t numel, cudaStream_t stream) : buffer_(numel) { buffer_.zero(stream); }
  std::span<float> span() override { return {buffer_.data(), buffer_.size()}; }

 private:
  cuda::DeviceBuffer<float> buffer_;
};

int current(int ordinal) {
  const int device = ordinal < 0 ? 0 : ordinal;
  TANDEM_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

// CUDA at a rank's level (device_rank_model.h's Device): the rank's device and stream,
// its data in device memory, spans from CUDA events, SGD (with fp16's dynamic loss
// scale for transformers) on the stream.
class CudaDevice {
 public:
  using Backend = cuda::CudaBackend;

  class MlpData : public DeviceDataset {
   public:
    MlpData(const ModelConfig& c, CudaDevice& device) : DeviceDataset(c, device.stream_.get()) {}
  };
  class TokenStream : public DeviceTokenStream {
   public:
    TokenStream(const ModelConfig& c, CudaDevice& device)
        : DeviceTokenStream(c, device.stream_.get()) {}
  };

  CudaDevice(const ModelConfig& config, RankRecorder& recorder)
      : device_(current(config.ordinal)),
        timer_(device_, recorder.enabled(), &recorder),
        recorder_(recorder),
        precision_(config.precision) {
    if (config.precision == Precision::kFp16 && config.spec.is_transformer()) {
      amp_.emplace(1);
      amp_host_.emplace(1);
      const cuda::LossScaleState initial;
      amp_->upload(std::span<const cuda::LossScaleState>(&initial, 1), stream_.get());
    }
  }

  Backend::Config backend_config() const {
    return {.precision = precision_, .stream = stream_.get()};
  }
  static Backend::Config backend_config(const ModelConfig& config) {
    return {.precision = config.precision};
  }
  void prepare(const ModelConfig& config, Backend& backend, std::size_t numel) {
    sgd_.emplace(config.sgd, numel);
    if (amp_) backend.set_loss_scale(amp_->data());
  }
  cuda::EventTimer* timer() { return &timer_; }
  cuda::EventTimer* quiet_timer() { return nullptr; }
  ComputeStream stream() const { return stream_.get(); }
  void make_current() { TANDEM_CUDA_CHECK(cudaSetDevice(device_)); }
  void finish() { cudaStreamSynchronize(stream_.get()); }

  // Device memory, zeroed on the stream; freeing it (cudaFree) waits for the device.
  std::unique_ptr<ModelArray> allocate_zeroed(std::size_t numel) {
    make_current();
    return std::make_unique<DeviceArray>(numel, stream_.get());
  }
  void sgd_step(std::span<float> params, std::span<const float> grads, std::span<float> velocity,
                float grad_scale) {
    TANDEM_CHECK(!amp_);  // fp16 transformers are refused with sharded strategies (trainer.cpp)
    sgd_->step(params, grads, velocity, grad_scale, stream_.get());
  }
  void narrow(std::span<const float> from, std::uint16_t* to, DataType type, float scale) {
    cuda::cast_from_float(to, from.data(), from.size(), precision_of(type), scale, stream_.get());
  }
  void widen(const std::uint16_t* from, std::span<float> to, DataType type) {
    cuda::cast_to_float(to.data(), from, to.size(), precision_of(type), stream_.get());
  }
  // With fp16's loss scale: an overflowed gradient skips the step, on the device.
  void optimizer_step(std::span<float> params, std::span<const float> grads, float grad_scale) {
    if (!amp_) {
      sgd_->step(params.data(), grads.data(), grad_scale, stream_.get());
      return;
    }
    cuda::find_nonfinite(grads.data(), grads.size(), amp_->data(), stream_.get());
    sgd_->step(params.data(), grads.data(), grad_scale, stream_.get(), amp_->data());
    cuda::update_loss_scale(amp_->data(), kLossScaleGrowthInterval, stream_.get());
  }

  std::int64_t begin_step() {
    make_current();
    timer_.start_step(stream_.get());
    return timer_.enabled() ? timer_.anchor_ns() : now_ns();
  }
  void begin_span(Lane lane, SpanKind kind, int step, int tag, NameId name) {
    timer_.begin(stream_.get(), lane, kind, step, tag, 0, name);
  }
  void end_span() { timer_.end(stream_.get()); }
  // The step's one host synchronization.
  RankModel::StepEnd end_step(Backend& backend) {
    backend.enqueue_loss_readback();
    if (amp_) {
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(amp_host_->data(), amp_->data(),
                                        sizeof(cuda::LossScaleState), cudaMemcpyDeviceToHost,
                                        stream_.get()));
    }
    stream_.synchronize();
    const std::int64_t end = timer_.flush(recorder_);
    RankModel::StepEnd out{.loss_sum = backend.loss_sum_host(), .end_ns = end};
    if (amp_) {
      out.loss_scale = amp_host_->data()->scale;
      out.skipped_steps = amp_host_->data()->skipped;
    }
    return out;
  }

  std::string describe() const {
    return cuda::cublas_description() + ", " + std::string(to_string(precision_)) + " GEMMs";
  }
  std::string device_details() const {
    return "device " + std::to_string(device_) + ": " + cuda::describe_device(device_);
  }
  std::string timing_source() const { return "cuda-events"; }
  void reset_device_peak() { cuda::reset_device_peak(device_); }
  void note_memory() { cuda::note_device_memory(device_); }
  std::int64_t device_peak_bytes() const { return cuda::device_peak(device_); }

 private:
  const int device_;
  cuda::Stream stream_;
  cuda::EventTimer timer_;
  RankRecorder& recorder_;
  Precision precision_;
  std::optional<cuda::CudaSgd> sgd_;
  // fp16 transformers: the dynamic loss scale on the device, and its copy read each step.
  static constexpr int kLossScaleGrowthInterval = 2000;  // clean steps before it doubles
  std::optional<cuda::DeviceBuffer<cuda::LossScaleState>> amp_;
  std::optional<cuda::PinnedBuffer<cuda::LossScaleState>> amp_host_;
};

std::unique_ptr<RankModel> make(const ModelConfig& config, RankRecorder& recorder) {
  return std::make_unique<DeviceRankModel<CudaDevice>>(config, recorder);
}

std::string unavailable() { return cuda::unavailable_reason(); }

int count() { return cuda::device_count(); }

// The calling thread's current device is left as it was (the launcher sets up the
// device communicators on this thread afterwards).
std::int64_t free_bytes(int ordinal) {
  int previous = 0;
  std::size_t free = 0, total = 0;
  const bool ok = cudaGetDevice(&previous) == cudaSuccess &&
                  cudaSetDevice(ordinal) == cudaSuccess &&
                  cudaMemGetInfo(&free, &total) == cudaSuccess;
  cudaSetDevice(previous);
  if (!ok) {
    cudaGetLastError();
    return -1;
  }
  return static_cast<std::int64_t>(free);
}

std::string pci_bus_id(int ordinal) {
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof id, ordinal) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return id;
}

[[maybe_unused]] const bool kRegistered = register_device_models(
    Device::kCuda, DeviceModels{.unavailable = &unavailable,
                                .make = &make,
                                .count = &count,
                                .replica_bytes = &replica_bytes_on<CudaDevice>,
                                .free_bytes = &free_bytes,
                                .pci_bus_id = &pci_bus_id});

}  // namespace
}  // namespace tandem
