// Pipeline stages and their executor (pipeline.h).
#include "engine/pipeline.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "ddp/reducer.h"
#include "ddp/stage_sync.h"
#include "model/transformer.h"

namespace tandem {

std::vector<bool> StagePlan::owned_units(int stage, int units) const {
  std::vector<bool> owned(static_cast<std::size_t>(units), false);
  for (std::size_t g = 0; g < chunks.size(); ++g) {
    if (stage_of_chunk(static_cast<int>(g)) != stage) continue;
    for (int u = chunks[g].first; u <= chunks[g].second; ++u) owned[static_cast<std::size_t>(u)] = true;
  }
  return owned;
}

std::string StagePlan::describe() const {
  std::string text = std::to_string(shape.stages) + " stage" + (shape.stages == 1 ? "" : "s") +
                     " x " + std::to_string(replicas) + " replica" + (replicas == 1 ? "" : "s") +
                     ", " + to_string(ScheduleSpec{shape.kind, shape.chunks_per_stage}) + ", " +
                     std::to_string(shape.micro_batches) + " micro-batches; units";
  for (std::size_t g = 0; g < chunks.size(); ++g) {
    text += (g == 0 ? " " : " | ") + std::to_string(chunks[g].first);
    if (chunks[g].second != chunks[g].first) text += "-" + std::to_string(chunks[g].second);
  }
  return text;
}

std::vector<int> balance_units(const std::vector<double>& cost, int chunks) {
  const int n = static_cast<int>(cost.size());
  TANDEM_CHECK(chunks >= 1 && chunks <= n);
  std::vector<double> prefix(static_cast<std::size_t>(n) + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + cost[static_cast<std::size_t>(i)];
  auto range = [&](int a, int b) { return prefix[b] - prefix[a]; };  // units [a, b)
  // best[k][i]: the least possible largest run when the first i units form k runs.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(static_cast<std::size_t>(chunks) + 1,
                                        std::vector<double>(static_cast<std::size_t>(n) + 1, kInf));
  std::vector<std::vector<int>> cut(best.size(), std::vector<int>(best[0].size(), 0));
  best[0][0] = 0;
  for (int k = 1; k <= chunks; ++k) {
    for (int i = k; i <= n - (chunks - k); ++i) {
      for (int j = k - 1; j < i; ++j) {
        const double value = std::max(best[k - 1][j], range(j, i));
        if (value < best[k][i]) {
          best[k][i] = value;
          cut[k][i] = j;
        }
      }
    }
  }
  std::vector<int> sizes(static_cast<std::size_t>(chunks));
  for (int k = chunks, i = n; k >= 1; --k) {
    const int j = cut[k][i];
    sizes[static_cast<std::size_t>(k - 1)] = i - j;
    i = j;
  }
  return sizes;
}

std::vector<double> unit_forward_flops(const ModelLayout& layout, int rows) {
  const ModelSpec& spec = layout.spec();
  std::vector<double> cost(static_cast<std::size_t>(layout.units()));
  if (spec.is_transformer()) {
    const TransformerShape& s = spec.transformer;
    const TransformerFlops f = transformer_flops(spec, rows);
    const double tokens = static_cast<double>(rows) * s.seq;
    cost.front() = tokens * s.dim;  // the embedding: a gather, no products
    for (int u = 1; u <= s.layers; ++u) cost[static_cast<std::size_t>(u)] = f.attention + f.mlp;
    cost.back() = f.head + tokens * s.vocab;  // and the loss over the vocabulary
  } else {
    for (int u = 0; u < layout.units(); ++u) {
      const LinearLayout& layer = layout.layer(u);
      cost[static_cast<std::size_t>(u)] = 2.0 * rows * layer.in * layer.out;
    }
  }
  return cost;
}

StagePlan plan_stages(const PipelineOptions& options, int micro_batches, int ranks,
                      const ModelLayout& layout, const std::string& ranks_text) {
  StagePlan plan;
  const int P = options.stages;
  if (P < 1 || P > 1024) throw UsageError("--pipeline must be 1..1024");
  if (ranks % P != 0) {
    throw UsageError("--pipeline " + std::to_string(P) + ": " +
                     (ranks_text.empty() ? "--ranks " + std::to_string(ranks) : ranks_text) +
                     " is not a multiple of the stages (ranks = stages x replicas)");
  }
  plan.shape = {.kind = options.schedule.kind,
                .stages = P,
                .chunks_per_stage = options.schedule.virtual_stages,
                .micro_batches = micro_batches};
  plan.replicas = ranks / P;
  const std::string shape_error = check_shape(plan.shape);
  if (!shape_error.empty()) throw UsageError("--schedule " + to_string(options.schedule) + ": " + shape_error);
  const int chunks = P * plan.shape.chunks_per_stage;
  const int units = layout.units();
  if (chunks > units) {
    throw UsageError("--pipeline " + std::to_string(P) +
                     (chunks > P ? " with --schedule " + to_string(options.schedule) : "") +
                     ": " + std::to_string(chunks) + " model chunks, but '" + layout.spec().text +
                     "' has only " + std::to_string(units) + " units (layers" +
                     (layout.spec().is_transformer() ? ", the embedding and the head" : "") + ")");
  }
  std::vector<int> sizes = options.split;
  if (sizes.empty()) {
    sizes = balance_units(unit_forward_flops(layout, 1), chunks);
  } else {
    if (static_cast<int>(sizes.size()) != chunks) {
      throw UsageError("--split: " + std::to_string(sizes.size()) + " sizes for " +
                       std::to_string(chunks) + " model chunks (stages x virtual stages)");
    }
    if (std::any_of(sizes.begin(), sizes.end(), [](int s) { return s < 1; })) {
      throw UsageError("--split: every model chunk needs at least one unit");
    }
    const int total = std::accumulate(sizes.begin(), sizes.end(), 0);
    if (total != units) {
      throw UsageError("--split: the sizes add up to " + std::to_string(total) + " units, but '" +
                       layout.spec().text + "' has " + std::to_string(units));
    }
  }
  for (int first = 0; int size : sizes) {
    plan.chunks.emplace_back(first, first + size - 1);
    first += size;
  }
  if (layout.spec().is_transformer() && layout.spec().kind == ModelKind::kGpt) {
    plan.tied_across_stages = plan.stage_of_chunk(0) != plan.stage_of_chunk(chunks - 1);
  }
  return plan;
}

// ---- StageRunner ----

struct StageRunner::Buffer {
  std::unique_ptr<ModelArray> array;
  std::size_t floats = 0;
  WorkPtr busy;          // the send from it, until it completed
  bool received = false;  // a gradient received into it, until its backward read it
};

namespace {

// A tag per chunk boundary and direction; micro-batches match in issue order.
int activation_tag(int boundary) { return 2 * boundary; }
int gradient_tag(int boundary) { return 2 * boundary + 1; }

// A transfer's errors and comm span name its micro-batch ("send micro-batch 3").
OpInfo transfer_info(int step, int micro) {
  return {.step = step, .tag = micro, .tag_kind = OpInfo::TagKind::kMicroBatch};
}

// Most micro-batches holding activations at once, as run_passes takes and frees slots: a
// micro-batch takes one at its first forward, or earlier when that forward's receive is
// posted ahead (`ahead[i]`: action i's receive is posted before action i - 1 runs), and
// gives it back after its last backward.
int peak_micro_batches(const std::vector<PipelineAction>& actions, const std::vector<bool>& ahead,
                       int micro_batches) {
  std::vector<int> open(static_cast<std::size_t>(micro_batches), 0);
  std::vector<bool> held(static_cast<std::size_t>(micro_batches), false);
  int live = 0, peak = 0;
  auto take = [&](int micro) {
    if (held[static_cast<std::size_t>(micro)]) return;
    held[static_cast<std::size_t>(micro)] = true;
    peak = std::max(peak, ++live);
  };
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (i + 1 < actions.size() && ahead[i + 1]) take(actions[i + 1].micro);
    const PipelineAction& a = actions[i];
    int& n = open[static_cast<std::size_t>(a.micro)];
    if (a.kind == PipelineAction::kForward) {
      take(a.micro);
      ++n;
    } else if (--n == 0) {
      held[static_cast<std::size_t>(a.micro)] = false;
      --live;
    }
  }
  return std::max(peak, 1);
}

}  // namespace

