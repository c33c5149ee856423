// Pipeline-parallel schedules: which forward and backward passes each stage runs, in what
// order, as a pure function of the pipeline's shape. No communication and no tensors
// here; the executor that runs a stage's program (and receives activations and gradients
// from its neighbours) is built on top of this.
//
// Vocabulary:
// - P stages: the ranks of one pipeline.
// - V model chunks per stage (V = 1 for gpipe and 1f1b).
// - M micro-batches per step.
// - The model is cut into P·V global chunks in model order. Global chunk g is held by
//   stage g % P as its local chunk g / P (Megatron-LM's interleaving: stage s holds
//   chunks s, s+P, s+2P, ...). With V = 1, chunk g is stage g.
// - An action is {forward or backward, micro-batch m, local chunk c}; F(m, g) and B(m, g)
//   below name them by global chunk.
// - Dependencies: F(m, g) needs F(m, g-1) (g > 0); B(m, g) needs F(m, g), and
//   B(m, g+1) when g < P·V-1 (the last chunk's backward starts from the loss).
//
// Every schedule runs, on every stage and chunk, its forwards in micro order 0..M-1 and
// its backwards in micro order too, so a chunk's gradients accumulate in the order of a
// single-stage run with gradient accumulation (Note [micro order]).
//
// The schedules:
// - gpipe: F(0..M-1), then B(0..M-1). Every micro-batch's activations are alive at once.
// - 1f1b (PipeDream-flush, Megatron's non-interleaved schedule): stage s runs
//   w = min(P-s-1, M) warm-up forwards, then alternates one forward and one backward,
//   then drains the last w backwards; at most min(P-s, M) micro-batches are in flight.
// - interleaved:V (Megatron's interleaved 1F1B, V >= 2): the same warm-up / steady /
//   drain shape over M·V virtual micro-steps that walk the stage's chunks in groups of P
//   micro-batches (Note [interleaved order]). Needs M % P == 0, as Megatron does.
//
// With uniform costs (forward f, backward b per stage) the idle fraction of a step is the
// textbook bubble, (P-1)/(M+P-1) for gpipe and 1f1b and (P-1)/(V·M+P-1) for interleaved;
// simulate_schedule() computes it for any costs, and is how the tests find a schedule
// that deadlocks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

enum class ScheduleKind : std::uint8_t { kGpipe, k1F1B, kInterleaved };

// What --schedule names: "gpipe", "1f1b" or "interleaved:V" (V >= 2).
struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int virtual_stages = 1;  // V, model chunks per stage; 1 unless interleaved
};

// Throws UsageError, naming --schedule, for anything else.
ScheduleSpec parse_schedule(std::string_view text);
// The canonical text; parse_schedule(to_string(s)) == s.
std::string to_string(ScheduleSpec spec);
std::string_view to_string(ScheduleKind kind);

struct PipelineShape {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int stages = 1;            // P
  int chunks_per_stage = 1;  // V
  int micro_batches = 1;     // M
};

// "" when the shape is valid, else one line saying why (the caller prefixes its flag).
std::string check_shape(const PipelineShape& shape);

struct PipelineAction {
  enum Kind : std::uint8_t { kForward, kBackward };
  Kind kind = kForward;
  int micro = 0;
  int chunk = 0;  // local chunk, 0..V-1

  friend bool operator==(const PipelineAction&, const PipelineAction&) = default;
};

// "F3" (micro 3, local chunk 0) or "B3/1" (micro 3, local chunk 1).
std::string to_string(const PipelineAction& action);
// The actions separated by spaces: "F0 B0 F1 B1".
std::string to_string(const std::vector<PipelineAction>& actions);

// The global chunk of a stage's local chunk: local_chunk·P + stage.
int global_chunk(const PipelineShape& shape, int stage, int local_chunk);

// The stage's program: every (micro, local chunk) forward and backward once, in the order
// the stage runs them. The shape must pass check_shape (a broken invariant otherwise).
std::vector<PipelineAction> stage_actions(const PipelineShape& shape, int stage);

// The most (micro, chunk) pairs whose forward has run and whose backward has not, at any
// point of a program: the activations a stage keeps alive.
int peak_in_flight(const std::vector<PipelineAction>& actions);

// (P-1)/(M+P-1) for gpipe and 1f1b, (P-1)/(V·M+P-1) for interleaved.
double textbook_bubble(const PipelineShape& shape);

// The simulator's inputs, in arbitrary time units, indexed by global chunk (P·V entries).
struct ScheduleCosts {
  std::vector<double> forward;
  std::vector<double> backward;
  double latency = 0;  // added to a dependency that ends on another stage
};

// Costs f and b per stage, split evenly over its V chunks.
ScheduleCosts uniform_costs(const PipelineShape& shape, double forward_per_stage,
                            double backward_per_stage);

struct TimedAction {
  PipelineAction action;
  double start = 0;
  double end = 0;
};

struct StageTimes {
  std::vector<TimedAction> actions;  // in program order
  double busy = 0;                   // sum of the actions' costs
};

struct SimulatedStep {
  std::vector<StageTimes> stages;
  double makespan = 0;  // the latest end over all stages

  // 1 - busy / makespan of the stage.
  double bubble(int stage) const;
};

// Runs the programs on an idealized machine: an action starts when the stage's previous
// action has ended and every dependency has ended (plus the latency if it ran on another
// stage). Throws std::logic_error if a program is malformed (an action out of range or
// repeated) or the programs deadlock (no stage can go on while actions remain), naming
// the stuck stages and the action each cannot start.
SimulatedStep simulate_schedule(const PipelineShape& shape,
                                const std::vector<std::vector<PipelineAction>>& programs,
                                const ScheduleCosts& costs);
// The shape's own programs (stage_actions for every stage).
SimulatedStep simulate_schedule(const PipelineShape& shape, const ScheduleCosts& costs);

}  // namespace tandem
