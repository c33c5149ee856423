// Sharded data parallelism as one GradSync strategy (ddp/grad_sync.h): ZeRO stages 1 and 2
// (DeepSpeed) and ZeRO-3, that is fully sharded data parallelism (PyTorch FSDP).
// docs/SHARDING.md draws the schedule and the memory of each.
//
// Every model unit is one unit of sharding. The model lays each unit out padded to a
// multiple of the rank count N and starting on a page of its own (LayoutOptions), so
// rank r's shard of unit u is the r-th of N equal blocks of [begin, padded_end), and the
// memory of one unit can be given back (RankModel::discard_params/grads) without
// touching its neighbours.
//
//   zero1: gradients reduce-scattered unit by unit under backward (each rank receives the
//          average of its block); SGD updates the rank's block of the parameters with its
//          own velocity shard; the parameters are all-gathered in place after the step.
//          The model keeps full parameters and gradients.
//   zero2: as zero1, and a unit's full gradient is given back once its reduce-scatter is
//          done: gradients persist only as shards.
//   fsdp:  as zero2, and the parameters persist only as shards too: a unit's parameters
//          are all-gathered into the model just before its forward and again before its
//          backward, up to `prefetch` units' gathers ahead of the compute that needs
//          them, and given back after use (after forward only with
//          reshard_after_forward). SGD updates the shard; nothing is gathered after the
//          step.
//
// On a device (--device cuda) the same code runs: the shards are device memory, copies,
// SGD and discards are enqueued on the model's stream, and Note [ordering on a device] in
// sharded.cpp says why nothing races.
//
// On the local backend reduce_scatter equals the matching block of allreduce bit for bit
// and SGD is elementwise, so every stage ends with the same parameters, bit for bit, as
// DDP's sequential strategy.
//
// Scenarios (CommMode): kOverlapped as above; kSequential waits for every gather and
// reduce-scatter as soon as it is issued (no prefetch); kOff runs the same compute on a
// full local replica and no collective, the optimizer on the rank's block of each unit
// (the overlapped scenario's optimizer work; the rest of the replica is not updated).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "ddp/compression.h"
#include "ddp/grad_sync.h"
#include "ddp/reducer.h"
#include "ddp/shard_schedule.h"
#include "model/layout.h"
#include "model/rank_model.h"

namespace tandem {

struct ShardOptions {
  int prefetch = 1;  // fsdp: units whose all-gather is issued ahead of the one computing
  bool reshard_after_forward = true;  // fsdp: give a unit's parameters back after forward
  // --overlap-optimizer (ZeRO's overlapped step): a unit's shard is updated as soon as its
  // reduce-scatter is done (Note [sharded optimizer overlap] in sharded.cpp).
  bool overlap_optimizer = false;
  // --compress fp16|bf16 (ddp/compression.h): each unit's reduce-scatter in 16 bits.
  Compression compress{};
};

// The layout a sharded strategy needs for `ranks` ranks (see above).
LayoutOptions sharded_layout(int ranks);

// The persistent state a stage keeps per rank (ShardedSync::state_bytes, and the
// simulator's), from `full`, a padded replica's bytes, and `shards`, the rank's block of
// every unit: the transient peaks are the caller's.
StateBytes sharded_state_bytes(StrategyKind kind, CommMode mode, std::int64_t full,
                               std::int64_t shards);

class ShardedSync final : public GradSync {
 public:
  // `kind` is kZero1, kZero2 or kFsdp; the model's layout must be sharded_layout(N) for
  // the communicator's N ranks. For fsdp the model's parameters are taken into the shards
  // and given back here (so construct after the initial broadcast).
  // `micro_batches`: per step, as the rank loop runs them (--accumulate).
  // The shards and the optimizer live in the model's memory (RankModel::allocate_zeroed)
  // and SGD runs there with the model's options, so the same code runs on every device.
  // `compute` false (the comm-only scenario): options.overlap_optimizer updates nothing.
  ShardedSync(Communicator& comm, RankModel& model, StrategyKind kind, CommMode mode,
              ShardOptions options, int micro_batches, bool compute = true);
  ~ShardedSync() override;

  void begin_step(int step) override;
  void before_forward(int unit) override;
  void after_forward(int unit) override;
  void before_backward(int unit) override;
  void after_backward(int unit, bool last_micro_batch) override;
  void before_optimizer() override;
  void optimizer_step(RankModel& model, float grad_scale) override;
  void after_optimizer() override;
  void end_step() override;
  bool times_optimizer() const override { return options_.overlap_optimizer; }
  std::int64_t bytes_per_step() const override;
  std::int64_t uncompressed_bytes_per_step() const override { return uncompressed_last_step_; }
  StateBytes state_bytes() const override;
  std::string describe() const override;

