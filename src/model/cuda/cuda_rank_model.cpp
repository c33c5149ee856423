// The CUDA RankModel (model/rank_model.h): CudaModel, its SGD and its data shard on one
// device, compute on one stream, spans timed by CUDA events; registered for --device cuda.
//
// Nothing waits on the host until end_step(): the step's loss is copied to pinned memory
// on the stream, the stream is synchronized once, and the events become spans.
#include <memory>

#include "compute/cuda/gemm.h"
#include "core/clock.h"
#include "core/error.h"
#include "cuda/check.h"
#include "cuda/resources.h"
#include "model/cuda/cuda_model.h"
#include "model/rank_model.h"
#include "timeline/gpu/event_timer.h"

namespace tandem {
namespace {

// The rank's synthetic shard: generated on the host by the CPU model's code (so both
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

 private:
  int rows_;
  int batches_;
  std::size_t input_;
  cuda::DeviceBuffer<float> x_;
  cuda::DeviceBuffer<std::int32_t> y_;
};

int current(int ordinal) {
  const int device = ordinal < 0 ? 0 : ordinal;
  TANDEM_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

class CudaRankModel final : public RankModel {
 public:
  CudaRankModel(const ModelConfig& config, RankRecorder& recorder)
      : device_(current(config.ordinal)),
        model_(config.spec, config.batch, config.seed, config.precision, stream_.get()),
        sgd_(config.sgd, model_.numel(), stream_.get()),
        data_(config, stream_.get()),
        timer_(device_, recorder.enabled()),
        recorder_(recorder),
        precision_(config.precision) {}

  void zero(float* flat, std::size_t begin, std::size_t end) {
    TANDEM_CHECK(begin <= end && end <= model_.numel());
    TANDEM_CUDA_CHECK(
        cudaMemsetAsync(flat + begin, 0, (end - begin) * sizeof(float), stream_.get()));
  }

  // Kernels still queued may write the buffers about to be freed.
  ~CudaRankModel() override { cudaStreamSynchronize(stream_.get()); }

  const ModelLayout& layout() const override { return model_.layout(); }
  std::span<float> params() override { return {model_.flat_params(), model_.numel()}; }
  std::span<float> grads() override { return {model_.flat_grads(), model_.numel()}; }
  ComputeStream stream() const override { return stream_.get(); }
  // Zeroed on the stream; the memory stays allocated (sharded strategies run on the cpu
  // device only so far, docs/SHARDING.md).
  void discard_params(std::size_t begin, std::size_t end) override {
    zero(model_.flat_params(), begin, end);
  }
  void discard_grads(std::size_t begin, std::size_t end) override {
    zero(model_.flat_grads(), begin, end);
  }

  std::int64_t begin_step(int step) override {
    TANDEM_CUDA_CHECK(cudaSetDevice(device_));
    step_ = step;
    timer_.start_step(stream_.get());
    model_.reset_loss_sum();
    return timer_.enabled() ? timer_.anchor_ns() : now_ns();
  }
  void set_micro_batch(int index) override { model_.set_input(data_.batch(index)); }
  void forward_unit(int unit) override { model_.forward_unit(unit, &timer_, step_); }
  void forward_loss() override { model_.forward_loss(&timer_, step_); }
  void backward_loss() override { model_.backward_loss(&timer_, step_); }
  void backward_unit(int unit) override { model_.backward_unit(unit, &timer_, step_); }
  void optimizer_step(float grad_scale) override {
    sgd_.step(model_.flat_params(), model_.flat_grads(), grad_scale, stream_.get());
  }
  void zero_grad() override { model_.zero_grad(); }
  void begin_span(Lane lane, SpanKind kind, int tag) override {
    timer_.begin(stream_.get(), lane, kind, step_, tag);
  }
  void end_span() override { timer_.end(stream_.get()); }

  // The step's one host synchronization.
  StepEnd end_step() override {
    model_.enqueue_loss_readback();
    stream_.synchronize();
    const std::int64_t end = timer_.flush(recorder_);
    return {.loss_sum = model_.loss_sum_host(), .end_ns = end};
  }

  std::vector<float> download_params() override { return model_.download_params(); }
  std::string describe() const override {
    return cuda::cublas_description() + ", " + std::string(to_string(precision_)) + " GEMMs";
  }
  std::string device_details() const override {
    return "device " + std::to_string(device_) + ": " + cuda::describe_device(device_);
  }
  std::string timing_source() const override { return "cuda-events"; }

 private:
  const int device_;
  cuda::Stream stream_;
  cuda::CudaModel model_;
  cuda::CudaSgd sgd_;
  DeviceDataset data_;
  cuda::EventTimer timer_;
  RankRecorder& recorder_;
  Precision precision_;
  int step_ = -1;
};

std::unique_ptr<RankModel> make(const ModelConfig& config, RankRecorder& recorder) {
  return std::make_unique<CudaRankModel>(config, recorder);
}

std::string unavailable() { return cuda::unavailable_reason(); }

int count() { return cuda::device_count(); }

[[maybe_unused]] const bool kRegistered = register_device_models(
    Device::kCuda, DeviceModels{.unavailable = &unavailable, .make = &make, .count = &count});

}  // namespace
}  // namespace tandem
