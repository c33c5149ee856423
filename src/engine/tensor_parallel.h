// Tensor parallelism in the rank loop (--tensor T; docs/TENSOR.md): the communicators a
// rank of a T x P x D job uses, and the TensorGroup (model/tensor_group.h) its model's
// passes issue their collectives on.
//
// Note [rank order]: tensor-parallel ranks are innermost, as Megatron-LM orders them:
// world rank = outer x T + tensor rank. The ranks of one tensor-parallel position (the
// same shard of every layer) form the "outer" communicator, numbered `outer`, over
// which everything that exists without --tensor runs unchanged: the pipeline's stages
// and transfers, the data-parallel strategies, --verify. So a T x P x D job is, for each
// of the T shards, the P x D job it would be without tensor parallelism, and the model's
// passes add the collectives among the T ranks of one (stage, replica).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/rank_model.h"

namespace tandem {

class TensorParallel final : public TensorGroup {
 public:
  // Splits `world` and `control` into tensor groups and outer ones when `tensor` > 1
  // (collective over both); with 1, outer() is `world` and nothing is split.
  TensorParallel(int tensor, Communicator& world, Communicator& control);
  ~TensorParallel() override;
  TensorParallel(const TensorParallel&) = delete;
  TensorParallel& operator=(const TensorParallel&) = delete;

  int size() const { return size_; }
  int rank() const { return rank_; }  // within the tensor group
  bool split() const { return size_ > 1; }
  // The communicators of this rank's tensor-parallel position (Note [rank order]).
  Communicator& outer() { return outer_ ? *outer_ : world_; }
  Communicator& outer_control() {
    if (outer_control_) return *outer_control_;
    return &control_ == &world_ ? outer() : control_;
  }

  // The passes of `model` issue their collectives here (RankModel::set_tensor_group);
  // their waits are timed on it. Call once, before the first pass.
  void attach(RankModel& model);
  // Bytes the passes' collectives moved in the last step that issued any.
  std::int64_t bytes_per_step() const { return step_bytes_; }

  // The unsplit model's packed parameters (ModelLayout::unshard) from every tensor rank's
  // packed shard `mine`: collective over the tensor group; `keep`: return them (else
  // empty).
  std::vector<float> gather_params(const ModelLayout& layout, std::vector<float> mine, bool keep);

  // Before the split communicators die: destroying one fails whatever its peers still
  // have on it (the local backend), so every rank first waits here until all have issued
  // their last operation on them. Collective; call on success (a failure aborts the world
  // and every child with it).
  void close();
  // After a failure, before the buffers die (Note [one owner of shutdown] in
  // engine/trainer.cpp): ends what the split communicators have in flight (abort, then
  // drain). The world's abort reaches them, but its drain does not wait for them.
  void end_in_flight(const std::string& why);

  // TensorGroup
  void allreduce(std::span<float> data, int step, int unit) override;
  void allgather(std::span<const float> in, std::span<float> out, int step, int unit) override;
  void reduce_scatter(std::span<const float> in, std::span<float> out, int step, int unit) override;
  std::unique_ptr<Transfer> send_next(std::span<const float> data, int step, int unit) override;
  std::unique_ptr<Transfer> recv_prev(std::span<float> data, int step, int unit) override;

 private:
  void finish(Work& work, std::int64_t bytes, int step, int unit);

  Communicator& world_;
  Communicator& control_;
  int size_ = 1;
  int rank_ = 0;
  std::unique_ptr<Communicator> group_;  // the tensor group (null when not split)
  std::unique_ptr<Communicator> outer_;
  std::unique_ptr<Communicator> outer_control_;
  RankModel* model_ = nullptr;
  int step_ = -1;
  std::int64_t step_bytes_ = 0;  // of step_, the last step that issued any
};

}  // namespace tandem
