// The strategy of a pipeline stage (docs/PIPELINE.md): the stage's units (and, for a gpt
// whose head is on this stage, the tied embedding it reads) keep their parameters,
// gradients and SGD velocity; every other unit's memory is given back. SGD runs on those
// ranges. With replicas, DDP's Reducer averages the stage's gradients over the stage's
// replicas, its buckets launched as the last micro-batch's backward makes them ready
// (Megatron's overlap of the data-parallel all-reduce). full_params() gathers every
// stage's units at rank 0. The engine's planner (engine/pipeline.h) says which units are
// whose, in a StageUnits.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "ddp/grad_sync.h"
#include "ddp/reducer.h"
#include "model/rank_model.h"

namespace tandem {

// What a stage's strategy needs of the pipeline plan. Rank r is stage r % P of replica
// r / P, so replica 0's stage s is rank s.
struct StageUnits {
  int stage = 0;    // this rank's
  int replica = 0;  // this rank's
  int replicas = 1;
  std::vector<std::vector<bool>> owned;  // per stage: the units it runs
  // This stage holds gpt's embedding, tied to a head on another stage: its gradient is
  // summed over the two stages after the passes, and only then averaged over replicas.
  bool hold_embedding = false;
};

// The units a stage keeps state for: those it runs (`owned`) and those they read (gpt's
// head reads the tied embedding). StageSync's ranges; the simulator's too.
std::vector<bool> stage_kept_units(const ModelLayout& layout, const std::vector<bool>& owned);
// The elements of the units a stage keeps (its ranges: parameters, gradients and optimizer
// state alike), which its update streams.
std::size_t stage_kept_numel(const ModelLayout& layout, const std::vector<bool>& kept);

class StageSync final : public GradSync {
 public:
  // `control`: the run's host communicator (full_params' transfers); `replicas`: this
  // stage's replicas (null with one), averaged with `options`.
  StageSync(StageUnits units, Communicator& control, RankModel& model,
            std::unique_ptr<Communicator> replicas, const ReducerOptions& options);

  void begin_step(int step) override;
  void after_backward(int unit, bool last_micro_batch) override;
  void before_optimizer() override;
  void end_step() override;
  void optimizer_step(RankModel& model, float grad_scale) override;
  std::vector<float> full_params(RankModel& model, bool copy) override;
  std::int64_t bytes_per_step() const override;
  StateBytes state_bytes() const override;
  std::string describe() const override;

 private:
  struct Range {
    std::size_t begin = 0, end = 0;
    std::unique_ptr<ModelArray> velocity;
  };

  StageUnits units_;
  Communicator& control_;  // host memory, the same ranks
  RankModel& model_;
  std::vector<Range> ranges_;
  std::unique_ptr<Communicator> replicas_;  // outlives reducer_
  std::unique_ptr<Reducer> reducer_;
};

}  // namespace tandem
