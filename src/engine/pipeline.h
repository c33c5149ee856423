// Pipeline parallelism (docs/PIPELINE.md): the model cut into stages on different ranks,
// micro-batches flowing through them under a schedule (engine/pipeline_schedule.h), the
// activations sent forward and their gradients backward while other micro-batches
// compute.
//
// Ranks = stages x replicas: rank r is stage r % P of replica r / P. Each stage holds
// one or more model chunks (V with interleaved:V): contiguous runs of units, balanced by
// their FLOPs or given with --split. Every run goes through the same executor, the
// StageRunner: a run without --pipeline is one stage whose schedule is 1F1B with P = 1
// (F0 B0 F1 B1 ...: gradient accumulation), with no transfers.
//
// Transfers: point to point on the run's communicator, one tag per chunk boundary and
// direction (micro-batches match in issue order). In the overlapped scenario the receive
// of the next action is posted before the current one computes and sends stay in flight
// until the step ends; a forward's activation is sent from the micro-batch's activation
// slot, which stays untouched until that micro-batch's backward, and an input gradient
// is copied into a send buffer of its own. In the sequential scenario a receive is posted
// only when its action starts and waited for before it computes, so the receiver sees
// each transfer whole (sends still complete in the background: a stage that waited for
// its own send could wait for a peer waiting for it, and 1F1B would deadlock). With
// communication off (compute-only) nothing is sent: each stage copies what it would send
// or receive within its own memory (the same bytes moved) and computes on the copies.
//
// Gradients: a stage's units accumulate over the micro-batches in micro order, as a
// single-stage run with --accumulate does (bit for bit the same on the local backend). A
// gpt whose embedding and head are on different stages keeps the tied embedding on both
// (as Megatron-LM does) and adds the two halves of its gradient before the optimizer:
// that sum is in another order than a single stage's, so those runs agree to rounding.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "ddp/grad_sync.h"
#include "ddp/reducer.h"
#include "engine/pipeline_schedule.h"
#include "model/layout.h"
#include "model/rank_model.h"

namespace tandem {

struct PipelineOptions {
  int stages = 1;  // P (--pipeline)
  ScheduleSpec schedule{};
  // --micro-batches M: the per-replica --batch is cut into M micro-batches. 0: not given
  // (a run without pipeline stages accumulates --accumulate micro-batches of --batch rows).
  int micro_batches = 0;
  std::vector<int> split;  // --split: units per model chunk in model order; empty: balanced
  // --split auto: balanced by unit times measured before training (train() measures and
  // fills `split`; Note [--split auto] in trainer.cpp).
  bool split_auto = false;
};

// The stages of a run: which units each model chunk holds, and who holds it.
struct StagePlan {
  PipelineShape shape{};  // stages, chunks per stage, micro-batches, schedule
  int replicas = 1;
  std::vector<std::pair<int, int>> chunks;  // global chunk g: units [first, last]
  bool tied_across_stages = false;          // gpt: embedding and head on different stages

  int stage_of(int rank) const { return rank % shape.stages; }
  int replica_of(int rank) const { return rank / shape.stages; }
  int rank_of(int stage, int replica) const { return replica * shape.stages + stage; }
  int stage_of_chunk(int global_chunk) const { return global_chunk % shape.stages; }
  // One flag per unit: the units of `stage`'s chunks.
  std::vector<bool> owned_units(int stage, int units) const;
  // "4 stages x 1 replica, 1f1b, 8 micro-batches; units 0-2 | 3-4 | 5-6 | 7-9".
  std::string describe() const;
};

// Units per chunk balanced by cost: `chunks` contiguous runs, each at least one unit,
// minimizing the most expensive run (exact, by dynamic programming).
std::vector<int> balance_units(const std::vector<double>& unit_cost, int chunks);
// The forward FLOPs of each unit of `layout` for `rows` rows (the head of a transformer
// included; a unit without matrix products costs one FLOP per parameter).
std::vector<double> unit_forward_flops(const ModelLayout& layout, int rows);

// The plan of a run: stages, replicas = ranks / stages, chunks from `options.split` or
// balanced. Throws UsageError naming the flag for shapes that cannot run: more chunks
// than units, ranks not a multiple of the stages, a split that does not add up, an
// interleaved schedule whose micro-batches are not a multiple of the stages. `ranks_text`
// says where `ranks` came from in its error (default: "--ranks N").
StagePlan plan_stages(const PipelineOptions& options, int micro_batches, int ranks,
                      const ModelLayout& layout, const std::string& ranks_text = "");

// One rank's stage: runs the schedule's actions for one step, moving activations and
// their gradients to the neighbouring stages, and calling the strategy's hooks around
// each unit as the rank loop always has (ddp/grad_sync.h).
class StageRunner {
 public:
  struct Options {
    int micro_batches = 1;
    CommMode mode = CommMode::kOverlapped;
    bool compute = true;  // false: comm-only, the transfers without the math
    // --find-unused: a unit the micro-batch skipped (RankModel::unit_ran) is reported to
    // the strategy as done at the start of its backward, as DDP's find_unused_parameters
    // marks unused parameters ready; without it the strategy never hears of that unit.
    bool find_unused = false;
  };
  // `recorder`: the rank's, whose compute and wait spans get their micro-batch (may be null).
  StageRunner(const StagePlan& plan, Options options, Communicator& comm, RankModel& model,
              GradSync& sync, RankRecorder* recorder);
  ~StageRunner();
  StageRunner(const StageRunner&) = delete;
  StageRunner& operator=(const StageRunner&) = delete;

