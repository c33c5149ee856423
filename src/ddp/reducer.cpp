#include "ddp/reducer.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"

namespace tandem {

Strategy Strategy::parse(std::string_view text) {
  if (text == "sequential") return {StrategyKind::kSequential, 0};
  if (text == "layerwise") return {StrategyKind::kLayerwise, 0};
  if (text == "bucketed") return {StrategyKind::kBucketed, 0};
  if (text == "zero1") return {StrategyKind::kZero1, 0};
  if (text == "zero2") return {StrategyKind::kZero2, 0};
  if (text == "fsdp") return {StrategyKind::kFsdp, 0};
  if (text.starts_with("chunked:")) {
    const long long n = parse_int(text.substr(8), "chunk count");
    if (n < 1 || n > 1'000'000) {
      throw UsageError("strategy '" + std::string(text) + "': chunk count must be 1..1000000");
    }
    return {StrategyKind::kChunked, static_cast<int>(n)};
  }
  throw UsageError("unknown strategy '" + std::string(text) +
                   "' (expected sequential, layerwise, bucketed, chunked:N, zero1, zero2 or fsdp)");
}

std::string Strategy::to_string() const {
  switch (kind) {
    case StrategyKind::kSequential:
      return "sequential";
    case StrategyKind::kLayerwise:
      return "layerwise";
    case StrategyKind::kBucketed:
      return "bucketed";
    case StrategyKind::kChunked:
      return "chunked:" + std::to_string(chunks);
    case StrategyKind::kZero1:
      return "zero1";
    case StrategyKind::kZero2:
      return "zero2";
    case StrategyKind::kFsdp:
      return "fsdp";
  }
  return "?";
}

bool Strategy::sharded() const {
  return kind == StrategyKind::kZero1 || kind == StrategyKind::kZero2 ||
         kind == StrategyKind::kFsdp;
}

namespace {

// Parameters in the order backward produces them: reverse registration order, which
// is also ascending flat offset.
std::vector<int> backward_order(const std::vector<GradParam>& params) {
  std::vector<int> order(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return params[a].offset < params[b].offset; });
  return order;
}

void close_bucket(std::vector<Bucket>& buckets, Bucket& open) {
  if (open.params.empty()) return;
  open.index = static_cast<int>(buckets.size());
  buckets.push_back(std::move(open));
  open = Bucket{};
}

// Units whose parameters are grouped whole: by size cap (bucketed) or by layer.
std::vector<Bucket> plan_grouped(const std::vector<GradParam>& params,
                                 const BucketPlanOptions& options, bool by_layer) {
  std::vector<Bucket> buckets;
  Bucket open;
  for (int p : backward_order(params)) {
    const GradParam& param = params[p];
    const std::int64_t bytes = static_cast<std::int64_t>(param.numel * sizeof(float));
    if (!open.params.empty()) {
      const bool new_layer = params[open.params.back()].unit != param.unit;
      const std::int64_t cap =
          buckets.empty() ? options.first_bucket_cap_bytes : options.bucket_cap_bytes;
      const bool full = open.bytes() + bytes > cap;
      if (by_layer ? new_layer : full) close_bucket(buckets, open);
    }
    // A bucket is one range: it ends where the next parameter does not follow (the units of
    // a pipeline stage's chunks need not be neighbours).
    if (!open.params.empty() && open.end != param.offset) close_bucket(buckets, open);
    if (open.params.empty()) open.begin = open.end = param.offset;
    open.end += param.numel;
    open.params.push_back(p);
  }
  close_bucket(buckets, open);
  return buckets;
}

// N equal chunks of the flat gradient (the last takes the remainder); a chunk lists
// every parameter it overlaps, so it launches once all of them are ready.
std::vector<Bucket> plan_chunked(const std::vector<GradParam>& params, std::size_t numel,
                                 int chunks) {
  const std::size_t n = std::max<std::size_t>(1, std::min<std::size_t>(chunks, numel));
  const std::size_t size = numel / n;
  std::vector<Bucket> buckets(n);
  for (std::size_t c = 0; c < n; ++c) {
    buckets[c].index = static_cast<int>(c);
    buckets[c].begin = c * size;
    buckets[c].end = c + 1 == n ? numel : (c + 1) * size;
  }
  for (int p : backward_order(params)) {
    const std::size_t lo = params[p].offset, hi = lo + params[p].numel;
    for (auto& bucket : buckets) {
      if (bucket.begin < hi && lo < bucket.end) bucket.params.push_back(p);
    }
  }
  return buckets;
}

}  // namespace

