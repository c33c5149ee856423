#include "engine/pipeline_schedule.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <stdexcept>
#include <system_error>

#include "core/error.h"

namespace tandem {

// Note [micro order]: floating-point addition is not associative, so a chunk's parameter
// gradients are bitwise those of a single-stage run with gradient accumulation only if
// they accumulate over the micro-batches in the same order, 0..M-1. Every schedule here
// therefore runs each chunk's backwards in increasing micro order (gpipe too: B(0..M-1),
// not the reversed drain some descriptions draw), and its forwards as well, so that a
// chunk's stored activations are consumed first in, first out. Megatron-LM's schedules
// keep the same order (their backward takes the oldest stored activations of the chunk).
//
// Note [interleaved order]: after Megatron-LM's
// forward_backward_pipelining_with_interleaving (checked against megatron/core
// pipeline_parallel/schedules.py, core v0.7.0). A stage runs M·V virtual micro-steps of
// each kind. Virtual forward k is local chunk (k / P) % V on micro-batch
// (k / (P·V))·P + k % P: P micro-batches through chunk 0, the same P through chunk 1,
// ..., then the next P micro-batches. Virtual backward k walks the chunks the other way,
// chunk V-1-(k / P) % V, on the same micro-batch. The stage runs
//   warmup = min((P-s-1)·2 + (V-1)·P, M·V)
// forwards, then alternates forward warmup+k and backward k, then drains the remaining
// backwards. (V-1)·P forwards fill the stage's first V-1 chunks; the 2·(P-s-1) more are
// the round trip of the first micro-batch from stage s to the last stage's last chunk
// and of its gradient back. One exception, also Megatron's: when M == P every stage runs
// all M·V forwards first (its all_warmup_microbatches), gpipe-like.

namespace {

std::int64_t product(const PipelineShape& shape) {
  return std::int64_t{shape.stages} * shape.chunks_per_stage * shape.micro_batches;
}

void check_valid(const PipelineShape& shape) {
  std::string why = check_shape(shape);
  if (!why.empty()) check_failed("check_shape(shape).empty()", __FILE__, __LINE__, why);
}

PipelineAction action(PipelineAction::Kind kind, int micro, int chunk) {
  return PipelineAction{.kind = kind, .micro = micro, .chunk = chunk};
}

std::vector<PipelineAction> gpipe_actions(int m_count) {
  std::vector<PipelineAction> out;
  for (int m = 0; m < m_count; ++m) out.push_back(action(PipelineAction::kForward, m, 0));
  for (int m = 0; m < m_count; ++m) out.push_back(action(PipelineAction::kBackward, m, 0));
  return out;
}

std::vector<PipelineAction> one_f_one_b_actions(int p, int m_count, int stage) {
  const int warmup = std::min(p - stage - 1, m_count);
  std::vector<PipelineAction> out;
  for (int m = 0; m < warmup; ++m) out.push_back(action(PipelineAction::kForward, m, 0));
  for (int i = 0; i < m_count - warmup; ++i) {
    out.push_back(action(PipelineAction::kForward, warmup + i, 0));
    out.push_back(action(PipelineAction::kBackward, i, 0));
  }
  for (int m = m_count - warmup; m < m_count; ++m) {
    out.push_back(action(PipelineAction::kBackward, m, 0));
  }
  return out;
}

// Note [interleaved order].
std::vector<PipelineAction> interleaved_actions(int p, int v, int m_count, int stage) {
  const int total = m_count * v;
  const int warmup = m_count == p ? total : std::min((p - stage - 1) * 2 + (v - 1) * p, total);
  auto micro = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto forward = [&](int k) { return action(PipelineAction::kForward, micro(k), (k / p) % v); };
  auto backward = [&](int k) {
    return action(PipelineAction::kBackward, micro(k), v - 1 - (k / p) % v);
  };
  std::vector<PipelineAction> out;
  for (int k = 0; k < warmup; ++k) out.push_back(forward(k));
  for (int k = 0; k < total - warmup; ++k) {
    out.push_back(forward(warmup + k));
    out.push_back(backward(k));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(backward(k));
  return out;
}

}  // namespace

ScheduleSpec parse_schedule(std::string_view text) {
  if (text == "gpipe") return {.kind = ScheduleKind::kGpipe, .virtual_stages = 1};
  if (text == "1f1b") return {.kind = ScheduleKind::k1F1B, .virtual_stages = 1};
  constexpr std::string_view kInterleaved = "interleaved:";
  if (text.starts_with(kInterleaved)) {
    const std::string_view digits = text.substr(kInterleaved.size());
    int v = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (!digits.empty() && ec == std::errc() && end == digits.data() + digits.size() && v >= 2) {
      return {.kind = ScheduleKind::kInterleaved, .virtual_stages = v};
    }
    throw UsageError("--schedule " + std::string(text) +
                     ": interleaved:V needs a whole number of chunks per stage V >= 2");
  }
  throw UsageError("--schedule " + std::string(text) +
                   ": expected gpipe, 1f1b or interleaved:V (V >= 2 chunks per stage)");
}

std::string_view to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGpipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
  }
  return "unknown";
}

