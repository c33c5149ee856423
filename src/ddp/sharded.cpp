#include "ddp/sharded.h"

#include <algorithm>

#include "core/error.h"
#include "core/page_array.h"
#include "model/model_ops.h"

namespace tandem {

// Note [ordering on a device]: on --device cuda every buffer here is device memory, and
// the strategy's own work (the fsdp constructor's copies, SGD on the shards, a discard's
// event after which its memory goes back, a restore's zeroing) is enqueued on the model's
// compute stream. Collectives are ordered
// after everything enqueued on the bound stream when they are issued, and Work::wait()
// makes that stream wait for them (comm/work.h). So:
// - a discard after a wait: settle_reduces discards a unit's gradient only after waiting
//   for its reduce-scatter, and release_after discards parameters only of a resident unit,
//   whose gather was waited for (wait_gathered); the discard's event is recorded on the
//   stream after the stream waited, so the memory never goes back (cuda/device_pages.h)
//   while a collective still reads or writes it;
// - a gather after a discard: a unit's gather is issued only when it is neither resident
//   nor being gathered, that is after its last discard was enqueued, and after its
//   restore (mapped again, zeroed on the stream), so the gather is ordered after both; the
//   same holds for the backward's += into gradients given back (restored before it), and
//   for zero1/zero2's in-place gathers after SGD wrote the rank's block;
// - SGD reads the gradient shards after before_optimizer waited for every reduce-scatter.
// On a device settle_reduces(false) only tests completion where the memory is the host's:
// the host cannot see a device collective end without blocking, so reduce-scatters are
// settled (and gradients given back) at the next wait, before the optimizer at the latest,
// and grads_peak counts them until then.

LayoutOptions sharded_layout(int ranks) {
  TANDEM_CHECK(ranks >= 1);
  // Huge pages (core/page_array.h): a unit's whole 2 MiB pages are its own, and the gap
  // after its end is never touched.
  return {.unit_multiple = static_cast<std::size_t>(ranks),
          .unit_align = PageMemory::kHugePage / sizeof(float)};
}

namespace {

std::vector<std::vector<int>> units_read(const ModelLayout& layout) {
  std::vector<std::vector<int>> out;
  for (int u = 0; u < layout.units(); ++u) out.push_back(layout.units_read(u));
  return out;
}

}  // namespace

ShardedSync::ShardedSync(Communicator& comm, RankModel& model, StrategyKind kind, CommMode mode,
                         ShardOptions options, int micro_batches, bool compute)
    : comm_(comm),
      model_(model),
      kind_(kind),
      mode_(mode),
      options_(options),
      ranks_(comm.size()),
      schedule_(units_read(model.layout()), micro_batches,
                mode == CommMode::kSequential ? 0 : options.prefetch,
                options.reshard_after_forward) {
  TANDEM_CHECK(kind == StrategyKind::kZero1 || kind == StrategyKind::kZero2 || fsdp());
  TANDEM_CHECK(micro_batches >= 1 && options.prefetch >= 0);
  grad_scale_ = 1.0f / static_cast<float>(micro_batches);
  compute_ = compute;
  const ModelLayout& layout = model.layout();
  TANDEM_CHECK_EQ(layout.options().unit_multiple % static_cast<std::size_t>(ranks_), 0u);
  std::size_t offset = 0;
  for (int u = 0; u < layout.units(); ++u) {
    const UnitInfo& info = layout.unit(u);
    Unit unit{.begin = info.begin,
              .padded_end = info.padded_end,
              .owned_end = layout.owned_end(u),
              .shard = (info.padded_end - info.begin) / static_cast<std::size_t>(ranks_),
              .offset = offset};
    offset += unit.shard;
    units_.push_back(std::move(unit));
  }
  shard_numel_ = offset;
  velocity_shards_ = model_.allocate_zeroed(shard_numel_);
  if (options.compress.casts()) {
    // Note [sharded compression]: a unit's gradient is cast to 16 bits (divided by the world
    // size) as it becomes final, reduce-scattered in 16 bits, and the rank's block widened
    // into its gradient shard when the reduce-scatter is settled; the all-gathers of
    // parameters stay fp32 (PyTorch FSDP's reduce_dtype, not its param_dtype).
    TANDEM_CHECK(options.compress.kind != Compression::Kind::kPowerSgd);
    // Compute-only casts as well (the scenario's compute is the overlapped one's), into a
    // gradient shard of its own.
    if (!communicates()) grad_shards_ = model_.allocate_zeroed(shard_numel_);
    wire_ = std::make_unique<WireCopy>(model_, options.compress.wire_type(), model_.grads().size());
    shard_wire_ = std::make_unique<WireCopy>(model_, options.compress.wire_type(), shard_numel_);
  }
  // Compute-only: a full local replica and no collective, and the optimizer's work of the
  // overlapped scenario (SGD on the rank's block of each unit, optimizer_step).
  if (!communicates()) return;

  grad_shards_ = model_.allocate_zeroed(shard_numel_);
  if (fsdp()) {
    // The rank keeps its block of every unit; the model keeps nothing until gathered.
    param_shards_ = model_.allocate_zeroed(shard_numel_);
    for (Unit& unit : units_) {
      model_.copy(own_params(unit), param_shard(unit));
      model_.discard_params(unit.begin, unit.owned_end);
    }
  }
}

ShardedSync::~ShardedSync() = default;

std::span<float> ShardedSync::own_params(Unit& unit) {
  return model_.params().subspan(unit.begin + static_cast<std::size_t>(comm_.rank()) * unit.shard,
                                 unit.shard);
}

std::span<float> ShardedSync::own_grads(Unit& unit) {
  return model_.grads().subspan(unit.begin + static_cast<std::size_t>(comm_.rank()) * unit.shard,
                                unit.shard);
}

std::span<float> ShardedSync::param_shard(Unit& unit) {
  return param_shards_->span().subspan(unit.offset, unit.shard);
}

std::span<float> ShardedSync::grad_shard(Unit& unit) {
  return grad_shards_->span().subspan(unit.offset, unit.shard);
}

std::span<float> ShardedSync::velocity_shard(Unit& unit) {
  return velocity_shards_->span().subspan(unit.offset, unit.shard);
}

void ShardedSync::begin_step(int step) {
  step_ = step;
  in_step_ = true;
  event_ = 0;
  bytes_this_step_ = 0;
  uncompressed_this_step_ = 0;
  for (Unit& unit : units_) unit.updated = false;
}

void ShardedSync::before_forward(int unit) {
  (void)unit;
  if (!communicates()) return;
  settle_reduces(/*wait=*/false);
  if (fsdp()) {
    gather_ahead(event_);
    wait_gathered(event_);
  }
}

void ShardedSync::after_forward(int unit) {
  (void)unit;
  if (communicates() && fsdp()) release_after(event_);
  ++event_;
}

void ShardedSync::before_backward(int unit) {
  (void)unit;
  if (!communicates()) return;
  settle_reduces(/*wait=*/false);
  if (kind_ != StrategyKind::kZero1) {
    // The backward writes full gradients of the units it reads (gpt's head: the tied wte),
    // into memory given back at the last reduce-scatter: restored first.
    for (int v : schedule_.needs(event_)) {
      Unit& read = units_[static_cast<std::size_t>(v)];
      if (!read.grads_live) model_.restore_grads(read.begin, read.owned_end);
      read.grads_live = true;
    }
    note_transient();
  }
  if (fsdp()) {
    gather_ahead(event_);
    wait_gathered(event_);
  }
}

void ShardedSync::after_backward(int unit, bool last_micro_batch) {
  // Compute-only: the compression's casts alone (issue_reduce sends nothing then).
  if (!communicates() && wire_ && last_micro_batch) issue_reduce(unit);
  if (communicates()) {
    if (fsdp()) release_after(event_);
    // Accumulation: the unit's gradient is final after the last micro-batch only.
    if (last_micro_batch) {
      issue_reduce(unit);
      if (mode_ == CommMode::kSequential) settle_reduces(/*wait=*/true);
    }
  }
  ++event_;
}

void ShardedSync::gather_ahead(int event) {
  for (int v : schedule_.gathers_before(event)) issue_gather(v);
}

void ShardedSync::issue_gather(int u) {
  Unit& unit = units_[static_cast<std::size_t>(u)];
  const std::size_t numel = unit.padded_end - unit.begin;
  const OpInfo info{.kind = SpanKind::kAllgather,
                    .bytes = static_cast<std::int64_t>(numel * sizeof(float)),
                    .step = in_step_ ? step_ : -1,  // -1: no iteration
                    .tag = u,
                    .tag_kind = OpInfo::TagKind::kUnit};
  model_.restore_params(unit.begin, unit.owned_end);  // given back at its last release
  const std::span<float> full = model_.params().subspan(unit.begin, numel);
  unit.gather = comm_.allgather(fsdp() ? param_shard(unit) : own_params(unit), full, info);
  if (!in_step_) return;  // full_params(): between steps, not training's memory or traffic
  bytes_this_step_ += info.bytes;
  uncompressed_this_step_ += info.bytes;
  note_transient();
}

void ShardedSync::wait_gathered(int event) {
  for (int v : schedule_.waits_before(event)) {
    Unit& unit = units_[static_cast<std::size_t>(v)];
    TANDEM_CHECK(unit.gather != nullptr);  // gather_ahead issued it
    wait(*unit.gather, v);
    unit.gather.reset();
  }
}

// Note [giving back, timed]: giving a unit's memory back to the system is work on the
// training thread, between its passes: on the CPU an madvise whose TLB shootdown
// interrupts every core the process runs on (26-118 us per unit in a VM of 2 cores:
// docs/PERFORMANCE.md), on a device the host's share of the release. A span named
// "give back" (ModelOp::kGiveBack, tag the unit) on Lane::kIdle times it: drawn in the
// trace and priced by the simulator (DeviceProfile::give_back_s), but neither compute nor
// communication for the metrics (docs/METRICS.md), as an imported trace's memcpy.
template <typename Discard>
void ShardedSync::give_back(int u, Discard&& discard) {
  if (in_step_) {
    in_span(model_, Lane::kIdle, SpanKind::kMemory, u, op_name(ModelOp::kGiveBack), discard);
  } else {
    discard();
  }
}

void ShardedSync::release_after(int event) {
  for (int v : schedule_.releases_after(event)) {
    const Unit& unit = units_[static_cast<std::size_t>(v)];
    give_back(v, [&] { model_.discard_params(unit.begin, unit.owned_end); });
  }
}

void ShardedSync::issue_reduce(int u) {
  Unit& unit = units_[static_cast<std::size_t>(u)];
  const std::size_t numel = unit.padded_end - unit.begin;
  const OpInfo info{
      .kind = SpanKind::kReduceScatter,
      .bytes = static_cast<std::int64_t>(numel * (wire_ ? size_of(wire_->type()) : sizeof(float))),
      .step = step_,
      .tag = u,
      .tag_kind = OpInfo::TagKind::kUnit};
  const std::span<float> grads = model_.grads().subspan(unit.begin, numel);
  if (wire_) {
    if (compute_) wire_->narrow(grads, unit.begin, 1.0f / static_cast<float>(ranks_), u);
    if (!communicates()) {  // compute-only: widened at once, as a settled unit would be
      shard_wire_->widen(unit.offset, grad_shard(unit), u);
      return;
    }
    unit.reduce = comm_.reduce_scatter(wire_->span(unit.begin, numel),
                                       shard_wire_->span(unit.offset, unit.shard), wire_->type(),
                                       ReduceOp::kSum, info);
  } else {
    unit.reduce = comm_.reduce_scatter(grads, grad_shard(unit), ReduceOp::kAverage, info);
  }
  bytes_this_step_ += info.bytes;
  uncompressed_this_step_ += static_cast<std::int64_t>(numel * sizeof(float));
}

void ShardedSync::settle_reduces(bool wait_all) {
  for (std::size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    if (!unit.reduce) continue;
    if (wait_all) {
      wait(*unit.reduce, static_cast<int>(u));
    } else if (comm_.memory() == MemoryKind::kHost && unit.reduce->test()) {
      unit.reduce->wait();  // rethrows a stored error
    } else {
      continue;
    }
    unit.reduce.reset();
    settled(static_cast<int>(u));
  }
}

// Note [sharded optimizer overlap]: with --overlap-optimizer a unit's shard gets its SGD
// step as soon as its reduce-scatter is settled, during backward when it is found done,
// after backward unit by unit as each is waited for, while the later reduce-scatters are
// still running (ZeRO's overlapped step). It is SGD on the same shard with the same
// gradient block, so bit for bit the step after the last wait. Only the local update
// moves: zero1's and zero2's all-gathers of the updated blocks still go after the
// optimizer, in unit order, because collectives must be issued in the same order on
// every rank and a reduce-scatter ends at different moments on different ranks.
void ShardedSync::settled(int u) {
  Unit& unit = units_[static_cast<std::size_t>(u)];
  if (wire_ && compute_) shard_wire_->widen(unit.offset, grad_shard(unit), u);
  if (kind_ != StrategyKind::kZero1) {
    give_back(u, [&] { model_.discard_grads(unit.begin, unit.owned_end); });
    unit.grads_live = false;
  }
  if (options_.overlap_optimizer && compute_) update(u, grad_scale_);
}

void ShardedSync::update(int u, float grad_scale) {
  Unit& unit = units_[static_cast<std::size_t>(u)];
  model_.begin_span(Lane::kCompute, SpanKind::kOptimizer, u);
  if (communicates()) {
    model_.sgd_step(fsdp() ? param_shard(unit) : own_params(unit), grad_shard(unit),
                    velocity_shard(unit), grad_scale);
    if (kind_ == StrategyKind::kZero1) model_.zero_grads(unit.begin, unit.owned_end);
  } else {
    // Compute-only: the rank's block of its own gradient (see optimizer_step).
    model_.sgd_step(own_params(unit), own_grads(unit), velocity_shard(unit), grad_scale);
    model_.zero_grads(unit.begin, unit.owned_end);
  }
  model_.end_span();
  unit.updated = true;
}

void ShardedSync::wait(Work& work, int tag) { wait_timed(model_, comm_, work, tag); }

void ShardedSync::before_optimizer() {
  // Overlapped updates wait unit by unit in optimizer_step.
  const bool later = options_.overlap_optimizer && compute_ && mode_ == CommMode::kOverlapped;
  if (communicates() && !later) settle_reduces(/*wait=*/true);
}

void ShardedSync::optimizer_step(RankModel& model, float grad_scale) {
  if (options_.overlap_optimizer) {
    for (std::size_t u = 0; u < units_.size(); ++u) {
      Unit& unit = units_[u];
      if (unit.updated) continue;
      if (unit.reduce) {  // waited for, then settled: which updates it
        wait(*unit.reduce, static_cast<int>(u));
        unit.reduce.reset();
        settled(static_cast<int>(u));
      } else {
        update(static_cast<int>(u), grad_scale);
      }
    }
    return;
  }
  if (!communicates()) {
    // The compute-only scenario's compute is the overlapped one's (docs/METRICS.md): SGD on
    // a shard's worth of every unit, the rank's block of its own (unaveraged) gradient.
    // The rest of the replica is not updated: without collectives nothing else is this
    // rank's to update.
    for (Unit& unit : units_) {
      model.sgd_step(own_params(unit), own_grads(unit), velocity_shard(unit), grad_scale);
    }
    model.zero_grad();
    return;
  }
  for (Unit& unit : units_) {
    model.sgd_step(fsdp() ? param_shard(unit) : own_params(unit), grad_shard(unit),
                   velocity_shard(unit), grad_scale);
  }
  if (kind_ == StrategyKind::kZero1) model.zero_grad();  // zero2, fsdp: given back already
}

void ShardedSync::after_optimizer() {
  if (!communicates() || fsdp()) return;
  // zero1, zero2: every rank's updated block back into every replica, in place.
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) issue_gather(u);
}