StageRunner::StageRunner(const StagePlan& plan, Options options, Communicator& comm,
                         RankModel& model, GradSync& sync, RankRecorder* recorder)
    : plan_(plan),
      options_(options),
      comm_(comm),
      model_(model),
      sync_(sync),
      recorder_(recorder),
      device_(comm.memory() == MemoryKind::kDevice),
      rank_(comm.rank()),
      stage_(plan.stage_of(comm.rank())),
      replica_(plan.replica_of(comm.rank())),
      actions_(stage_actions(plan.shape, plan.stage_of(comm.rank()))) {
  const int last_chunk = static_cast<int>(plan_.chunks.size()) - 1;
  has_loss_ = plan_.stage_of_chunk(last_chunk) == stage_;
  if (plan_.shape.stages > 1) {
    // Forwards that receive their input, posted ahead in the overlapped scenario.
    std::vector<bool> ahead(actions_.size(), false);
    for (std::size_t i = 0; i < actions_.size(); ++i) {
      const PipelineAction& a = actions_[i];
      const int g = global_chunk(plan_.shape, stage_, a.chunk);
      ahead[i] = options_.mode == CommMode::kOverlapped && a.kind == PipelineAction::kForward &&
                 plan_.chunks[static_cast<std::size_t>(g)].first > 0;
    }
    slots_ = peak_micro_batches(actions_, ahead, options_.micro_batches);
  }
  if (plan_.shape.stages > 1) {
    model_.configure_stage(plan_.owned_units(stage_, model_.units()), slots_);
  }
  activation_bytes_ = model_.activation_bytes();  // every slot's
  // gpt's tied embedding on two stages: its first and last stage of each replica form an
  // embedding group (Megatron's), ranked first stage first; every other rank is a group of
  // one that is never used. A collective of every rank, before any step.
  if (plan_.tied_across_stages) {
    const int first_stage = plan_.stage_of_chunk(0);
    const int last_stage = plan_.stage_of_chunk(static_cast<int>(plan_.chunks.size()) - 1);
    const bool member = stage_ == first_stage || stage_ == last_stage;
    embedding_group_ = comm_.split(member ? replica_ : plan_.replicas + rank_,
                                   stage_ == first_stage ? 0 : 1);
    embedding_group_->bind_stream(model_.stream());  // its all-reduce follows the backward
  }
}