std::string to_string(ScheduleSpec spec) {
  std::string text(to_string(spec.kind));
  if (spec.kind == ScheduleKind::kInterleaved) text += ":" + std::to_string(spec.virtual_stages);
  return text;
}

std::string check_shape(const PipelineShape& shape) {
  if (shape.stages < 1) {
    return "pipeline stages must be >= 1, got " + std::to_string(shape.stages);
  }
  if (shape.micro_batches < 1) {
    return "micro-batches per step must be >= 1, got " + std::to_string(shape.micro_batches);
  }
  if (shape.chunks_per_stage < 1) {
    return "model chunks per stage must be >= 1, got " + std::to_string(shape.chunks_per_stage);
  }
  if (shape.kind != ScheduleKind::kInterleaved && shape.chunks_per_stage != 1) {
    return std::string(to_string(shape.kind)) + " runs one model chunk per stage, got " +
           std::to_string(shape.chunks_per_stage);
  }
  if (product(shape) > (std::int64_t{1} << 28)) {
    return "stages x chunks x micro-batches must be at most 2^28";
  }
  if (shape.kind == ScheduleKind::kInterleaved && shape.micro_batches % shape.stages != 0) {
    return "the interleaved schedule needs micro-batches (" + std::to_string(shape.micro_batches) +
           ") to be a multiple of the stages (" + std::to_string(shape.stages) +
           "), as Megatron-LM's does";
  }
  return "";
}

std::string to_string(const PipelineAction& a) {
  std::string text = (a.kind == PipelineAction::kForward ? "F" : "B") + std::to_string(a.micro);
  if (a.chunk != 0) text += "/" + std::to_string(a.chunk);
  return text;
}

std::string to_string(const std::vector<PipelineAction>& actions) {
  std::string text;
  for (const PipelineAction& a : actions) {
    if (!text.empty()) text += ' ';
    text += to_string(a);
  }
  return text;
}

int global_chunk(const PipelineShape& shape, int stage, int local_chunk) {
  return local_chunk * shape.stages + stage;
}

std::vector<PipelineAction> stage_actions(const PipelineShape& shape, int stage) {
  check_valid(shape);
  TANDEM_CHECK(stage >= 0 && stage < shape.stages);
  switch (shape.kind) {
    case ScheduleKind::kGpipe:
      return gpipe_actions(shape.micro_batches);
    case ScheduleKind::k1F1B:
      return one_f_one_b_actions(shape.stages, shape.micro_batches, stage);
    case ScheduleKind::kInterleaved:
      return interleaved_actions(shape.stages, shape.chunks_per_stage, shape.micro_batches, stage);
  }
  TANDEM_CHECK(false);
}