void ShardedSync::end_step() {
  for (std::size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    for (WorkPtr* work : {&unit.gather, &unit.reduce}) {
      if (!*work) continue;
      wait(**work, static_cast<int>(u));
      (*work)->synchronize();
      work->reset();
    }
  }
  bytes_last_step_ = bytes_this_step_;
  uncompressed_last_step_ = uncompressed_this_step_;
  in_step_ = false;
}

std::vector<float> ShardedSync::full_params(RankModel& model, bool copy) {
  if (!fsdp() || !communicates()) return GradSync::full_params(model, copy);
  gather_all();
  std::vector<float> out = copy ? model.download_params() : std::vector<float>{};
  release_all(model);
  return out;
}

std::optional<double> ShardedSync::validation_loss(RankModel& model) {
  if (!fsdp() || !communicates()) return GradSync::validation_loss(model);
  gather_all();
  std::optional<double> loss = model.validation_loss();
  release_all(model);
  return loss;
}

void ShardedSync::gather_all() {
  TANDEM_CHECK(!in_step_);
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
    if (schedule_.resident(u)) continue;
    schedule_.start_gather(u);
    issue_gather(u);
  }
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
    Unit& unit = units_[static_cast<std::size_t>(u)];
    if (!unit.gather) continue;
    unit.gather->synchronize();
    unit.gather.reset();
    schedule_.finish_gather(u);
  }
}

