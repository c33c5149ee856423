// What a tensor-parallel model's passes (ModelSpec::tensor; Note [tensor-parallel layout]
// in layout.cpp) ask of the ranks that hold the other shards: collectives issued and
// waited for in place, since what follows needs their results. The engine supplies one
// over a communicator (engine/tensor_parallel.h); the model layer knows no communicator.
#pragma once

#include <memory>
#include <span>

namespace tandem {

class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  // data := its sum over the group. unit: the model unit (the loss: units()) it belongs to.
  virtual void allreduce(std::span<float> data, int step, int unit) = 0;
  // out [size x in.size()]: block r is rank r's in.
  virtual void allgather(std::span<const float> in, std::span<float> out, int step, int unit) = 0;
  // Point to point around the group's ring (--tp-overlap): to rank + 1, from rank - 1,
  // matched in issue order. The transfer runs while the caller computes; wait() before
  // the buffer is touched again.
  class Transfer {
   public:
    virtual ~Transfer() = default;
    virtual void wait() = 0;
  };
  virtual std::unique_ptr<Transfer> send_next(std::span<const float> data, int step, int unit) = 0;
  virtual std::unique_ptr<Transfer> recv_prev(std::span<float> data, int step, int unit) = 0;
  // in [size x out.size()]: out := block `rank` of the sum over the group.
  virtual void reduce_scatter(std::span<const float> in, std::span<float> out, int step,
                              int unit) = 0;
};

}  // namespace tandem