StageRunner::~StageRunner() = default;

int StageRunner::slot_for(int micro) {
  int& slot = slot_of_micro_[static_cast<std::size_t>(micro)];
  if (slot < 0) {
    TANDEM_CHECK(!free_slots_.empty());  // sized by peak_micro_batches
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  return slot;
}

StageRunner::Buffer& StageRunner::free_buffer(std::size_t floats) {
  for (const auto& b : buffers_) {
    if (b->floats == floats && !b->received && (!b->busy || b->busy->test())) {
      if (b->busy) b->busy->synchronize();  // rethrows a failed transfer
      b->busy.reset();
      return *b;
    }
  }
  auto buffer = std::make_unique<Buffer>();
  buffer->array = model_.allocate_zeroed(floats);
  buffer->floats = floats;
  buffers_.push_back(std::move(buffer));
  return *buffers_.back();
}

void StageRunner::post_receive(std::size_t index, int step) {
  if (index >= actions_.size() || receives_[index] || options_.mode == CommMode::kOff) return;
  const PipelineAction& a = actions_[index];
  const int g = global_chunk(plan_.shape, stage_, a.chunk);
  const auto [first, last] = plan_.chunks[static_cast<std::size_t>(g)];
  const OpInfo info = transfer_info(step, a.micro);
  if (a.kind == PipelineAction::kForward) {
    if (first == 0) return;
    const int peer = plan_.rank_of(plan_.stage_of_chunk(g - 1), replica_);
    const int slot = slot_for(a.micro);
    receives_[index] = comm_.recv(model_.unit_input(first, slot), peer, activation_tag(g - 1), info);
  } else {
    if (last == model_.units() - 1) return;
    const int peer = plan_.rank_of(plan_.stage_of_chunk(g + 1), replica_);
    Buffer& buffer = free_buffer(model_.unit_input(last + 1, slot_for(a.micro)).size());
    receives_[index] = comm_.recv(buffer.array->span(), peer, gradient_tag(g), info);
    buffer.received = true;
    receive_buffers_[index] = &buffer;
  }
}

Work& StageRunner::received(std::size_t index, int step) {
  post_receive(index, step);
  Work& work = *receives_[index];
  wait_timed(model_, comm_, work, actions_[index].micro);
  return work;
}

void StageRunner::run_passes(int step, int first_batch) {
  const auto n = actions_.size();
  bytes_per_step_ = 0;
  receives_.assign(n, nullptr);
  receive_buffers_.assign(n, nullptr);
  slot_of_micro_.assign(static_cast<std::size_t>(options_.micro_batches), -1);
  chunks_in_flight_.assign(static_cast<std::size_t>(options_.micro_batches), 0);
  free_slots_.resize(static_cast<std::size_t>(slots_));
  std::iota(free_slots_.rbegin(), free_slots_.rend(), 0);  // slot 0 first
  const bool ahead = options_.mode == CommMode::kOverlapped;
  for (std::size_t i = 0; i < n; ++i) {
    // Receives match in issue order, so they are posted in action order: this action's (if
    // not yet), then the next one's, whose data can arrive while this one computes.
    if (ahead && !device_) {
      post_receive(i, step);
      post_receive(i + 1, step);
    }
    // Sequential (on a host; a device's: Note [device exchanges]): each receive is posted
    // when its action starts and waited for before it computes, so its whole transfer is
    // exposed. Sends are left in flight: waiting for one can wait for a peer that waits
    // for this stage (1F1B with blocking sends deadlocks; Megatron pairs them in batched
    // exchanges instead).
    current_ = i;
    const PipelineAction& a = actions_[i];
    if (a.kind == PipelineAction::kForward) {
      forward(a, step, first_batch);
    } else {
      backward(a, step);
    }
  }
  label_spans(-1);
}

void StageRunner::forward(const PipelineAction& a, int step, int first_batch) {
  label_spans(a.micro);
  const int g = global_chunk(plan_.shape, stage_, a.chunk);
  const auto [first, last] = plan_.chunks[static_cast<std::size_t>(g)];
  const bool new_micro = chunks_in_flight_[static_cast<std::size_t>(a.micro)]++ == 0;
  const int slot = slot_for(a.micro);
  if (slots_ > 1) model_.select_slot(slot);
  if (options_.compute && new_micro) model_.set_micro_batch(first_batch + a.micro);
  if (first > 0) {
    if (options_.mode != CommMode::kOff) {
      received(current_, step);
    } else {
      local_copy(model_.unit_input(first, slot), /*into_model=*/true);
    }
  }
  for (int u = first; u <= last; ++u) {
    sync_.before_forward(u);
    if (options_.compute) model_.forward_unit(u);
    sync_.after_forward(u);
  }
  if (last == model_.units() - 1) {
    if (options_.compute) model_.forward_loss();
    return;
  }
  if (options_.mode == CommMode::kOff) {
    local_copy(model_.unit_input(last + 1, slot), /*into_model=*/false);
    return;
  }
  const std::span<float> out = model_.unit_input(last + 1, slot);
  const int peer = plan_.rank_of(plan_.stage_of_chunk(g + 1), replica_);
  WorkPtr send = exchange(out, peer, activation_tag(g), transfer_info(step, a.micro), step);
  bytes_per_step_ += static_cast<std::int64_t>(out.size_bytes());
  sends_.push_back(std::move(send));
}

// Note [device exchanges]: NCCL matches point to point in issue order, without tags, and
// runs each operation issued alone to completion on the communication stream before the
// next. A receive posted ahead of this stage's send (as on the host) would wait for a peer
// whose own receive waits behind it, and two neighbours' sends would each wait for a
// receive queued behind the other's: 1F1B deadlocks. So on a device the send of an action
// and the receive of the next one are one group (Megatron's send_forward_recv_backward),
// which matches the neighbour's group; a receive with no send before it is posted when
// its action starts. The group is the same in every mode (sequential then waits for the
// send, its transfer exposed): with lone sends, two neighbours' sends would each wait for a
// receive the other posts only after its own send (1F1B's sequential scenario deadlocked
// so on four ranks sharing a GPU).
WorkPtr StageRunner::exchange(std::span<const float> data, int peer, int tag, const OpInfo& info,
                              int step) {
  if (!device_) return comm_.send(data, peer, tag, info);
  comm_.group_start();
  WorkPtr send;
  try {
    send = comm_.send(data, peer, tag, info);
    post_receive(current_ + 1, step);
  } catch (...) {
    comm_.group_end();
    throw;
  }
  comm_.group_end();
  if (options_.mode == CommMode::kSequential) wait_timed(model_, comm_, *send, info.tag);
  return send;
}

void StageRunner::backward(const PipelineAction& a, int step) {
  label_spans(a.micro);
  const int g = global_chunk(plan_.shape, stage_, a.chunk);
  const auto [first, last] = plan_.chunks[static_cast<std::size_t>(g)];
  const int slot = slot_for(a.micro);
  if (slots_ > 1) model_.select_slot(slot);
  if (last == model_.units() - 1) {
    if (options_.compute) model_.backward_loss();
  } else if (options_.mode != CommMode::kOff) {
    received(current_, step);
    Buffer& buffer = *receive_buffers_[current_];
    if (options_.compute) model_.begin_backward(last, buffer.array->span());
    buffer.received = false;
  } else if (options_.compute) {
    // Compute-only: the transfer is a local copy of as many bytes, and the gradient this
    // stage would have received is whatever the copy holds; the same arithmetic runs.
    Buffer& copy = free_buffer(model_.unit_input(last + 1, slot).size());
    model_.begin_backward(last, copy.array->span());
  }
  const bool last_micro = a.micro == options_.micro_batches - 1;
  // A unit the micro-batch skipped produces no gradient, so autograd would never call its
  // hooks: the strategy hears of it at once with --find-unused, else never.
  auto ran = [&](int u) { return !options_.compute || model_.unit_ran(u); };
  if (options_.find_unused) {
    for (int u = last; u >= first; --u) {
      if (!ran(u)) sync_.after_backward(u, last_micro);
    }
  }
  for (int u = last; u >= first; --u) {
    sync_.before_backward(u);
    if (options_.compute) model_.backward_unit(u);
    if (ran(u)) sync_.after_backward(u, last_micro);
  }
  if (--chunks_in_flight_[static_cast<std::size_t>(a.micro)] == 0) {
    free_slots_.push_back(slot);
    slot_of_micro_[static_cast<std::size_t>(a.micro)] = -1;
  }
  if (first == 0) return;
  // The input gradient lives in scratch the next backward overwrites: send a copy.
  const std::size_t floats = model_.unit_input(first, slot).size();
  Buffer& buffer = free_buffer(floats);
  if (options_.compute) model_.copy(model_.input_grad(first), buffer.array->span());
  if (options_.mode == CommMode::kOff) return;  // compute-only: the copy is the transfer
  const int peer = plan_.rank_of(plan_.stage_of_chunk(g - 1), replica_);
  WorkPtr send = exchange(buffer.array->span(), peer, gradient_tag(g - 1),
                          transfer_info(step, a.micro), step);
  bytes_per_step_ += static_cast<std::int64_t>(floats * sizeof(float));
  buffer.busy = send;
  sends_.push_back(std::move(send));
}

void StageRunner::local_copy(std::span<float> activation, bool into_model) {
  if (!options_.compute) return;
  Buffer& buffer = free_buffer(activation.size());
  if (into_model) {
    model_.copy(buffer.array->span(), activation);
  } else {
    model_.copy(activation, buffer.array->span());
  }
}

void StageRunner::label_spans(int micro) {
  if (recorder_ != nullptr) recorder_->set_micro(micro);
}

void StageRunner::finish_step() {
  label_spans(-1);
  for (WorkPtr& send : sends_) wait_timed(model_, comm_, *send, send->info().tag);
  sends_.clear();
}

}  // namespace tandem