void ShardedSync::release_all(RankModel& model) {
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
    const Unit& unit = units_[static_cast<std::size_t>(u)];
    model.discard_params(unit.begin, unit.owned_end);
    schedule_.release(u);
  }
}

void ShardedSync::note_transient() {
  std::int64_t gathered = 0, grads = 0;
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
    const Unit& unit = units_[static_cast<std::size_t>(u)];
    const auto range = static_cast<std::int64_t>((unit.padded_end - unit.begin) * sizeof(float));
    if (fsdp() && (schedule_.resident(u) || unit.gather)) gathered += range;
    if (unit.grads_live) grads += range;
  }
  gathered_peak_ = std::max(gathered_peak_, gathered);
  grads_peak_ = std::max(grads_peak_, grads);
}

std::int64_t ShardedSync::bytes_per_step() const { return bytes_last_step_; }

StateBytes ShardedSync::state_bytes() const {
  // A full replica: every unit with its padding (the gaps between units are never touched).
  std::int64_t full = 0;
  for (const Unit& unit : units_) {
    full += static_cast<std::int64_t>((unit.padded_end - unit.begin) * sizeof(float));
  }
  StateBytes out = sharded_state_bytes(kind_, mode_, full,
                                       static_cast<std::int64_t>(shard_numel_ * sizeof(float)));
  if (communicates()) {
    out.gathered_peak = gathered_peak_;
    out.grads_peak = grads_peak_;
  }
  if (wire_) out.grads += wire_->bytes() + shard_wire_->bytes();  // the 16-bit copies
  return out;
}

StateBytes sharded_state_bytes(StrategyKind kind, CommMode mode, std::int64_t full,
                               std::int64_t shards) {
  if (mode == CommMode::kOff) return {.params = full, .grads = full, .optimizer = full};
  StateBytes out{
      .params = kind == StrategyKind::kFsdp ? shards : full, .grads = shards, .optimizer = shards};
  if (kind == StrategyKind::kZero1) out.grads += full;  // the model's full gradients too
  return out;
}

std::string ShardedSync::describe() const {
  std::string out = Strategy{kind_, 0}.to_string() + ", " + std::to_string(units_.size()) +
                    " units sharded over " + std::to_string(ranks_) + " ranks";
  if (fsdp()) {
    out += ", prefetch " + std::to_string(options_.prefetch);
    if (!options_.reshard_after_forward) out += ", kept from forward to backward";
  }
  if (options_.overlap_optimizer) out += ", optimizer overlapped";
  if (options_.compress.enabled()) out += ", compressed " + options_.compress.to_string();
  return out;
}

}  // namespace tandem