int peak_in_flight(const std::vector<PipelineAction>& actions) {
  int live = 0;
  int peak = 0;
  for (const PipelineAction& a : actions) {
    live += a.kind == PipelineAction::kForward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

double textbook_bubble(const PipelineShape& shape) {
  check_valid(shape);
  const double p = shape.stages;
  const double work = shape.kind == ScheduleKind::kInterleaved
                          ? static_cast<double>(shape.chunks_per_stage) * shape.micro_batches
                          : static_cast<double>(shape.micro_batches);
  return (p - 1) / (work + p - 1);
}

ScheduleCosts uniform_costs(const PipelineShape& shape, double forward_per_stage,
                            double backward_per_stage) {
  const int chunks = shape.stages * shape.chunks_per_stage;
  const double v = shape.chunks_per_stage;
  return ScheduleCosts{.forward = std::vector<double>(chunks, forward_per_stage / v),
                       .backward = std::vector<double>(chunks, backward_per_stage / v)};
}

double SimulatedStep::bubble(int stage) const {
  if (makespan <= 0) return 0;
  return 1 - stages.at(stage).busy / makespan;
}

SimulatedStep simulate_schedule(const PipelineShape& shape, const ScheduleCosts& costs) {
  check_valid(shape);
  std::vector<std::vector<PipelineAction>> programs;
  for (int s = 0; s < shape.stages; ++s) programs.push_back(stage_actions(shape, s));
  return simulate_schedule(shape, programs, costs);
}

SimulatedStep simulate_schedule(const PipelineShape& shape,
                                const std::vector<std::vector<PipelineAction>>& programs,
                                const ScheduleCosts& costs) {
  check_valid(shape);
  const int p = shape.stages;
  const int v = shape.chunks_per_stage;
  const int m_count = shape.micro_batches;
  const int chunks = p * v;
  if (static_cast<int>(programs.size()) != p) {
    throw std::logic_error("pipeline schedule: " + std::to_string(programs.size()) +
                           " programs for " + std::to_string(p) + " stages");
  }
  if (static_cast<int>(costs.forward.size()) != chunks ||
      static_cast<int>(costs.backward.size()) != chunks) {
    throw std::logic_error("pipeline schedule: costs must have one entry per global chunk (" +
                           std::to_string(chunks) + ")");
  }

  // Each program must run every (micro, local chunk) forward and backward exactly once;
  // then a missing dependency can only mean a deadlock.
  for (int s = 0; s < p; ++s) {
    std::vector<char> seen(std::size_t(2) * m_count * v, 0);
    for (const PipelineAction& a : programs[s]) {
      if (a.micro < 0 || a.micro >= m_count || a.chunk < 0 || a.chunk >= v) {
        throw std::logic_error("pipeline schedule: stage " + std::to_string(s) + " runs " +
                               to_string(a) + ", out of range");
      }
      char& mark = seen[(std::size_t(a.kind) * m_count + a.micro) * v + a.chunk];
      if (mark) {
        throw std::logic_error("pipeline schedule: stage " + std::to_string(s) + " runs " +
                               to_string(a) + " twice");
      }
      mark = 1;
    }
    if (programs[s].size() != seen.size()) {
      throw std::logic_error("pipeline schedule: stage " + std::to_string(s) + " runs " +
                             std::to_string(programs[s].size()) + " actions, expected " +
                             std::to_string(seen.size()));
    }
  }

  // End times by (micro, global chunk); negative until the action has run.
  std::vector<double> forward_end(std::size_t(m_count) * chunks, -1);
  std::vector<double> backward_end(std::size_t(m_count) * chunks, -1);
  auto at = [&](int m, int g) { return std::size_t(m) * chunks + g; };

  SimulatedStep step;
  step.stages.resize(p);
  std::vector<std::size_t> next(p, 0);
  std::vector<double> clock(p, 0);
  std::size_t remaining = std::size_t(2) * m_count * chunks;

  // When the dependency (kind, m, g) lets an action of `stage` start; negative: not yet.
  auto ready = [&](PipelineAction::Kind kind, int m, int g, int stage) {
    const double end = (kind == PipelineAction::kForward ? forward_end : backward_end)[at(m, g)];
    if (end < 0) return -1.0;
    return g % p == stage ? end : end + costs.latency;
  };

  while (remaining > 0) {
    bool progressed = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < programs[s].size()) {
        const PipelineAction& a = programs[s][next[s]];
        const int g = global_chunk(shape, s, a.chunk);
        double start = clock[s];
        bool blocked = false;
        auto need = [&](PipelineAction::Kind kind, int dep_g) {
          const double t = ready(kind, a.micro, dep_g, s);
          if (t < 0) blocked = true;
          start = std::max(start, t);
        };
        if (a.kind == PipelineAction::kForward) {
          if (g > 0) need(PipelineAction::kForward, g - 1);
        } else {
          need(PipelineAction::kForward, g);
          if (g < chunks - 1) need(PipelineAction::kBackward, g + 1);
        }
        if (blocked) break;
        const double cost =
            (a.kind == PipelineAction::kForward ? costs.forward : costs.backward)[g];
        const double end = start + cost;
        (a.kind == PipelineAction::kForward ? forward_end : backward_end)[at(a.micro, g)] = end;
        step.stages[s].actions.push_back({.action = a, .start = start, .end = end});
        step.stages[s].busy += cost;
        step.makespan = std::max(step.makespan, end);
        clock[s] = end;
        ++next[s];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) {
      std::string stuck;
      for (int s = 0; s < p; ++s) {
        if (next[s] == programs[s].size()) continue;
        if (!stuck.empty()) stuck += ", ";
        stuck += "stage " + std::to_string(s) + " at " + to_string(programs[s][next[s]]) +
                 " (step " + std::to_string(next[s]) + ")";
      }
      throw std::logic_error("pipeline schedule deadlocks: " + stuck);
    }
  }
  return step;
}

}  // namespace tandem
