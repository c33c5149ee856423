#include "engine/tensor_parallel.h"

#include <functional>
#include <utility>

#include "core/error.h"
#include "ddp/grad_sync.h"
#include "model/model_ops.h"

namespace tandem {

TensorParallel::TensorParallel(int tensor, Communicator& world, Communicator& control)
    : world_(world), control_(control), size_(tensor), rank_(world.rank() % tensor) {
  TANDEM_CHECK(tensor >= 1 && world.size() % tensor == 0 && control.size() == world.size());
  if (tensor == 1) return;
  const int outer = world.rank() / tensor;
  group_ = world.split(outer, rank_);
  outer_ = world.split(rank_, outer);
  if (&control != &world) {
    outer_control_ = control.split(rank_, outer);
  }
}

TensorParallel::~TensorParallel() = default;

void TensorParallel::close() {
  for (Communicator* comm : {outer_control_.get(), outer_.get(), group_.get()}) {
    if (comm != nullptr) comm->barrier()->synchronize();
  }
}

void TensorParallel::end_in_flight(const std::string& why) {
  for (Communicator* comm : {outer_control_.get(), outer_.get(), group_.get()}) {
    if (comm != nullptr) tandem::end_in_flight(*comm, why);
  }
}

void TensorParallel::attach(RankModel& model) {
  if (!split()) return;
  model_ = &model;
  model.set_tensor_group(this);
}

void TensorParallel::finish(Work& work, std::int64_t bytes, int step, int unit) {
  // Between steps (a held-out pass: step -1) nothing is timed or counted.
  if (step < 0 || model_ == nullptr) {
    work.wait();
    return;
  }
  if (step != step_) {
    step_ = step;
    step_bytes_ = 0;
  }
  step_bytes_ += bytes;
  wait_timed(*model_, *group_, work, unit);
}

namespace {

// A tensor-parallel operation's description: its kind, step and unit (errors read
// "tensor-parallel allreduce unit 2 ..."), named tp on the timeline.
OpInfo tensor_op(SpanKind kind, int step, int unit) {
  return {.kind = kind,
          .step = step,
          .tag = unit,
          .name = op_name(ModelOp::kTensor),
          .tag_kind = OpInfo::TagKind::kTensorUnit};
}

}  // namespace

void TensorParallel::allreduce(std::span<float> data, int step, int unit) {
  TANDEM_CHECK(split());
  const WorkPtr work =
      group_->allreduce(data, ReduceOp::kSum, tensor_op(SpanKind::kAllreduce, step, unit));
  finish(*work, static_cast<std::int64_t>(data.size_bytes()), step, unit);
}

void TensorParallel::allgather(std::span<const float> in, std::span<float> out, int step,
                               int unit) {
  TANDEM_CHECK(split());
  const WorkPtr work = group_->allgather(in, out, tensor_op(SpanKind::kAllgather, step, unit));
  finish(*work, static_cast<std::int64_t>(out.size_bytes()), step, unit);
}

void TensorParallel::reduce_scatter(std::span<const float> in, std::span<float> out, int step,
                                    int unit) {
  TANDEM_CHECK(split());
  const WorkPtr work = group_->reduce_scatter(in, out, ReduceOp::kSum,
                                              tensor_op(SpanKind::kReduceScatter, step, unit));
  finish(*work, static_cast<std::int64_t>(in.size_bytes()), step, unit);
}

namespace {

// A ring transfer's Work, waited for (and counted) as the group's collectives are.
class RingTransfer final : public TensorGroup::Transfer {
 public:
  RingTransfer(std::function<void(Work&)> finish, WorkPtr work)
      : finish_(std::move(finish)), work_(std::move(work)) {}
  ~RingTransfer() override = default;
  void wait() override {
    if (work_ == nullptr) return;
    const WorkPtr work = std::move(work_);
    finish_(*work);
  }

 private:
  std::function<void(Work&)> finish_;
  WorkPtr work_;
};

// Every ring transfer of the passes shares one tag: sends and receives of one pair of
// ranks match in issue order, which every rank keeps alike.
constexpr int kRingTag = 7;

}  // namespace

std::unique_ptr<TensorGroup::Transfer> TensorParallel::send_next(std::span<const float> data,
                                                                 int step, int unit) {
  TANDEM_CHECK(split());
  const OpInfo info = tensor_op(SpanKind::kSend, step, unit);
  const auto bytes = static_cast<std::int64_t>(data.size_bytes());
  return std::make_unique<RingTransfer>(
      [this, bytes, step, unit](Work& work) { finish(work, bytes, step, unit); },
      group_->send(data, (rank_ + 1) % size_, kRingTag, info));
}

std::unique_ptr<TensorGroup::Transfer> TensorParallel::recv_prev(std::span<float> data, int step,
                                                                 int unit) {
  TANDEM_CHECK(split());
  const OpInfo info = tensor_op(SpanKind::kRecv, step, unit);
  // Bytes are counted where they are sent.
  return std::make_unique<RingTransfer>(
      [this, step, unit](Work& work) { finish(work, 0, step, unit); },
      group_->recv(data, (rank_ + size_ - 1) % size_, kRingTag, info));
}

std::vector<float> TensorParallel::gather_params(const ModelLayout& layout, std::vector<float> mine,
                                                 bool keep) {
  if (!split()) return keep ? std::move(mine) : std::vector<float>{};
  std::vector<float> all(mine.size() * static_cast<std::size_t>(size_));
  ending_on_failure(*group_, [&] { group_->allgather(mine, all)->synchronize(); });
  if (!keep) return {};
  std::vector<std::vector<float>> shards;
  for (int r = 0; r < size_; ++r) {
    const auto begin = all.begin() + static_cast<std::ptrdiff_t>(mine.size() * r);
    shards.emplace_back(begin, begin + static_cast<std::ptrdiff_t>(mine.size()));
  }
  return layout.unshard(shards);
}

}  // namespace tandem