  // fsdp: a collective (every rank calls it); the gathered units are given back after.
  std::vector<float> full_params(RankModel& model, bool copy) override;
  // fsdp: gathers every unit for the pass, then gives them back (a collective too).
  std::optional<double> validation_loss(RankModel& model) override;

 private:
  // fsdp, between steps: every unit gathered (waited for), then every unit given back.
  void gather_all();
  void release_all(RankModel& model);
  struct Unit {
    std::size_t begin = 0;  // [begin, padded_end) in the model's flat arrays
    std::size_t padded_end = 0;
    std::size_t owned_end = 0;   // [begin, owned_end) is given back (ModelLayout::owned_end)
    std::size_t shard = 0;    // elements per rank: (padded_end - begin) / N
    std::size_t offset = 0;   // of this rank's shard in the shard buffers
    WorkPtr gather;           // fsdp: the all-gather in flight; zero1/2: after the step
    WorkPtr reduce;           // the reduce-scatter in flight
    bool grads_live = false;  // a full gradient is in the model (zero2, fsdp)
    bool updated = false;     // overlap_optimizer: this step's SGD on the shard is done
  };

  bool fsdp() const { return kind_ == StrategyKind::kFsdp; }
  bool communicates() const { return mode_ != CommMode::kOff; }
  void gather_ahead(int event);
  void wait_gathered(int event);
  void release_after(int event);
  // Runs `discard` (a unit's memory given back) inside a "give back" span during a step
  // (Note [giving back, timed] in sharded.cpp).
  template <typename Discard>
  void give_back(int u, Discard&& discard);
  void issue_gather(int u);
  // Unit u's reduce-scatter (--compress: its 16-bit cast first; compute-only: the casts
  // alone, nothing sent).
  void issue_reduce(int u);
  // Ends reduce-scatters that are done (all of them with `wait`), giving their
  // gradients back where the stage keeps only shards.
  void settle_reduces(bool wait);
  // The unit's reduce-scatter ended: its gradient given back where only shards are kept,
  // and with overlap_optimizer its shard updated at once.
  void settled(int u);
  // overlap_optimizer: SGD on the unit's shard, timed as an optimizer span tagged with it.
  void update(int u, float grad_scale);
  void wait(Work& work, int tag);
  std::span<float> own_params(Unit& unit);  // the rank's block of the model's parameters
  std::span<float> own_grads(Unit& unit);   // and of its gradients
  std::span<float> param_shard(Unit& unit);
  std::span<float> grad_shard(Unit& unit);
  std::span<float> velocity_shard(Unit& unit);
  void note_transient();

  Communicator& comm_;
  RankModel& model_;
  StrategyKind kind_;
  CommMode mode_;
  ShardOptions options_;
  int ranks_;
  // In the model's memory, every unit's shard at Unit::offset; declared before units_ so
  // that they outlive the collectives in flight there.
  std::size_t shard_numel_ = 0;                  // the rank's shards of every unit
  std::unique_ptr<ModelArray> param_shards_;     // fsdp: the parameters this rank keeps
  std::unique_ptr<ModelArray> grad_shards_;      // every stage: the averaged gradient block
  std::unique_ptr<ModelArray> velocity_shards_;  // SGD's momentum for the rank's block
  // --compress: the 16-bit copies of the full gradient and of the rank's blocks.
  std::unique_ptr<WireCopy> wire_;
  std::unique_ptr<WireCopy> shard_wire_;
  std::vector<Unit> units_;
  ShardSchedule schedule_;  // fsdp: which units are gathered, resident, given back
  int step_ = -1;
  bool in_step_ = false;
  float grad_scale_ = 1.0f;  // 1 / micro-batches
  bool compute_ = true;
  int event_ = 0;  // the compute event now running or next (ShardSchedule's numbering)
  std::int64_t gathered_peak_ = 0;
  std::int64_t grads_peak_ = 0;
  std::int64_t bytes_this_step_ = 0;
  std::int64_t bytes_last_step_ = 0;
  std::int64_t uncompressed_this_step_ = 0;
  std::int64_t uncompressed_last_step_ = 0;
};

}  // namespace tandem
