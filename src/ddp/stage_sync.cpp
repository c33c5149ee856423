#include "ddp/stage_sync.h"

#include <algorithm>

#include "core/error.h"

namespace tandem {

StageSync::StageSync(StageUnits units, Communicator& control, RankModel& model,
                     std::unique_ptr<Communicator> replicas, const ReducerOptions& options)
    : units_(std::move(units)), control_(control), model_(model), replicas_(std::move(replicas)) {
  TANDEM_CHECK(units_.stage >= 0 && static_cast<std::size_t>(units_.stage) < units_.owned.size());
  const ModelLayout& layout = model.layout();
  const std::vector<bool> keep =
      stage_kept_units(layout, units_.owned[static_cast<std::size_t>(units_.stage)]);
  if (replicas_) reducer_ = std::make_unique<Reducer>(*replicas_, model, options, keep);
  // The units another stage holds are given back, each run of neighbours as one range
  // (a device gives back whole pieces of its memory only, which may straddle two units).
  std::size_t run_begin = 0, run_end = 0;
  auto give_back = [&] {
    if (run_end > run_begin) {
      model.discard_params(run_begin, run_end);
      model.discard_grads(run_begin, run_end);
    }
  };
  for (int u = 0; u < layout.units(); ++u) {
    const std::size_t begin = layout.unit_begin(u), end = layout.owned_end(u);
    if (keep[static_cast<std::size_t>(u)]) {
      give_back();
      run_begin = run_end = end;
      ranges_.push_back({begin, end, model.allocate_zeroed(end - begin)});
    } else {
      if (run_end != begin) run_begin = begin;  // not adjacent: a new run
      run_end = end;
    }
  }
  give_back();
}

void StageSync::begin_step(int step) {
  if (reducer_) reducer_->begin_step(step);
}

void StageSync::after_backward(int unit, bool last_micro_batch) {
  // The tied embedding's average must wait for the sum over the two stages (it would run
  // on the same memory and average only this stage's half): launched in before_optimizer.
  if (unit == 0 && units_.hold_embedding) return;
  if (reducer_) reducer_->after_backward(unit, last_micro_batch);
}

void StageSync::before_optimizer() {
  if (reducer_) reducer_->before_optimizer();
}

void StageSync::end_step() {
  if (reducer_) reducer_->end_step();
}

void StageSync::optimizer_step(RankModel& model, float grad_scale) {
  for (Range& r : ranges_) {
    const std::size_t n = r.end - r.begin;
    model.sgd_step(model.params().subspan(r.begin, n), model.grads().subspan(r.begin, n),
                   r.velocity->span(), grad_scale);
    model.zero_grads(r.begin, r.end);
  }
}

std::vector<float> StageSync::full_params(RankModel& model, bool copy) {
  // Replica 0's stages send their units to rank 0, which holds stage 0, over the host
  // communicator (the copies are host memory).
  if (units_.replica != 0) return {};
  const int rank = units_.stage;  // replica 0: rank = stage
  std::vector<float> all;
  if (rank == 0) all = model.download_params();
  const ModelLayout& layout = model.layout();
  for (int s = 1; s < static_cast<int>(units_.owned.size()); ++s) {
    if (rank == s) {
      std::vector<float> mine = model.download_params();
      control_.send(mine, 0, 0, {.kind = SpanKind::kSend})->synchronize();
    } else if (rank == 0) {
      std::vector<float> theirs(all.size());
      control_.recv(theirs, s, 0, {.kind = SpanKind::kRecv})->synchronize();
      const std::vector<bool>& owned = units_.owned[static_cast<std::size_t>(s)];
      for (int u = 0; u < model.units(); ++u) {
        if (!owned[static_cast<std::size_t>(u)]) continue;
        std::copy(theirs.begin() + static_cast<std::ptrdiff_t>(layout.unit_begin(u)),
                  theirs.begin() + static_cast<std::ptrdiff_t>(layout.owned_end(u)),
                  all.begin() + static_cast<std::ptrdiff_t>(layout.unit_begin(u)));
      }
    }
  }
  if (!copy) all.clear();
  return all;
}

std::int64_t StageSync::bytes_per_step() const {
  return reducer_ ? reducer_->bytes_per_step() : 0;
}

StateBytes StageSync::state_bytes() const {
  std::int64_t floats = 0;
  for (const Range& r : ranges_) floats += static_cast<std::int64_t>(r.end - r.begin);
  const std::int64_t bytes = floats * static_cast<std::int64_t>(sizeof(float));
  return {.params = bytes, .grads = bytes, .optimizer = bytes};
}

std::string StageSync::describe() const {
  const std::string stage = "pipeline stage " + std::to_string(units_.stage) + " of " +
                            std::to_string(units_.owned.size());
  if (!reducer_) return stage + ", no data parallelism (1 replica)";
  return stage + ", its gradients averaged over " + std::to_string(units_.replicas) +
         " replicas: " + reducer_->describe();
}

std::vector<bool> stage_kept_units(const ModelLayout& layout, const std::vector<bool>& owned) {
  std::vector<bool> keep(owned.size(), false);
  for (int u = 0; u < layout.units(); ++u) {
    if (!owned[static_cast<std::size_t>(u)]) continue;
    for (int v : layout.units_read(u)) keep[static_cast<std::size_t>(v)] = true;
  }
  return keep;
}

std::size_t stage_kept_numel(const ModelLayout& layout, const std::vector<bool>& kept) {
  std::size_t n = 0;
  for (int u = 0; u < layout.units(); ++u) {
    if (kept[static_cast<std::size_t>(u)]) n += layout.owned_end(u) - layout.unit_begin(u);
  }
  return n;
}

}  // namespace tandem
