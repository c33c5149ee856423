// DDP's gradient reducer, the first GradSync strategy (ddp/grad_sync.h): decides which
// ranges of the flat gradient are all-reduced together (the plan) and launches each
// range's all-reduce as soon as backward has produced all of its gradients, so
// communication overlaps the rest of backward. The same code runs on every device: on a
// GPU the collectives are ordered after the compute stream's work and waiting makes the
// stream wait (comm/work.h).
//
// Vocabulary (after PyTorch c10d's Reducer):
// - the flat gradient is laid out in reverse registration order (Mlp), so every
//   unit of communication (a bucket, a layer, a chunk) is one contiguous range;
// - each unit has a pending count of parameters it still waits for, and a locator maps
//   every parameter to the units it touches;
// - units launch strictly in plan order, which is the same on every rank, so every
//   rank issues the same collectives in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "ddp/compression.h"
#include "ddp/grad_sync.h"
#include "ddp/launch_schedule.h"
#include "ddp/powersgd.h"
#include "model/rank_model.h"

namespace tandem {

enum class StrategyKind : std::uint8_t {
  kSequential,  // the bucketed plan, launched only after backward: no overlap
  kLayerwise,   // one unit per layer
  kBucketed,    // size-capped buckets; a parameter is never split
  kChunked,     // the flat gradient cut into N equal chunks
  // Sharded data parallelism (ddp/sharded.h), one unit of communication per model unit:
  kZero1,  // optimizer state sharded
  kZero2,  // gradients and optimizer state sharded
  kFsdp,   // parameters too (ZeRO-3), gathered per unit
};

struct Strategy {
  StrategyKind kind = StrategyKind::kBucketed;
  int chunks = 0;  // kChunked only

  // "sequential", "layerwise", "bucketed", "chunked:N", "zero1", "zero2", "fsdp";
  // throws UsageError.
  static Strategy parse(std::string_view text);
  std::string to_string() const;
  // zero1, zero2 and fsdp: run by ShardedSync (ddp/sharded.h), not the Reducer.
  bool sharded() const;
};

// One parameter as the reducer sees it: where its gradient lies and which unit
// produces it.
struct GradParam {
  int unit = 0;
  std::size_t offset = 0;  // into the flat gradient
  std::size_t numel = 0;
};

// One unit of communication.
struct Bucket {
  int index = 0;
  std::size_t begin = 0;  // [begin, end) of the flat gradient
  std::size_t end = 0;
  std::vector<int> params;  // indices into the GradParam list

  std::int64_t bytes() const { return static_cast<std::int64_t>((end - begin) * sizeof(float)); }
};

struct BucketPlanOptions {
  Strategy strategy;
  std::int64_t bucket_cap_bytes = 25ll << 20;       // c10d's default
  std::int64_t first_bucket_cap_bytes = 1ll << 20;  // small first bucket: start early
};

// Builds the units for a strategy over parameters given in forward registration
// order. Deterministic: every rank builds the same plan from the same model.
std::vector<Bucket> plan_buckets(const std::vector<GradParam>& params, std::size_t flat_numel,
                                 const BucketPlanOptions& options);
// The parameters of a model layout as the reducer sees them: all, or those of the units
// flagged in `units` (a pipeline stage's).
std::vector<GradParam> grad_params(const ModelLayout& layout, const std::vector<bool>& units = {});
// PowerSGD's view of each bucket's parameters (ddp/powersgd.h): their offsets and shapes.
std::vector<std::vector<PowerSgdParam>> powersgd_params(const ModelLayout& layout,
                                                        const std::vector<Bucket>& buckets,
                                                        const std::vector<GradParam>& params);
// The plan of `options` over `layout`.
std::vector<Bucket> plan_buckets(const ModelLayout& layout, const BucketPlanOptions& options);

struct ReducerOptions {
  BucketPlanOptions plan;
  // kOff: the compute-only scenario (nothing is sent); kSequential: launch only before
  // the optimizer, after backward (the sequential scenario).
  CommMode mode = CommMode::kOverlapped;
  // --overlap-optimizer (Note [optimizer overlap] in reducer.cpp): each bucket's SGD update
  // runs as soon as its all-reduce is done, while backward and the other buckets'
  // all-reduces go on, instead of one update of the whole replica after the last wait.
  bool overlap_optimizer = false;
  // --double-buffer (Note [double buffering] in reducer.cpp): step k's gradients are
  // all-reduced from a second buffer during step k + 1's forward and backward, and the
  // update of step k + 1 uses them: one step late.
  bool double_buffer = false;
  // --find-unused (DDP's find_unused_parameters): the loop reports units a micro-batch
  // skipped as done at once (engine/pipeline.h); the reducer itself only checks, before
  // the optimizer, that every unit it reduces was reported (Note [unused parameters]).
  bool find_unused = false;
  // --compress (ddp/compression.h, Note [compression] in reducer.cpp): each bucket's
  // all-reduce in 16 bits, or PowerSGD's two all-reduces of low-rank factors.
  Compression compress{};
};

class Reducer final : public GradSync {
 public:
  ~Reducer() override;
  // Reduces model.grads() over `comm` (bound to the model's stream on a device). Wait
  // spans are timed by the model (RankModel::begin_span).
  // `units`: the units whose gradients it reduces (a pipeline stage's; empty: all).
  // With options.overlap_optimizer or double_buffer the reducer updates the parameters
  // itself, scaling the gradients by 1 / `micro_batches`; `compute` false (the comm-only
  // scenario) updates nothing.
  Reducer(Communicator& comm, RankModel& model, const ReducerOptions& options,
          const std::vector<bool>& units = {}, int micro_batches = 1, bool compute = true);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  const ReducerOptions& options() const { return options_; }
  // Overlap happens only when the strategy launches during backward.
  bool overlaps() const;
  // Units launched so far in this step (plan order): what overlap has started.
  std::size_t launched() const { return schedule_.taken(); }

