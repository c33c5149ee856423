// Pipeline schedules: the --schedule text, the shape rules, every stage's program (each
// action once, micro order per chunk, Megatron's orders), and the simulator (exact times,
// deadlocks, the textbook bubble).
#include "engine/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"

namespace tandem {
namespace {

PipelineShape shape(ScheduleKind kind, int p, int m, int v = 1) {
  return PipelineShape{.kind = kind, .stages = p, .chunks_per_stage = v, .micro_batches = m};
}

// Every shape the sweeps cover: P in {1,2,3,4,8}, M in {1,2,3,4,8,16}; interleaved with
// V in {2,3} and only the M that are multiples of P.
std::vector<PipelineShape> sweep() {
  std::vector<PipelineShape> shapes;
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 3, 4, 8, 16}) {
      shapes.push_back(shape(ScheduleKind::kGpipe, p, m));
      shapes.push_back(shape(ScheduleKind::k1F1B, p, m));
      if (m % p != 0) continue;
      for (int v : {2, 3}) shapes.push_back(shape(ScheduleKind::kInterleaved, p, m, v));
    }
  }
  return shapes;
}

std::string describe(const PipelineShape& s) {
  std::string kind(to_string(s.kind));
  return kind + " P=" + std::to_string(s.stages) + " V=" + std::to_string(s.chunks_per_stage) +
         " M=" + std::to_string(s.micro_batches);
}

std::vector<PipelineAction> parse_actions(const std::string& text) {
  // "F0 B0/1": the inverse of to_string, for writing expected programs by hand.
  std::vector<PipelineAction> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(pos, end - pos);
    PipelineAction a;
    a.kind = word[0] == 'F' ? PipelineAction::kForward : PipelineAction::kBackward;
    const std::size_t slash = word.find('/');
    a.micro = std::stoi(word.substr(1, slash - 1));
    a.chunk = slash == std::string::npos ? 0 : std::stoi(word.substr(slash + 1));
    out.push_back(a);
    pos = end + 1;
  }
  return out;
}

TEST(PipelineScheduleTest, ScheduleTextRoundTrips) {
  for (const char* text : {"gpipe", "1f1b", "interleaved:2", "interleaved:3", "interleaved:16"}) {
    EXPECT_EQ(to_string(parse_schedule(text)), text);
  }
  EXPECT_EQ(parse_schedule("gpipe").kind, ScheduleKind::kGpipe);
  EXPECT_EQ(parse_schedule("1f1b").kind, ScheduleKind::k1F1B);
  EXPECT_EQ(parse_schedule("1f1b").virtual_stages, 1);
  const ScheduleSpec spec = parse_schedule("interleaved:3");
  EXPECT_EQ(spec.kind, ScheduleKind::kInterleaved);
  EXPECT_EQ(spec.virtual_stages, 3);
}

