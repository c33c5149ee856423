// The transformer of model/transformer.h on one CUDA device: the same ModelLayout (so the
// same flat arrays, units and initial parameters for a seed as the CPU Transformer), the
// same passes composed from cuBLAS GEMMs (compute/cuda/gemm.h) and the kernels of
// compute/cuda/transformer_kernels.h and kernels.h, enqueued on one stream. Driven unit by
// unit like the CPU model: set_input, forward_unit(0..L+1), forward_loss, backward_loss,
// backward_unit(L+1..0). Unit 0 is the embedding, 1..L the blocks, L+1 the final norm and
// the head. Gradient rule as on the CPU: parameter gradients accumulate (+=), activation
// gradients are overwritten.
//
// Spans (with an EventTimer): exactly the CPU Transformer's, the same names (ModelOp),
// kinds, tags and FLOPs (transformer_flops), timed by CUDA events.
//
// Precision: fp32, or tf32 GEMMs (attention's products included); fp16/bf16 for the
// linear layers' GEMMs with attention in tf32 (Note [CudaTransformer mixed precision] in
// the .cpp). Every elementwise kernel, the master weights, gradients and the loss are fp32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "compute/precision.h"
#include "model/layout.h"
#include "timeline/gpu/event_timer.h"

namespace tandem::cuda {

struct LossScaleState;  // compute/cuda/kernels.h

// A batch of token ids already in device memory: inputs [rows, seq] and targets [rows,
// seq] (the inputs shifted by one), in [0, vocab). It must stay unchanged until the stream
// has run the backward that follows.
struct DeviceTokens {
  const std::int32_t* inputs = nullptr;
  const std::int32_t* targets = nullptr;
  int rows = 0;
};

class CudaTransformer {
 public:
  // On the calling thread's current device; every buffer is allocated here, for up to
  // max_batch sequences. Throws UsageError for bad batches, RuntimeError when CUDA fails (out of memory included).
  // `layout`: how the flat arrays hold the units (a sharded strategy pads them).
  CudaTransformer(const ModelSpec& spec, int max_batch, std::uint64_t seed, Precision precision,
                  cudaStream_t stream, LayoutOptions layout = {});
  ~CudaTransformer();
  CudaTransformer(const CudaTransformer&) = delete;
  CudaTransformer& operator=(const CudaTransformer&) = delete;
  // Device bytes that constructor allocates besides the parameters and gradients (a floor:
  // cuBLAS's workspace is not counted).
  static std::int64_t buffer_bytes(const ModelSpec& spec, int max_batch,
                                   Precision precision = Precision::kFp32);
  // fp16: the loss gradient is multiplied by amp->scale from now on (null: by nothing).
  void set_loss_scale(const LossScaleState* amp);

  const ModelSpec& spec() const;
  const ModelLayout& layout() const;
  int units() const;
  std::size_t numel() const;
  float* flat_params();  // device pointers
  float* flat_grads();

  void zero_grad();  // enqueued
  // Enqueued copies; the download ones synchronize the stream before returning.
  void upload_params(std::span<const float> host);
  std::vector<float> download_params() const;
  std::vector<float> download_grads() const;

  // ---- unit by unit (timer may be null) ----
  void set_input(const DeviceTokens& batch);
  void forward_unit(int unit, EventTimer* timer, int step);
  // Softmax cross-entropy over the vocabulary; the batch's mean loss (over rows x seq
  // predictions) is *added* to a device accumulator.
  void forward_loss(EventTimer* timer, int step);
  void backward_loss(EventTimer* timer, int step);
  void backward_unit(int unit, EventTimer* timer, int step);

  // ---- pipeline stages (model/rank_model.h; device memory, enqueued on the stream) ----
  void configure_stage(const std::vector<bool>& owned, int slots);
  void select_slot(int slot);
  std::span<float> unit_input(int unit, int slot);
  void begin_backward(int unit, std::span<const float> output_grad);
  std::span<const float> input_grad(int unit) const;
  std::int64_t activation_bytes() const;


  void reset_loss_sum();
  // Synchronizes the stream, then returns the accumulated sum of batch mean losses.
  double read_loss_sum() const;
  // Copies the accumulator to pinned memory on the stream; loss_sum_host() has it once
  // the stream has passed this point.
  void enqueue_loss_readback();
  double loss_sum_host() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::cuda