  // The step's forward and backward passes (between GradSync::begin_step and
  // before_optimizer); `first_batch` is the data index of micro-batch 0.
  void run_passes(int step, int first_batch);
  // gpt with the head on another stage than the embedding: the two stages' halves of the
  // tied embedding's gradient summed on both (an all-reduce over the embedding group).
  void reduce_tied_grads(int step);
  // Sends still in flight complete (the step's end).
  void finish_step();

  int stage() const { return stage_; }
  bool has_loss() const { return has_loss_; }
  // Micro-batches whose activations this rank keeps at once, at most (its slots), and
  // the bytes they hold.
  int slots() const { return slots_; }
  std::int64_t activation_bytes() const { return activation_bytes_; }
  // Bytes this rank's transfers moved in the last step.
  std::int64_t bytes_per_step() const { return bytes_per_step_; }

 private:
  struct Buffer;
  void forward(const PipelineAction& action, int step, int first_batch);
  void backward(const PipelineAction& action, int step);
  // The activation receive of `action` (a forward whose first unit is not 0), or the
  // gradient receive of a backward whose last unit is not the model's; posted once.
  void post_receive(std::size_t index, int step);
  Work& received(std::size_t index, int step);
  Buffer& free_buffer(std::size_t floats);
  int slot_for(int micro);
  // Sends `data`; on a device grouped with the next action's receive (Note [device
  // exchanges] in pipeline.cpp).
  WorkPtr exchange(std::span<const float> data, int peer, int tag, const OpInfo& info, int step);
  // Compute-only: a transfer becomes a copy of as many bytes within this rank, into the
  // activation or out of it.
  void local_copy(std::span<float> activation, bool into_model);
  // Compute and wait spans from now on belong to `micro` (-1: none).
  void label_spans(int micro);

  const StagePlan& plan_;
  const Options options_;
  Communicator& comm_;
  RankModel& model_;
  GradSync& sync_;
  RankRecorder* const recorder_;
  const bool device_;  // transfers in device memory: Note [device exchanges]
  const int rank_;
  const int stage_;
  const int replica_;
  std::vector<PipelineAction> actions_;
  bool has_loss_ = false;
  int slots_ = 1;
  std::int64_t activation_bytes_ = 0;
  std::int64_t bytes_per_step_ = 0;

  // Per step.
  std::vector<WorkPtr> receives_;        // per action (null: none, or not posted yet)
  std::vector<Buffer*> receive_buffers_;  // gradient receives' buffers, per action
  std::vector<WorkPtr> sends_;            // in flight until finish_step
  std::vector<int> slot_of_micro_;        // -1: none
  std::vector<int> chunks_in_flight_;     // per micro: forwards whose backward has not run
  std::vector<int> free_slots_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::size_t current_ = 0;  // the action running
  // gpt with its head and embedding on two stages: those two ranks (split from comm_).
  std::unique_ptr<Communicator> embedding_group_;
};

// The strategy of a pipeline stage (ddp/stage_sync.h) for this rank of `plan`: `comm` is
// the run's communicator (its rank is this rank), `control` its host communicator,
// `replicas` the communicator of this stage's replicas (split from the run's; null with
// one replica), averaged with `options`.
std::unique_ptr<GradSync> make_stage_sync(const StagePlan& plan, Communicator& comm,
                                          Communicator& control, RankModel& model,
                                          std::unique_ptr<Communicator> replicas,
                                          const ReducerOptions& options);

}  // namespace tandem