TEST(PipelineScheduleTest, BadScheduleTextsNameTheFlag) {
  for (const char* text : {"interleaved", "interleaved:1", "interleaved:0", "interleaved:-2",
                           "interleaved:2x", "interleaved:", "zigzag", "1f1b:2", "GPIPE", ""}) {
    try {
      parse_schedule(text);
      ADD_FAILURE() << "'" << text << "' was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--schedule"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

TEST(PipelineScheduleTest, CheckShapeRefusesWhatCannotRun) {
  EXPECT_EQ(check_shape(shape(ScheduleKind::k1F1B, 4, 3)), "");
  EXPECT_EQ(check_shape(shape(ScheduleKind::kInterleaved, 4, 8, 2)), "");

  const std::string interleaved = check_shape(shape(ScheduleKind::kInterleaved, 4, 6, 2));
  EXPECT_NE(interleaved.find("multiple of the stages"), std::string::npos) << interleaved;
  EXPECT_NE(interleaved.find("Megatron"), std::string::npos) << interleaved;

  EXPECT_NE(check_shape(shape(ScheduleKind::k1F1B, 0, 4)).find("stages"), std::string::npos);
  EXPECT_NE(check_shape(shape(ScheduleKind::kGpipe, 2, 0)).find("micro-batches"),
            std::string::npos);
  EXPECT_NE(check_shape(shape(ScheduleKind::kInterleaved, 2, 2, 0)), "");
  EXPECT_NE(check_shape(shape(ScheduleKind::k1F1B, 2, 2, 2)), "");  // V is interleaved's
}

TEST(PipelineScheduleDeathTest, AnUncheckedShapeIsABrokenInvariant) {
  EXPECT_DEATH(stage_actions(shape(ScheduleKind::k1F1B, 0, 4), 0), "stages must be >= 1");
  EXPECT_DEATH(stage_actions(shape(ScheduleKind::k1F1B, 2, 4), 2), "stage < shape.stages");
}

TEST(PipelineScheduleTest, GlobalChunksInterleaveOverStages) {
  const PipelineShape s = shape(ScheduleKind::kInterleaved, 4, 8, 2);
  EXPECT_EQ(global_chunk(s, 0, 0), 0);
  EXPECT_EQ(global_chunk(s, 3, 0), 3);
  EXPECT_EQ(global_chunk(s, 1, 1), 5);
  EXPECT_EQ(global_chunk(shape(ScheduleKind::k1F1B, 4, 8), 2, 0), 2);
}

// Each (micro, chunk) forward and backward exactly once, and per chunk both in increasing
// micro order (Note [micro order]); the programs of all stages run without deadlock.
TEST(PipelineScheduleTest, EveryProgramRunsEachActionOnceInMicroOrder) {
  for (const PipelineShape& s : sweep()) {
    SCOPED_TRACE(describe(s));
    for (int stage = 0; stage < s.stages; ++stage) {
      SCOPED_TRACE("stage " + std::to_string(stage));
      const std::vector<PipelineAction> actions = stage_actions(s, stage);
      const int v = s.chunks_per_stage;
      ASSERT_EQ(actions.size(), std::size_t(2) * s.micro_batches * v);
      // next[kind][chunk]: the micro-batch that must come next.
      std::vector<std::vector<int>> next(2, std::vector<int>(v, 0));
      for (const PipelineAction& a : actions) {
        ASSERT_GE(a.chunk, 0);
        ASSERT_LT(a.chunk, v);
        int& expected = next[a.kind][a.chunk];
        ASSERT_EQ(a.micro, expected) << to_string(a) << " in " << to_string(actions);
        ++expected;
      }
      for (int kind = 0; kind < 2; ++kind) {
        for (int c = 0; c < v; ++c) EXPECT_EQ(next[kind][c], s.micro_batches);
      }
    }
    EXPECT_NO_THROW(simulate_schedule(s, uniform_costs(s, 1, 2)));
    EXPECT_NO_THROW(simulate_schedule(s, [&] {
      ScheduleCosts costs = uniform_costs(s, 1, 2);
      costs.latency = 0.25;
      return costs;
    }()));
  }
}

TEST(PipelineScheduleTest, OneStageOneFOneBIsGradientAccumulation) {
  EXPECT_EQ(to_string(stage_actions(shape(ScheduleKind::k1F1B, 1, 4), 0)),
            "F0 B0 F1 B1 F2 B2 F3 B3");
  EXPECT_EQ(to_string(stage_actions(shape(ScheduleKind::kGpipe, 1, 3), 0)), "F0 F1 F2 B0 B1 B2");
}

TEST(PipelineScheduleTest, OneFOneBWarmsUpByTheStagesBelow) {
  const PipelineShape s = shape(ScheduleKind::k1F1B, 4, 6);
  EXPECT_EQ(to_string(stage_actions(s, 0)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(to_string(stage_actions(s, 2)), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  EXPECT_EQ(to_string(stage_actions(s, 3)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // Fewer micro-batches than the warm-up: all forwards, then all backwards.
  EXPECT_EQ(to_string(stage_actions(shape(ScheduleKind::k1F1B, 4, 2), 0)), "F0 F1 B0 B1");
}

// Written out by hand from Megatron-LM's forward_backward_pipelining_with_interleaving
// (Note [interleaved order]): P = 2, V = 2, M = 4.
TEST(PipelineScheduleTest, InterleavedFollowsMegatron) {
  const PipelineShape s = shape(ScheduleKind::kInterleaved, 2, 4, 2);
  EXPECT_EQ(stage_actions(s, 0),
            parse_actions("F0 F1 F0/1 F1/1 F2 B0/1 F3 B1/1 F2/1 B0 F3/1 B1 B2/1 B3/1 B2 B3"));
  EXPECT_EQ(stage_actions(s, 1),
            parse_actions("F0 F1 F0/1 B0/1 F1/1 B1/1 F2 B0 F3 B1 F2/1 B2/1 F3/1 B3/1 B2 B3"));
  // M == P: Megatron runs every forward first, on every stage.
  const PipelineShape full = shape(ScheduleKind::kInterleaved, 2, 2, 2);
  EXPECT_EQ(to_string(stage_actions(full, 1)), "F0 F1 F0/1 F1/1 B0/1 B1/1 B0 B1");
}

TEST(PipelineScheduleTest, PeakInFlight) {
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 3, 4, 8, 16}) {
      for (int stage = 0; stage < p; ++stage) {
        SCOPED_TRACE("P=" + std::to_string(p) + " M=" + std::to_string(m) + " stage " +
                     std::to_string(stage));
        EXPECT_EQ(peak_in_flight(stage_actions(shape(ScheduleKind::k1F1B, p, m), stage)),
                  std::min(p - stage, m));
        EXPECT_EQ(peak_in_flight(stage_actions(shape(ScheduleKind::kGpipe, p, m), stage)), m);
      }
    }
  }
  EXPECT_EQ(peak_in_flight(parse_actions("F0 F0/1 B0/1 F1 B0 F1/1")), 2);
}

// ASTRA-sim style: times worked out by hand. 1f1b, P = 2, M = 2, forward 1, backward 2,
// latency 0.5 between stages.
TEST(PipelineScheduleTest, SimulatorTimesAreExact) {
  const PipelineShape s = shape(ScheduleKind::k1F1B, 2, 2);
  ScheduleCosts costs = uniform_costs(s, 1, 2);
  costs.latency = 0.5;
  const SimulatedStep step = simulate_schedule(s, costs);
  auto times = [&](int stage) {
    std::string text;
    for (const TimedAction& t : step.stages[stage].actions) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s[%g,%g] ", to_string(t.action).c_str(), t.start, t.end);
      text += buf;
    }
    return text;
  };
  EXPECT_EQ(times(0), "F0[0,1] F1[1,2] B0[5,7] B1[8,10] ");
  EXPECT_EQ(times(1), "F0[1.5,2.5] B0[2.5,4.5] F1[4.5,5.5] B1[5.5,7.5] ");
  EXPECT_EQ(step.makespan, 10);
  EXPECT_EQ(step.stages[0].busy, 6);
  EXPECT_DOUBLE_EQ(step.bubble(1), 0.4);
}

TEST(PipelineScheduleTest, SimulatorReportsADeadlock) {
  // Stage 0 wants B0 before F1, stage 1 wants F1 before B0: each waits for the other.
  const PipelineShape s = shape(ScheduleKind::k1F1B, 2, 2);
  const std::vector<std::vector<PipelineAction>> stuck = {parse_actions("F0 B0 F1 B1"),
                                                          parse_actions("F0 F1 B0 B1")};
  try {
    simulate_schedule(s, stuck, uniform_costs(s, 1, 2));
    ADD_FAILURE() << "no deadlock reported";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(),
                 "pipeline schedule deadlocks: stage 0 at B0 (step 1), "
                 "stage 1 at F1 (step 1)");
  }
  // A backward before its own forward cannot run either.
  EXPECT_THROW(simulate_schedule(s, {parse_actions("B0 F0 F1 B1"), stage_actions(s, 1)},
                                 uniform_costs(s, 1, 2)),
               std::logic_error);
  // Malformed programs: an action twice, one missing.
  EXPECT_THROW(simulate_schedule(s, {parse_actions("F0 F0 B0 B1"), stage_actions(s, 1)},
                                 uniform_costs(s, 1, 2)),
               std::logic_error);
  EXPECT_THROW(simulate_schedule(s, {parse_actions("F0 F1 B0"), stage_actions(s, 1)},
                                 uniform_costs(s, 1, 2)),
               std::logic_error);
}

// Uniform costs (forward 1, backward 2 per stage, split over the V chunks) and no latency:
// gpipe and 1f1b idle exactly the textbook fraction on every stage.
TEST(PipelineScheduleTest, SimulatedBubbleIsTheTextbookOne) {
  for (const PipelineShape& s : sweep()) {
    if (s.kind == ScheduleKind::kInterleaved) continue;
    SCOPED_TRACE(describe(s));
    const SimulatedStep step = simulate_schedule(s, uniform_costs(s, 1, 2));
    for (int stage = 0; stage < s.stages; ++stage) {
      EXPECT_NEAR(step.bubble(stage), textbook_bubble(s), 1e-9) << "stage " << stage;
    }
  }
}

// Interleaved, same costs: exactly (P-1)/(V·M+P-1) as well, on every stage (the brief
// for this component asked for 10%; Megatron's order reaches it exactly).
TEST(PipelineScheduleTest, SimulatedInterleavedBubbleIsTheTextbookOne) {
  for (const PipelineShape& s : sweep()) {
    if (s.kind != ScheduleKind::kInterleaved) continue;
    SCOPED_TRACE(describe(s));
    const SimulatedStep step = simulate_schedule(s, uniform_costs(s, 1, 2));
    for (int stage = 0; stage < s.stages; ++stage) {
      EXPECT_NEAR(step.bubble(stage), textbook_bubble(s), 1e-9) << "stage " << stage;
    }
  }
}

TEST(PipelineScheduleTest, TextbookBubble) {
  EXPECT_DOUBLE_EQ(textbook_bubble(shape(ScheduleKind::kGpipe, 4, 8)), 3.0 / 11);
  EXPECT_DOUBLE_EQ(textbook_bubble(shape(ScheduleKind::k1F1B, 4, 8)), 3.0 / 11);
  EXPECT_DOUBLE_EQ(textbook_bubble(shape(ScheduleKind::kInterleaved, 4, 8, 2)), 3.0 / 19);
  EXPECT_EQ(textbook_bubble(shape(ScheduleKind::k1F1B, 1, 8)), 0);
}

}  // namespace
}  // namespace tandem