std::vector<Bucket> plan_buckets(const std::vector<GradParam>& params, std::size_t flat_numel,
                                 const BucketPlanOptions& options) {
  if (options.bucket_cap_bytes <= 0 || options.first_bucket_cap_bytes <= 0) {
    throw UsageError("bucket cap must be positive");
  }
  switch (options.strategy.kind) {
    case StrategyKind::kLayerwise:
    case StrategyKind::kZero1:  // sharded strategies communicate unit by unit
    case StrategyKind::kZero2:
    case StrategyKind::kFsdp:
      return plan_grouped(params, options, /*by_layer=*/true);
    case StrategyKind::kSequential:
    case StrategyKind::kBucketed:
      return plan_grouped(params, options, /*by_layer=*/false);
    case StrategyKind::kChunked:
      return plan_chunked(params, flat_numel, options.strategy.chunks);
  }
  return {};
}

std::vector<GradParam> grad_params(const ModelLayout& layout, const std::vector<bool>& units) {
  std::vector<GradParam> out;
  for (const ParamInfo& p : layout.params()) {
    if (units.empty() || units.at(static_cast<std::size_t>(p.unit))) {
      out.push_back({p.unit, p.offset, p.numel});
    }
  }
  return out;
}

std::vector<std::vector<PowerSgdParam>> powersgd_params(const ModelLayout& layout,
                                                        const std::vector<Bucket>& buckets,
                                                        const std::vector<GradParam>& params) {
  std::map<std::size_t, const ParamInfo*> by_offset;
  for (const ParamInfo& p : layout.params()) by_offset[p.offset] = &p;
  std::vector<std::vector<PowerSgdParam>> out;
  for (const Bucket& bucket : buckets) {
    std::vector<PowerSgdParam>& members = out.emplace_back();
    for (int i : bucket.params) {
      const ParamInfo& info = *by_offset.at(params[static_cast<std::size_t>(i)].offset);
      // Whole parameters only: chunked plans are refused with PowerSGD (trainer.cpp).
      TANDEM_CHECK(info.offset >= bucket.begin && info.offset + info.numel <= bucket.end);
      members.push_back({info.offset, info.numel, info.shape});
    }
  }
  return out;
}

std::vector<Bucket> plan_buckets(const ModelLayout& layout, const BucketPlanOptions& options) {
  return plan_buckets(grad_params(layout), layout.numel(), options);
}

std::string_view to_string(CommMode mode) {
  switch (mode) {
    case CommMode::kOverlapped:
      return "overlapped";
    case CommMode::kSequential:
      return "sequential";
    case CommMode::kOff:
      return "off";
  }
  return "?";
}

// PowerSGD's state of one bucket: the factors' math (ddp/powersgd.h) and the host buffers
// its two all-reduces sum.
struct Reducer::PowerSgd {
  PowerSgdBucket math;
  std::vector<float> p;
  std::vector<float> q;
  bool second = false;  // this step's Q all-reduce is launched (the bucket's last)
};

Reducer::~Reducer() = default;

