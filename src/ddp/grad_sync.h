// Gradient synchronization as a strategy object. The rank loop (engine/trainer.h) calls
// these hooks at the same points of every step on every device; a strategy decides which
// collectives run on which buffers at those points. DDP's Reducer (ddp/reducer.h) is the
// first; sharded and pipelined strategies add theirs without touching the loop.
//
// A step, as the loop calls the hooks (micro-batch i of k, units u of n):
//   begin_step(step)
//   for i: before_forward(u), forward, after_forward(u) for u = 0..n-1;
//          before_backward(u), backward, after_backward(u, i == k-1) for u = n-1..0
//          (after_backward once the unit's parameter gradients for this micro-batch
//          are final)
//   before_optimizer()   everything the optimizer reads is ready after it
//   optimizer_step(model, scale)   (the loop times it as the optimizer span)
//   after_optimizer()
//   end_step()           nothing is in flight afterwards; the host has waited for every
//                        collective of the step (within the communicator's timeout)
// In the comm-only scenario the loop calls the same hooks in the same order with no
// compute between them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "comm/work.h"
#include "model/rank_model.h"

namespace tandem {

// Which scenario of the characterization methodology a strategy runs (docs/METRICS.md).
enum class CommMode : std::uint8_t {
  kOverlapped,  // the strategy as designed
  kSequential,  // every collective waited for before compute goes on (DDP: all after backward)
  kOff,         // compute-only: the same compute, no collective
};
std::string_view to_string(CommMode mode);

// Bytes of one rank's training state (fp32), as a strategy keeps it. Persistent state
// lives across steps; transient buffers (gathered units, gradients not yet reduced) come
// and go within a step, and the peaks are their largest totals so far.
struct StateBytes {
  std::int64_t params = 0;
  std::int64_t grads = 0;
  std::int64_t optimizer = 0;      // SGD's velocity
  std::int64_t gathered_peak = 0;  // fsdp: units' parameters gathered or being gathered
  std::int64_t grads_peak = 0;     // zero2, fsdp: units' full gradients not yet reduced
  // Activations kept for the micro-batches in flight at once (one, or a pipeline stage's
  // slots), set by the rank loop: the model's, not the strategy's.
  std::int64_t activations = 0;

  std::int64_t persistent() const { return params + grads + optimizer; }
};

class GradSync {
 public:
  virtual ~GradSync() = default;

  virtual void begin_step(int step) { (void)step; }
  virtual void before_forward(int unit) { (void)unit; }
  virtual void after_forward(int unit) { (void)unit; }
  virtual void before_backward(int unit) { (void)unit; }
  virtual void after_backward(int unit, bool last_micro_batch) {
    (void)unit;
    (void)last_micro_batch;
  }
  virtual void before_optimizer() {}
  // The update of the step: by default the model's own optimizer on its whole replica,
  // then zero gradients; a sharded strategy updates its shard instead.
  virtual void optimizer_step(RankModel& model, float grad_scale) {
    model.optimizer_step(grad_scale);
    model.zero_grad();
  }
  virtual void after_optimizer() {}
  virtual void end_step() {}
  // True when optimizer_step records its own optimizer spans (it waits for collectives
  // between updates, which no compute span may cover); else the loop times the whole call
  // as one optimizer span.
  virtual bool times_optimizer() const { return false; }

  // The full parameters in the model's layout, between steps: a host copy, or nothing
  // when `copy` is false (a strategy whose parameters are sharded still gathers them: it
  // is a collective that every rank joins).
  virtual std::vector<float> full_params(RankModel& model, bool copy) {
    return copy ? model.download_params() : std::vector<float>{};
  }
  // The model's held-out loss, between steps, over the full parameters (a sharded
  // strategy gathers them for the pass and gives them back after it; every rank joins).
  virtual std::optional<double> validation_loss(RankModel& model) {
    return model.validation_loss();
  }

  // Bytes this rank's collectives move per step (0 with CommMode::kOff).
  virtual std::int64_t bytes_per_step() const = 0;
  // What they would move without --compress (ddp/compression.h).
  virtual std::int64_t uncompressed_bytes_per_step() const { return bytes_per_step(); }
  // What the model's state costs this rank, as the strategy keeps it.
  virtual StateBytes state_bytes() const = 0;
  // One line for reports: "bucketed, 4 buckets (1.0 MiB first, 25.0 MiB cap)".
  virtual std::string describe() const = 0;
};

// Waits for `work` on the model's behalf: a wait span (tag: the bucket or unit) around
// the time the model stood still for it; none on the host when it was already done.
void wait_timed(RankModel& model, Communicator& comm, Work& work, int tag);

}  // namespace tandem
