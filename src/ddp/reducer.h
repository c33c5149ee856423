// The gradient reducer: decides which ranges of the flat gradient are all-reduced
// together (the plan) and launches each range's all-reduce as soon as backward has
// produced all of its gradients, so communication overlaps the rest of backward.
//
// Vocabulary (after PyTorch c10d's Reducer):
// - the flat gradient is laid out in reverse registration order (Model), so every
//   unit of communication (a bucket, a layer, a chunk) is one contiguous range;
// - each unit has a pending count of parameters it still waits for, and a locator maps
//   every parameter to the units it touches;
// - units launch strictly in plan order, which is the same on every rank, so every
//   rank issues the same collectives in the same order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "ddp/launch_schedule.h"
#include "timeline/recorder.h"

namespace tandem {

enum class StrategyKind : std::uint8_t {
  kSequential,  // the bucketed plan, launched only after backward: no overlap
  kLayerwise,   // one unit per layer
  kBucketed,    // size-capped buckets; a parameter is never split
  kChunked,     // the flat gradient cut into N equal chunks
};

struct Strategy {
  StrategyKind kind = StrategyKind::kBucketed;
  int chunks = 0;  // kChunked only

  // "sequential", "layerwise", "bucketed", "chunked:N"; throws UsageError.
  static Strategy parse(std::string_view text);
  std::string to_string() const;
};

// One parameter as the reducer sees it: where its gradient lies and which layer
// produces it.
struct GradParam {
  int layer = 0;
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

struct ReducerOptions {
  BucketPlanOptions plan;
  bool communicate = true;                    // false: the compute-only scenario (nothing is sent)
  bool defer = false;                         // launch only in finish(): the sequential scenario
  std::int64_t timeout_ns = 300'000'000'000;  // per wait; a late collective throws
};

class Reducer {
 public:
  Reducer(std::vector<GradParam> params, std::span<float> flat_grads, Communicator& comm,
          RankRecorder& recorder, const ReducerOptions& options);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  const ReducerOptions& options() const { return options_; }
  // Overlap happens only when the strategy launches during backward.
  bool overlaps() const;

  // Starts a synchronizing backward for `step`: every pending count is reset.
  void prepare(int step);
  // Backward's callback: layer's parameter gradients are final. Launches every unit,
  // in plan order, whose parameters are all ready.
  void mark_layer_ready(int layer);
  // Launches what is left, waits for every unit (recording wait spans), and leaves
  // the averaged gradient in flat_grads. Throws TimeoutError naming the collective
  // if one does not complete within the timeout.
  void finish();

  std::int64_t bytes_per_sync() const;
  // Units launched so far in this step (plan order): what overlap has started.
  std::size_t launched() const { return schedule_.taken(); }

 private:
  void launch(Bucket& bucket);

  std::vector<GradParam> params_;
  std::span<float> flat_grads_;
  Communicator& comm_;
  RankRecorder& recorder_;
  ReducerOptions options_;
  std::vector<Bucket> buckets_;
  LaunchSchedule schedule_;     // pending counts and plan order
  std::vector<WorkPtr> works_;  // per unit, this step
  int step_ = -1;
};

}  // namespace tandem