Reducer::Reducer(Communicator& comm, RankModel& model, const ReducerOptions& options,
                 const std::vector<bool>& units, int micro_batches, bool compute)
    : comm_(comm),
      model_(model),
      grads_(model.grads()),
      reduced_(grads_),
      options_(options),
      params_(grad_params(model.layout(), units)),
      buckets_(plan_buckets(params_, grads_.size(), options.plan)),
      schedule_(params_, buckets_),
      works_(buckets_.size()),
      grad_scale_(1.0f / static_cast<float>(std::max(1, micro_batches))),
      compute_(compute),
      updated_(buckets_.size()),
      waited_(buckets_.size()),
      unit_ready_(static_cast<std::size_t>(model.units())) {
  // SGD's velocity lives here instead of in the model (whose own stays unallocated: the
  // model's optimizer never runs), over the whole flat array so that a bucket's range
  // indexes it as it indexes the gradients.
  if ((options_.overlap_optimizer || options_.double_buffer) && compute_) {
    velocity_ = model.allocate_zeroed(grads_.size());
  }
  if (options_.double_buffer) {
    second_ = model.allocate_zeroed(grads_.size());
    reduced_ = second_->span();
  }
  if (options_.compress.casts()) {
    wire_ = std::make_unique<WireCopy>(model, options_.compress.wire_type(), grads_.size());
  }
  if (options_.compress.kind == Compression::Kind::kPowerSgd) {
    // Host buffers and the CPU's GEMM: refused on a GPU before this (trainer.cpp), as are
    // plans that cut parameters (chunked).
    TANDEM_CHECK(model.stream() == nullptr);
    std::vector<std::vector<PowerSgdParam>> members =
        powersgd_params(model.layout(), buckets_, params_);
    for (const Bucket& bucket : buckets_) {
      // The same seed on every rank, another for every bucket (PyTorch's default seed 0).
      auto state = std::make_unique<PowerSgd>(
          PowerSgd{.math = PowerSgdBucket(
                       std::move(members[static_cast<std::size_t>(bucket.index)]), bucket.begin,
                       bucket.end, options_.compress.rank,
                       0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(bucket.index + 1))});
      state->p.resize(state->math.p_numel());
      state->q.resize(state->math.q_numel());
      powersgd_.push_back(std::move(state));
    }
  }
}

bool Reducer::overlaps() const {
  return options_.mode == CommMode::kOverlapped &&
         options_.plan.strategy.kind != StrategyKind::kSequential;
}

// Note [double buffering]: with --double-buffer backward writes the model's gradients as
// always, and the collectives average a second buffer that holds the previous step's.
// Step k: begin_step launches every bucket of the second buffer (step k - 1's gradients),
// so the all-reduce runs during the whole forward and backward of step k; before the
// optimizer they are waited for; optimizer_step updates the parameters with them, then
// moves step k's gradients into the second buffer and zeroes the model's. The update of
// step k uses the gradients of step k - 1 (computed at the parameters before step k - 1's
// update): a one-step-delayed SGD, w(k+1) = w(k) - lr v(k), v(k) from g(k - 1); step 0
// updates nothing and the last step's gradients are never applied. The all-reduce is
// tagged with the step it runs in, launched and waited for within it, so a step still ends
// with nothing in flight. The sequential scenario launches it before the optimizer
// instead (no overlap); comm-only moves no gradients but averages the buffer alike.
void Reducer::begin_step(int step) {
  step_ = step;
  schedule_.reset();
  for (auto& work : works_) work.reset();
  std::fill(updated_.begin(), updated_.end(), false);
  std::fill(waited_.begin(), waited_.end(), false);
  std::fill(unit_ready_.begin(), unit_ready_.end(), false);
  if (options_.double_buffer && second_full_ && options_.mode == CommMode::kOverlapped) {
    for (int b = schedule_.take_next(); b >= 0; b = schedule_.take_next()) launch(buckets_[b]);
  }
}

