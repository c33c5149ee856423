// Gradient synchronization as a strategy object. The rank loop (engine/trainer.h) calls
// these hooks at the same points of every step on every device; a strategy decides which
// collectives run on which buffers at those points. DDP's Reducer (ddp/reducer.h) is the
// first; sharded and pipelined strategies add theirs without touching the loop.
//
// A step, as the loop calls the hooks (micro-batch i of k, units u of n):
//   begin_step(step)
//   for i: before_forward(u) for u = 0..n-1 (each just before the unit's forward);
//          after_backward(u, i == k-1) for u = n-1..0 (each once the unit's parameter
//          gradients for this micro-batch are final)
//   before_optimizer()   everything the optimizer reads is ready after it
//   after_optimizer()
//   end_step()           nothing is in flight afterwards; the host has waited for every
//                        collective of the step (within the communicator's timeout)
// In the comm-only scenario the loop calls the same hooks in the same order with no
// compute between them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tandem {

// Which scenario of the characterization methodology a strategy runs (docs/METRICS.md).
enum class CommMode : std::uint8_t {
  kOverlapped,  // the strategy as designed
  kSequential,  // every collective waited for before compute goes on (DDP: all after backward)
  kOff,         // compute-only: the same compute, no collective
};
std::string_view to_string(CommMode mode);

class GradSync {
 public:
  virtual ~GradSync() = default;

  virtual void begin_step(int step) { (void)step; }
  virtual void before_forward(int unit) { (void)unit; }
  virtual void after_backward(int unit, bool last_micro_batch) {
    (void)unit;
    (void)last_micro_batch;
  }
  virtual void before_optimizer() {}
  virtual void after_optimizer() {}
  virtual void end_step() {}

  // Bytes this rank's collectives move per step (0 with CommMode::kOff).
  virtual std::int64_t bytes_per_step() const = 0;
  // One line for reports: "bucketed, 4 buckets (1.0 MiB first, 25.0 MiB cap)".
  virtual std::string describe() const = 0;
};

}  // namespace tandem
