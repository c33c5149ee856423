// The CUDA RankModel (model/rank_model.h): a network on one device (the mlp's CudaModel or
// the CudaTransformer), its SGD and its data, compute on one stream, spans timed by CUDA
// events; registered for --device cuda. One rank model serves both kinds, as on the CPU:
// what differs between them (the math, the data) is a CudaNet.
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
#include "cuda/resources.h"
#include "model/cuda/cuda_model.h"
#include "model/cuda/cuda_transformer.h"
#include "model/dataset.h"
#include "model/mlp.h"
#include "model/rank_model.h"
#include "model/token_data.h"
#include "timeline/gpu/event_timer.h"

namespace tandem {
namespace {

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
  cuda::DeviceBatch batch(int index) const {
    const int i = ((index % batches_) + batches_) % batches_;
    const std::size_t first = static_cast<std::size_t>(i) * static_cast<std::size_t>(rows_);
    return {.x = x_.data() + first * input_, .y = y_.data() + first, .rows = rows_};
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

  explicit DeviceTokenStream(const ModelConfig& c)
      : data_(c.data_path.empty()
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

  const TokenData& data() const { return data_; }

  // Micro-batch `index` (or held-out batch `index` when validation) on the device.
  cuda::DeviceTokens next(int index, bool validation, cudaStream_t stream) {
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

 private:
  std::size_t slot_size() const { return 2 * static_cast<std::size_t>(rows_) * seq_; }

  TokenData data_;
  int rows_, seq_, vocab_;
  std::vector<std::int32_t> tokens_;  // one batch [rows, seq + 1]
  cuda::PinnedBuffer<std::int32_t> pinned_;
  cuda::DeviceBuffer<std::int32_t> device_;  // inputs [rows, seq], then targets
  std::array<cuda::Event, kSlots> done_;
  std::array<bool, kSlots> used_{};
  int next_slot_ = 0;
};

// What CudaRankModel needs of a network on the device (CpuNet's twin in rank_model.cpp).
class CudaNet {
 public:
  virtual ~CudaNet() = default;
  virtual const ModelLayout& layout() const = 0;
  virtual std::span<float> params() = 0;
  virtual std::span<float> grads() = 0;
  virtual void set_micro_batch(int index) = 0;
  virtual void forward_unit(int unit, cuda::EventTimer* timer, int step) = 0;
  virtual void forward_loss(cuda::EventTimer* timer, int step) = 0;
  virtual void backward_loss(cuda::EventTimer* timer, int step) = 0;
  virtual void backward_unit(int unit, cuda::EventTimer* timer, int step) = 0;
  virtual void zero_grad() = 0;
  virtual void reset_loss_sum() = 0;
  virtual void enqueue_loss_readback() = 0;
  virtual double loss_sum_host() const = 0;
  virtual std::vector<float> download_params() = 0;
  virtual std::optional<double> validation_loss() { return std::nullopt; }
  virtual void configure_stage(const std::vector<bool>& owned, int slots) = 0;
  virtual void select_slot(int slot) = 0;
  virtual std::span<float> unit_input(int unit, int slot) = 0;
  virtual void begin_backward(int unit, std::span<const float> output_grad) = 0;
  virtual std::span<const float> input_grad(int unit) = 0;
  virtual std::int64_t activation_bytes() const = 0;
  // fp16 transformers: the loss scale their loss gradient is multiplied by.
  virtual void set_loss_scale(const cuda::LossScaleState* /*amp*/) {}
};

// The passes of a CudaModel or a CudaTransformer (the same unit-by-unit interface).
template <typename Net>
class CudaNetOf : public CudaNet {
 public:
  template <typename... Args>
  explicit CudaNetOf(Args&&... args) : net_(std::forward<Args>(args)...) {}

  const ModelLayout& layout() const override { return net_.layout(); }
  std::span<float> params() override { return {net_.flat_params(), net_.numel()}; }
  std::span<float> grads() override { return {net_.flat_grads(), net_.numel()}; }
  void forward_unit(int unit, cuda::EventTimer* timer, int step) override {
    net_.forward_unit(unit, timer, step);
  }
  void forward_loss(cuda::EventTimer* timer, int step) override { net_.forward_loss(timer, step); }
  void backward_loss(cuda::EventTimer* timer, int step) override {
    net_.backward_loss(timer, step);
  }
  void backward_unit(int unit, cuda::EventTimer* timer, int step) override {
    net_.backward_unit(unit, timer, step);
  }
  void zero_grad() override { net_.zero_grad(); }
  void reset_loss_sum() override { net_.reset_loss_sum(); }
  void enqueue_loss_readback() override { net_.enqueue_loss_readback(); }
  double loss_sum_host() const override { return net_.loss_sum_host(); }
  std::vector<float> download_params() override { return net_.download_params(); }
  void configure_stage(const std::vector<bool>& owned, int slots) override {
    net_.configure_stage(owned, slots);
  }
  void select_slot(int slot) override { net_.select_slot(slot); }
  std::span<float> unit_input(int unit, int slot) override { return net_.unit_input(unit, slot); }
  void begin_backward(int unit, std::span<const float> output_grad) override {
    net_.begin_backward(unit, output_grad);
  }
  std::span<const float> input_grad(int unit) override { return net_.input_grad(unit); }
  std::int64_t activation_bytes() const override { return net_.activation_bytes(); }

 protected:
  Net net_;
};

class MlpNet final : public CudaNetOf<cuda::CudaModel> {
 public:
  MlpNet(const ModelConfig& c, cudaStream_t stream)
      : CudaNetOf(c.spec, c.batch, c.seed, c.precision, stream, c.layout), data_(c, stream) {}
  void set_micro_batch(int index) override { net_.set_input(data_.batch(index)); }

 private:
  DeviceDataset data_;
};

class TransformerNet final : public CudaNetOf<cuda::CudaTransformer> {
 public:
  TransformerNet(const ModelConfig& c, cudaStream_t stream)
      : CudaNetOf(c.spec, c.batch, c.seed, c.precision, stream, c.layout),
        tokens_(c),
        stream_(stream) {}
  void set_micro_batch(int index) override {
    net_.set_input(tokens_.next(index, /*validation=*/false, stream_));
  }
  void set_loss_scale(const cuda::LossScaleState* amp) override { net_.set_loss_scale(amp); }

  // Forward passes over the held-out batches, timing nothing, between steps; the loss
  // accumulator is the step's, which the next begin_step resets.
  std::optional<double> validation_loss() override {
    const int batches = tokens_.data().validation_batches();
    if (batches == 0) return std::nullopt;
    net_.reset_loss_sum();
    for (int i = 0; i < batches; ++i) {
      net_.set_input(tokens_.next(i, /*validation=*/true, stream_));
      for (int u = 0; u < net_.units(); ++u) net_.forward_unit(u, nullptr, -1);
      net_.forward_loss(nullptr, -1);
    }
    const double sum = net_.read_loss_sum();
    net_.reset_loss_sum();
    return sum / batches;
  }

 private:
  DeviceTokenStream tokens_;
  cudaStream_t stream_;
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

std::unique_ptr<CudaNet> make_net(const ModelConfig& config, cudaStream_t stream) {
  if (config.spec.is_transformer()) return std::make_unique<TransformerNet>(config, stream);
  return std::make_unique<MlpNet>(config, stream);
}

class CudaRankModel final : public RankModel {
 public:
  CudaRankModel(const ModelConfig& config, RankRecorder& recorder)
      : device_(current(config.ordinal)),
        net_(make_net(config, stream_.get())),
        sgd_(config.sgd, net_->params().size(), stream_.get()),
        timer_(device_, recorder.enabled(), &recorder),
        recorder_(recorder),
        precision_(config.precision) {
    if (config.precision == Precision::kFp16 && config.spec.is_transformer()) {
      amp_.emplace(1);
      amp_host_.emplace(1);
      const cuda::LossScaleState initial;
      amp_->upload(std::span<const cuda::LossScaleState>(&initial, 1), stream_.get());
      net_->set_loss_scale(amp_->data());
    }
  }

  // Kernels still queued may write the buffers about to be freed.
  ~CudaRankModel() override { cudaStreamSynchronize(stream_.get()); }

  const ModelLayout& layout() const override { return net_->layout(); }
  std::span<float> params() override { return net_->params(); }
  std::span<float> grads() override { return net_->grads(); }
  ComputeStream stream() const override { return stream_.get(); }
  // Zeroed on the stream; the memory stays allocated (giving device memory back would
  // take CUDA's virtual memory management, docs/SHARDING.md).
  void discard_params(std::size_t begin, std::size_t end) override {
    zero(net_->params(), begin, end);
  }
  void discard_grads(std::size_t begin, std::size_t end) override { zero(net_->grads(), begin, end); }
  std::unique_ptr<ModelArray> allocate_zeroed(std::size_t numel) override {
    TANDEM_CUDA_CHECK(cudaSetDevice(device_));
    return std::make_unique<DeviceArray>(numel, stream_.get());
  }
  void copy(std::span<const float> from, std::span<float> to) override {
    TANDEM_CHECK_EQ(from.size(), to.size());
    if (from.empty()) return;
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), from.size_bytes(),
                                      cudaMemcpyDeviceToDevice, stream_.get()));
  }
  void sgd_step(std::span<float> params, std::span<const float> grads, std::span<float> velocity,
                float grad_scale) override {
    TANDEM_CHECK(!amp_);  // fp16 transformers are refused with sharded strategies (trainer.cpp)
    sgd_.step(params, grads, velocity, grad_scale, stream_.get());
  }

  std::int64_t begin_step(int step) override {
    TANDEM_CUDA_CHECK(cudaSetDevice(device_));
    step_ = step;
    timer_.start_step(stream_.get());
    net_->reset_loss_sum();
    return timer_.enabled() ? timer_.anchor_ns() : now_ns();
  }
  void set_micro_batch(int index) override { net_->set_micro_batch(index); }
  void configure_stage(const std::vector<bool>& owned, int slots) override {
    TANDEM_CUDA_CHECK(cudaSetDevice(device_));
    net_->configure_stage(owned, slots);
  }
  void select_slot(int slot) override { net_->select_slot(slot); }
  std::span<float> unit_input(int unit, int slot) override { return net_->unit_input(unit, slot); }
  void begin_backward(int unit, std::span<const float> output_grad) override {
    net_->begin_backward(unit, output_grad);
  }
  std::span<const float> input_grad(int unit) override { return net_->input_grad(unit); }
  std::int64_t activation_bytes() const override { return net_->activation_bytes(); }
  void forward_unit(int unit) override { net_->forward_unit(unit, &timer_, step_); }
  void forward_loss() override { net_->forward_loss(&timer_, step_); }
  void backward_loss() override { net_->backward_loss(&timer_, step_); }
  void backward_unit(int unit) override { net_->backward_unit(unit, &timer_, step_); }
  std::optional<double> validation_loss() override {
    TANDEM_CUDA_CHECK(cudaSetDevice(device_));
    return net_->validation_loss();
  }
  // With fp16's loss scale: an overflowed gradient skips the step, on the device.
  void optimizer_step(float grad_scale) override {
    if (!amp_) {
      sgd_.step(net_->params().data(), net_->grads().data(), grad_scale, stream_.get());
      return;
    }
    const std::span<float> grads = net_->grads();
    cuda::find_nonfinite(grads.data(), grads.size(), amp_->data(), stream_.get());
    sgd_.step(net_->params().data(), grads.data(), grad_scale, stream_.get(), amp_->data());
    cuda::update_loss_scale(amp_->data(), kLossScaleGrowthInterval, stream_.get());
  }
  void zero_grad() override { net_->zero_grad(); }
  void begin_span(Lane lane, SpanKind kind, int tag) override {
    timer_.begin(stream_.get(), lane, kind, step_, tag);
  }
  void end_span() override { timer_.end(stream_.get()); }

  // The step's one host synchronization.
  StepEnd end_step() override {
    net_->enqueue_loss_readback();
    if (amp_) {
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(amp_host_->data(), amp_->data(),
                                        sizeof(cuda::LossScaleState), cudaMemcpyDeviceToHost,
                                        stream_.get()));
    }
    stream_.synchronize();
    const std::int64_t end = timer_.flush(recorder_);
    StepEnd out{.loss_sum = net_->loss_sum_host(), .end_ns = end};
    if (amp_) {
      out.loss_scale = amp_host_->data()->scale;
      out.skipped_steps = amp_host_->data()->skipped;
    }
    return out;
  }