void Reducer::after_backward(int unit, bool last_micro_batch) {
  if (!last_micro_batch) return;  // accumulation: synchronize only the last micro-batch
  unit_ready_.at(static_cast<std::size_t>(unit)) = true;
  if (options_.double_buffer) return;  // this step's gradients go out in the next step
  schedule_.mark_unit_ready(unit);
  if (!overlaps()) return;
  for (int b = schedule_.take_ready(); b >= 0; b = schedule_.take_ready()) launch(buckets_[b]);
  if (options_.overlap_optimizer) update_completed();
}

// Note [compression]: with --compress fp16|bf16 a bucket is cast to 16 bits as it is
// launched, its values divided by the world size on the way (as PyTorch's
// fp16_compress_hook divides before the all-reduce, so that the 16-bit sum cannot
// overflow where the average would not), summed in 16 bits, and widened back into the
// gradient when it is waited for: the casts are compute spans on the compute lane, the
// first during backward. With powersgd:R the launch computes P from the bucket's
// matrices (and packs what is not compressed beside it) and all-reduces it; after
// backward, launch_second_round waits for each P in plan order, computes Q and
// all-reduces it, and waiting for that gives the bucket its approximation. The second
// round cannot start during backward: collectives must be issued in the same order on
// every rank, and a P completes at different moments on different ranks; so PowerSGD's
// second round trip is exposed after backward unless later buckets' P still hide it.
// Compute-only computes everything and sends nothing; comm-only sends the buffers without
// computing them.
void Reducer::launch(const Bucket& bucket) {
  // Compute-only sends nothing, but computes the compression as the overlapped scenario
  // does, so that the two scenarios' compute is the same (docs/METRICS.md).
  const bool sends = options_.mode != CommMode::kOff;
  if (bucket.end == bucket.begin || (!sends && !options_.compress.enabled())) return;
  const auto b = static_cast<std::size_t>(bucket.index);
  const std::size_t n = bucket.end - bucket.begin;
  const std::span<float> range = reduced_.subspan(bucket.begin, n);
  const OpInfo info{
      .kind = SpanKind::kAllreduce, .bytes = wire_bytes(bucket), .step = step_, .tag = bucket.index};
  if (wire_) {
    if (compute_) {
      wire_->narrow(range, bucket.begin, 1.0f / static_cast<float>(comm_.allreduce_sum_ranks()),
                    bucket.index);
    }
    if (sends) {
      works_[b] =
          comm_.allreduce(wire_->span(bucket.begin, n), wire_->type(), ReduceOp::kSum, info);
    }
  } else if (!powersgd_.empty()) {
    PowerSgd& ps = *powersgd_[b];
    if (compute_) {
      time_compression(model_, bucket.index, [&] {
        ps.math.compute_p(range, ps.p, comm_.size());
        if (!sends) ps.math.compute_q(ps.p, ps.q);
      });
    }
    ps.second = !sends;
    if (sends) works_[b] = comm_.allreduce(ps.p, ReduceOp::kSum, info);
  } else {
    works_[b] = comm_.allreduce(range, ReduceOp::kAverage, info);
  }
  if (!sends) finish(b);
}

void Reducer::launch_second_round() {
  for (std::size_t b = 0; b < powersgd_.size(); ++b) {
    PowerSgd& ps = *powersgd_[b];
    if (!works_[b] || ps.second || ps.math.q_numel() == 0) continue;
    wait_timed(model_, comm_, *works_[b], static_cast<int>(b));
    if (compute_) time_compression(model_, static_cast<int>(b), [&] { ps.math.compute_q(ps.p, ps.q); });
    ps.second = true;
    works_[b] = comm_.allreduce(
        ps.q, ReduceOp::kSum,
        {.kind = SpanKind::kAllreduce, .step = step_, .tag = static_cast<int>(b)});
  }
}

