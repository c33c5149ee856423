// The device backend of the model layer (docs/ARCHITECTURE.md, "The model layer"). A
// model's passes are written once (transformer_passes.h, mlp_passes.h) over a backend
// class that supplies only kernels, memory and timing; cpu_backend.h (the CPU) and
// cuda/cuda_backend.h (one CUDA device) are the two there are. A backend has:
//
//   types    Scalar; Buffer<U> (an array in its memory: data(), size(), movable); Flat
//            (the flat parameters or gradients); Timer (what spans are recorded with);
//            Tokens and Batch (a transformer's and an mlp's input, as the caller holds
//            them); LossValue (what forward_loss returns: the CPU's double, or void where
//            the loss is summed on the device); Config (constructor argument).
//   memory   buffer<U>(n), flat(layout) (zero), initialize(flat, layout, seed),
//            table(host), zero(span), zero(flat), discard(flat, begin, end) and
//            restore(flat, begin, end) (before a discarded range is used again),
//            settle(flat) (after a synchronization: what was discarded goes back now),
//            download(flat) (host copy; discarded ranges read zero), copy(to, from, n),
//            prepare(params, needs) and extra_bytes(numel, needs, config) for what the
//            backend keeps of its own, attention_scratch(T, H).
//   input    load_tokens(...), load_batch(...): the caller's input into the model's.
//   timing   section(timer, kind, step, tag, name, flops): an RAII span.
//   kernels  layers::Ops's (layers.h) under the same names and shapes, plus
//            linear_transposed_{forward,backward}; before_forward_unit(layout, unit), called
//            before the forward of a unit that runs GEMMs.
//
// Adding a device is writing one such class; the models and the rank model
// (rank_model.h) are instantiated for it.
#pragma once

#include <cstddef>

namespace tandem {

// What a model asks its backend to hold beyond the passes' buffers (prepare, extra_bytes).
struct BackendNeeds {
  std::size_t loss_rows = 0;  // rows of one forward's loss
  // The widest input and output gradient (elements) a GEMM reads: a backend that casts
  // GEMM inputs (CUDA's fp16/bf16) keeps cast copies of that many.
  std::size_t widest_input = 0;
  std::size_t widest_output_grad = 0;
};

}  // namespace tandem