  std::vector<float> download_params() override { return net_->download_params(); }
  std::string describe() const override {
    return cuda::cublas_description() + ", " + std::string(to_string(precision_)) + " GEMMs";
  }
  std::string device_details() const override {
    return "device " + std::to_string(device_) + ": " + cuda::describe_device(device_);
  }
  std::string timing_source() const override { return "cuda-events"; }

 private:
  void zero(std::span<float> flat, std::size_t begin, std::size_t end) {
    TANDEM_CHECK(begin <= end && end <= flat.size());
    TANDEM_CUDA_CHECK(
        cudaMemsetAsync(flat.data() + begin, 0, (end - begin) * sizeof(float), stream_.get()));
  }
  const int device_;
  cuda::Stream stream_;
  std::unique_ptr<CudaNet> net_;
  cuda::CudaSgd sgd_;
  cuda::EventTimer timer_;
  RankRecorder& recorder_;
  Precision precision_;
  int step_ = -1;
  // fp16 transformers: the dynamic loss scale on the device, and its copy read each step.
  static constexpr int kLossScaleGrowthInterval = 2000;  // clean steps before it doubles
  std::optional<cuda::DeviceBuffer<cuda::LossScaleState>> amp_;
  std::optional<cuda::PinnedBuffer<cuda::LossScaleState>> amp_host_;
};

std::unique_ptr<RankModel> make(const ModelConfig& config, RankRecorder& recorder) {
  return std::make_unique<CudaRankModel>(config, recorder);
}

std::string unavailable() { return cuda::unavailable_reason(); }

int count() { return cuda::device_count(); }

// Note [device memory estimate]: what a replica allocates in device memory, as the
// constructors above allocate it: parameters, gradients, SGD velocity, the net's buffers
// and its data. cuBLAS's workspace and the CUDA context are left out, so it is a floor.
ReplicaBytes device_replica_bytes(const ModelConfig& config) {
  const ModelSpec& spec = config.spec;
  ReplicaBytes out;
  out.state = 3.0 * static_cast<double>(spec.parameter_count()) * sizeof(float);
  if (spec.is_transformer()) {
    out.working = static_cast<double>(
                      cuda::CudaTransformer::buffer_bytes(spec, config.batch, config.precision)) +
                  4.0 * 2 * config.batch * spec.transformer.seq;
  } else {
    out.working =
        static_cast<double>(Mlp::buffer_bytes(spec, config.batch)) + DeviceDataset::bytes(config);
  }
  return out;
}

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

[[maybe_unused]] const bool kRegistered =
    register_device_models(Device::kCuda, DeviceModels{.unavailable = &unavailable,
                                                       .make = &make,
                                                       .count = &count,
                                                       .replica_bytes = &device_replica_bytes,
                                                       .free_bytes = &free_bytes});

}  // namespace
}  // namespace tandem