void Reducer::finish(std::size_t b) {
  if (!compute_) return;
  const Bucket& bucket = buckets_[b];
  const std::span<float> range = reduced_.subspan(bucket.begin, bucket.end - bucket.begin);
  if (wire_) {
    wire_->widen(bucket.begin, range, bucket.index);
  } else if (!powersgd_.empty()) {
    PowerSgd& ps = *powersgd_[b];
    time_compression(model_, bucket.index,
                     [&] { ps.math.decompress(ps.p, ps.q, range, comm_.size()); });
  }
}

std::int64_t Reducer::wire_bytes(const Bucket& bucket) const {
  if (wire_) return static_cast<std::int64_t>((bucket.end - bucket.begin) * size_of(wire_->type()));
  if (!powersgd_.empty()) return powersgd_[static_cast<std::size_t>(bucket.index)]->math.wire_bytes();
  return bucket.bytes();
}

// Note [optimizer overlap]: with --overlap-optimizer a bucket's update (SGD on its range,
// then its gradients zeroed) runs on the compute thread as soon as its all-reduce is done:
// after each unit's backward, every bucket found done by then (Work::test, no waiting);
// after backward, the rest in plan order, each waited for and updated while the later
// buckets are still on the wire. SGD is elementwise, so updating range by range is bit for
// bit the update of the whole replica. The sequential scenario waits for every bucket
// first (no overlap), then updates bucket by bucket, and so does compute-only (nothing to
// wait for). The step ends after the last update, as DDP's optimizer-in-backward does, so
// the next forward needs no wait of its own.
void Reducer::update(int b, float grad_scale) {
  const Bucket& bucket = buckets_[static_cast<std::size_t>(b)];
  const std::size_t n = bucket.end - bucket.begin;
  model_.begin_span(Lane::kCompute, SpanKind::kOptimizer, b);
  model_.sgd_step(model_.params().subspan(bucket.begin, n), grads_.subspan(bucket.begin, n),
                  velocity_->span().subspan(bucket.begin, n), grad_scale);
  model_.zero_grads(bucket.begin, bucket.end);
  model_.end_span();
  updated_[static_cast<std::size_t>(b)] = true;
}

void Reducer::wait_for(std::size_t b) {
  if (!works_[b] || waited_[b]) return;
  // PowerSGD: the bucket's last all-reduce is Q's, launched by launch_second_round.
  TANDEM_CHECK(powersgd_.empty() || powersgd_[b]->second || powersgd_[b]->math.q_numel() == 0);
  wait_timed(model_, comm_, *works_[b], works_[b]->info().tag);
  waited_[b] = true;
  finish(b);
}

void Reducer::update_completed() {
  // PowerSGD's buckets are final only after the second round, which follows backward.
  if (!compute_ || !powersgd_.empty()) return;
  for (std::size_t b = 0; b < schedule_.taken(); ++b) {  // launched so far
    if (updated_[b] || (works_[b] && !works_[b]->test())) continue;
    wait_for(b);  // done already: rethrows its error; a device stream waits (at once)
    update(static_cast<int>(b), grad_scale_);
  }
}

// Note [unused parameters]: a unit that a micro-batch skipped (--layer-drop) produces no
// gradient, and the loop reports it to the reducer only with --find-unused (at the start
// of backward, as DDP's find_unused_parameters marks such parameters ready); its bucket
// then goes out with zeros for it, averaged over every rank like the rest. Without the
// flag that bucket can never become ready: DDP then fails the next step with "Expected to
// have finished reduction in the prior iteration"; here the step itself stops before its
// optimizer with one line naming the bucket, the unit and the flag. The peers, waiting
// for this rank's all-reduce, are aborted with that error (never a hang).
void Reducer::check_every_unit_reported() const {
  for (const GradParam& p : params_) {
    if (unit_ready_.at(static_cast<std::size_t>(p.unit))) continue;
    const auto bucket = std::find_if(buckets_.begin(), buckets_.end(), [&](const Bucket& b) {
      return b.begin <= p.offset && p.offset < b.end;
    });
    throw RuntimeError(
        "rank " + std::to_string(comm_.rank()) + ", step " + std::to_string(step_) + ": bucket " +
        std::to_string(bucket == buckets_.end() ? -1 : bucket->index) +
        " never became ready: unit " + std::to_string(p.unit) +
        " produced no gradient in the last micro-batch (a block --layer-drop skipped); pass "
        "--find-unused to mark unused parameters ready (DDP's find_unused_parameters)");
  }
}

