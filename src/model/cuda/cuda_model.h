// The model of model/model.h on one CUDA device: the same ModelLayout (model/layout.h), so
// the same flat layout and the same initial parameters for a seed, and gradient bucket
// plans (ddp/reducer.h) and parameter hashes are interchangeable with the CPU engine.
// As a RankModel (model/rank_model.h) it registers itself for --device cuda
// (cuda_rank_model.cpp); this class is its math.
//
// Everything is enqueued on one compute stream; the host never waits inside forward or
// backward. Gradient rule as on the CPU: parameter gradients accumulate with +=,
// activation gradients are overwritten.
//
// Precision (compute/precision.h): parameters, gradients and all elementwise math are
// fp32. tf32 changes only the GEMMs' compute type. fp16/bf16 GEMMs read cast copies of
// their inputs (weights, layer inputs, output gradients) and accumulate in fp32 into fp32
// outputs; for fp16 the output gradient is cast after scaling by a power of two >= the
// batch (and the GEMM's alpha undoes it), so small gradients do not flush to zero.
//
// Compute spans (with an EventTimer) follow Mlp's list exactly: forward tag L per
// layer (activation included) and tag layer_count() for the loss; backward the loss
// first, then L = last..0 with the same flops. Driven unit by unit like Mlp:
// set_input, forward_unit(0..D-1), forward_loss, backward_loss, backward_unit(D-1..0).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "compute/precision.h"
#include "cuda/resources.h"
#include "model/layout.h"
#include "model/sgd.h"
#include "timeline/gpu/event_timer.h"

namespace tandem::cuda {

// A batch already in device memory: x [rows, input], y [rows] labels in [0, classes).
// It must stay unchanged until the stream has run the backward that follows.
struct DeviceBatch {
  const float* x = nullptr;
  const std::int32_t* y = nullptr;
  int rows = 0;
};

class CudaModel {
 public:
  // On the calling thread's current device, the flat arrays laid out by `layout` (a
  // sharded strategy pads them). Throws UsageError like Mlp for bad batches,
  // RuntimeError when CUDA fails (out of memory included).
  CudaModel(const ModelSpec& spec, int max_batch, std::uint64_t seed, Precision precision,
            cudaStream_t stream, LayoutOptions layout = {});
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  const ModelSpec& spec() const;
  const ModelLayout& layout() const;
  Precision precision() const;
  cudaStream_t stream() const;
  int layer_count() const;
  int max_batch() const;
  const std::vector<ParamInfo>& params() const;  // forward registration order
  std::size_t numel() const;                     // of the flat arrays
  float* flat_params();                          // device pointers
  float* flat_grads();
  std::size_t layer_grad_begin(int layer) const;
  std::size_t layer_grad_end(int layer) const;

  void zero_grad();  // enqueued
  // Enqueued copies; the download ones synchronize the stream before returning.
  void upload_params(std::span<const float> host);
  std::vector<float> download_params() const;
  std::vector<float> download_grads() const;
  std::vector<float> download_logits() const;  // of the last forward, [rows, classes]

  // ---- unit by unit (timer may be null) ----
  void set_input(const DeviceBatch& batch);
  void forward_unit(int layer, EventTimer* timer, int step);
  // Softmax cross-entropy; the batch's mean loss is *added* to a device accumulator.
  void forward_loss(EventTimer* timer, int step);
  void backward_loss(EventTimer* timer, int step);
  void backward_unit(int layer, EventTimer* timer, int step);

  // ---- pipeline stages (model/rank_model.h; device memory, enqueued on the stream) ----
  void configure_stage(const std::vector<bool>& owned, int slots);
  void select_slot(int slot);
  std::span<float> unit_input(int unit, int slot);
  void begin_backward(int unit, std::span<const float> output_grad);
  std::span<const float> input_grad(int unit) const;
  std::int64_t activation_bytes() const;

  // ---- whole passes ----
  // Forward + softmax cross-entropy; the batch's mean loss is *added* to a device
  // accumulator (read with read_loss_sum after a synchronization; reset_loss_sum zeroes
  // it on the stream). timer may be null.
  void forward(const DeviceBatch& batch, EventTimer* timer, int step);
  // Backward in reverse layer order into flat_grads(). After Linear layer L's
  // parameter-gradient kernels are enqueued, calls on_layer_ready(L) on the host: work
  // recorded on the stream then (an event) completes after those gradients are final.
  void backward(EventTimer* timer, int step, const std::function<void(int layer)>& on_layer_ready);

  void reset_loss_sum();
  // Synchronizes the stream, then returns the accumulated sum of batch mean losses.
  double read_loss_sum() const;
  // Copies the accumulator into pinned host memory on the stream (no wait); the value is
  // valid at loss_sum_host() once the stream has passed this point.
  void enqueue_loss_readback();
  double loss_sum_host() const;

  double forward_flops(int rows) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// SGD (model.h's rule, sgd.cpp's rounding) on the flat fp32 device arrays.
struct LossScaleState;  // compute/cuda/kernels.h

class CudaSgd {
 public:
  // Velocity zeroed on `stream` (the current device's), before any step on that stream.
  CudaSgd(SgdOptions options, std::size_t numel, cudaStream_t stream);
  // With `amp`: fp16's loss scale divided out, or the step skipped (compute/cuda/kernels.h).
  void step(float* params, const float* grads, float grad_scale, cudaStream_t stream,
            const LossScaleState* amp = nullptr);
  // The same rule on spans of device memory with the caller's `velocity` (a shard's).
  void step(std::span<float> params, std::span<const float> grads, std::span<float> velocity,
            float grad_scale, cudaStream_t stream) const;
  const SgdOptions& options() const { return options_; }

 private:
  SgdOptions options_;
  DeviceBuffer<float> velocity_;
};

}  // namespace tandem::cuda