  // GradSync: every pending count is reset; a unit's gradients are final (launches every
  // bucket, in plan order, whose parameters are all ready); what is left is launched and
  // every bucket waited for, the averaged gradient left in grads() (wait spans, one per
  // bucket that was not done); the host waits for every collective of the step.
  void begin_step(int step) override;
  void after_backward(int unit, bool last_micro_batch) override;
  void before_optimizer() override;
  // With overlap_optimizer: every bucket not updated yet, in plan order, waited for and
  // updated (an optimizer span each); with double_buffer: the update by the previous
  // step's averaged gradients (none in the first step), then this step's gradients moved
  // to the second buffer; else the whole replica's update.
  void optimizer_step(RankModel& model, float grad_scale) override;
  void after_optimizer() override;
  void end_step() override;
  bool times_optimizer() const override { return options_.overlap_optimizer; }
  std::int64_t bytes_per_step() const override;
  std::int64_t uncompressed_bytes_per_step() const override;
  // A whole replica: parameters, gradients and SGD's velocity.
  StateBytes state_bytes() const override;
  std::string describe() const override;

 private:
  void launch(const Bucket& bucket);
  // Throws RuntimeError naming the first bucket with a unit never reported this step.
  void check_every_unit_reported() const;
  // Optimizer overlap: bucket `b`'s SGD update and the zeroing of its gradients, timed as
  // an optimizer span tagged with the bucket.
  void update(int b, float grad_scale);
  // Waits for bucket `b`'s all-reduce of this step (a wait span where it blocks), once;
  // nothing when it was not launched.
  void wait_for(std::size_t b);
  // Updates the buckets whose all-reduce is already done, in plan order, waiting for none.
  void update_completed();
  // PowerSGD: every launched bucket's P all-reduce waited for in plan order, its Q computed
  // and all-reduced (the second round, issued in the same order on every rank).
  void launch_second_round();
  // What a bucket's collectives leave becomes its averaged gradient (compression's last
  // phase: a widening cast, or PowerSGD's P Q^T).
  void finish(std::size_t b);
  std::int64_t wire_bytes(const Bucket& bucket) const;

  Communicator& comm_;
  RankModel& model_;
  std::span<float> grads_;  // what backward writes
  // What the collectives average: grads_, or with double_buffer the second buffer.
  std::span<float> reduced_;
  std::unique_ptr<ModelArray> second_;  // double_buffer: the gradients of the step before
  bool second_full_ = false;            // double_buffer: second_ holds a step's gradients
  ReducerOptions options_;
  std::vector<GradParam> params_;
  std::vector<Bucket> buckets_;
  LaunchSchedule schedule_;     // pending counts and plan order
  std::vector<WorkPtr> works_;  // per unit, this step
  int step_ = -1;
  float grad_scale_ = 1.0f;  // overlap_optimizer: 1 / micro-batches
  bool compute_ = true;
  std::unique_ptr<ModelArray> velocity_;  // overlap_optimizer: SGD's, in the model's memory
  std::vector<bool> updated_;             // per bucket, this step
  std::vector<bool> waited_;              // per bucket, this step
  std::vector<bool> unit_ready_;          // per model unit, this step's last micro-batch
  // --compress fp16|bf16: the 16-bit copy of reduced_ that the all-reduces sum.
  std::unique_ptr<WireCopy> wire_;
  // --compress powersgd:R, per bucket: the factors' math and their wire buffers (host).
  struct PowerSgd;
  std::vector<std::unique_ptr<PowerSgd>> powersgd_;
};

}  // namespace tandem