void Reducer::before_optimizer() {
  // Only a model that skips units can leave one unreported (a pipeline stage's reducer
  // never hears of the tied embedding: StageSync averages it itself).
  if (compute_ && model_.layout().spec().layer_drop > 0) check_every_unit_reported();
  // Double buffering: nothing to average before the first step's gradients exist.
  if (options_.double_buffer && !second_full_) return;
  // Whatever backward did not launch (all of it when deferred) goes now, in order.
  for (int b = schedule_.take_next(); b >= 0; b = schedule_.take_next()) launch(buckets_[b]);
  launch_second_round();
  // Overlapped updates wait bucket by bucket in optimizer_step.
  if (options_.overlap_optimizer && options_.mode == CommMode::kOverlapped) return;
  for (std::size_t b = 0; b < works_.size(); ++b) wait_for(b);
}

void Reducer::optimizer_step(RankModel& model, float grad_scale) {
  if (options_.double_buffer) {
    if (second_full_) model.sgd_step(model.params(), reduced_, velocity_->span(), grad_scale);
    model.copy(grads_, reduced_);
    model.zero_grad();
    return;
  }
  if (!options_.overlap_optimizer) {
    GradSync::optimizer_step(model, grad_scale);
    return;
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (updated_[b]) continue;
    wait_for(b);
    update(static_cast<int>(b), grad_scale);
  }
}

void Reducer::after_optimizer() {
  second_full_ = options_.double_buffer;  // from now on it holds a step's gradients
  // The comm-only scenario runs no optimizer_step: its waits are timed here.
  for (std::size_t b = 0; b < works_.size(); ++b) wait_for(b);
}

void Reducer::end_step() {
  for (WorkPtr& work : works_) {
    if (work) work->synchronize();
    work.reset();
  }
}

std::int64_t Reducer::bytes_per_step() const {
  if (options_.mode == CommMode::kOff) return 0;
  std::int64_t bytes = 0;
  for (const Bucket& b : buckets_) bytes += wire_bytes(b);
  return bytes;
}

std::int64_t Reducer::uncompressed_bytes_per_step() const {
  if (options_.mode == CommMode::kOff) return 0;
  std::int64_t bytes = 0;
  for (const Bucket& b : buckets_) bytes += b.bytes();
  return bytes;
}

// The gradients' bytes include what communicating them keeps: the second buffer, the 16-bit
// wire copy, PowerSGD's error feedback, warm start and factor buffers.
StateBytes Reducer::state_bytes() const {
  const auto bytes = static_cast<std::int64_t>(grads_.size() * sizeof(float));
  std::int64_t grads = options_.double_buffer ? 2 * bytes : bytes;
  if (wire_) grads += wire_->bytes();
  for (const auto& ps : powersgd_) {
    grads += ps->math.state_bytes() +
             static_cast<std::int64_t>((ps->p.size() + ps->q.size()) * sizeof(float));
  }
  return {.params = bytes, .grads = grads, .optimizer = bytes};
}

std::string Reducer::describe() const {
  return options_.plan.strategy.to_string() + ", " + std::to_string(buckets_.size()) +
         (buckets_.size() == 1 ? " bucket" : " buckets") +
         (options_.overlap_optimizer ? ", optimizer overlapped" : "") +
         (options_.double_buffer ? ", double-buffered (the update one step late)" : "") +
         (options_.compress.enabled() ? ", compressed " + options_.compress.to_string() : "");
}

}  // namespace tandem