namespace tandem {

std::unique_ptr<GradSync> make_stage_sync(const StagePlan& plan, Communicator& comm,
                                          Communicator& control, RankModel& model,
                                          std::unique_ptr<Communicator> replicas,
                                          const ReducerOptions& options) {
  TANDEM_CHECK_EQ(replicas != nullptr, plan.replicas > 1);
  const int rank = comm.rank();
  StageUnits units{.stage = plan.stage_of(rank),
                   .replica = plan.replica_of(rank),
                   .replicas = plan.replicas};
  for (int s = 0; s < plan.shape.stages; ++s) {
    units.owned.push_back(plan.owned_units(s, model.units()));
  }
  // gpt's tied embedding on two stages: its gradient is summed over the embedding group
  // after the passes (StageRunner::reduce_tied_grads), then averaged over the replicas.
  units.hold_embedding = plan.tied_across_stages && plan.stage_of_chunk(0) == units.stage;
  return std::make_unique<StageSync>(std::move(units), control, model, std::move(replicas),
                                     options);
}

void StageRunner::reduce_tied_grads(int step) {
  if (!plan_.tied_across_stages || options_.mode == CommMode::kOff) return;
  const int first_stage = plan_.stage_of_chunk(0);
  const int last_stage = plan_.stage_of_chunk(static_cast<int>(plan_.chunks.size()) - 1);
  if (stage_ != first_stage && stage_ != last_stage) return;
  TANDEM_CHECK_EQ(embedding_group_->size(), 2);
  const ModelLayout& layout = model_.layout();
  const std::size_t begin = layout.unit_begin(0), end = layout.unit_end(0);
  const std::span<float> grads = model_.grads().subspan(begin, end - begin);
  // The embedding group's sum: the first stage's half, then the last's, on both (on the
  // device where the model is; in comm-only the gradient is whatever the memory holds).
  WorkPtr sum = embedding_group_->allreduce(grads, ReduceOp::kSum,
                                            {.kind = SpanKind::kAllreduce, .step = step});
  wait_timed(model_, *embedding_group_, *sum, -1);
  bytes_per_step_ += static_cast<std::int64_t>(grads.size_bytes());
}

}  // namespace tandem
