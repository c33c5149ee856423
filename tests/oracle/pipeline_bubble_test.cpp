// The pipeline bubble (analysis/pipeline_metrics.h) against its oracle: on the spans of a
// balanced schedule's simulation (engine/pipeline_schedule.h), timed exactly in
// nanoseconds, every stage's bubble is the textbook value.
#include "analysis/pipeline_metrics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/pipeline_schedule.h"

namespace tandem {
namespace {

// The bubble metric on the spans of a balanced schedule (the simulator's timings, in
// nanoseconds): each stage's bubble is the textbook value.
TEST(PipelineBubbleTest, BalancedSchedulesGiveTheTextbookBubble) {
  struct Shape {
    ScheduleKind kind;
    int stages, chunks, micro;
  };
  for (const Shape& s : {Shape{ScheduleKind::kGpipe, 4, 1, 8}, Shape{ScheduleKind::k1F1B, 4, 1, 8},
                         Shape{ScheduleKind::k1F1B, 2, 1, 3},
                         Shape{ScheduleKind::kInterleaved, 2, 2, 4},
                         Shape{ScheduleKind::kInterleaved, 4, 2, 8}}) {
    const PipelineShape shape{.kind = s.kind, .stages = s.stages, .chunks_per_stage = s.chunks,
                              .micro_batches = s.micro};
    const SimulatedStep sim = simulate_schedule(shape, uniform_costs(shape, 1.0, 2.0));
    Timeline timeline;
    // Two replicas of the pipeline, the second a step later: each is its own window.
    for (int replica = 0; replica < 2; ++replica) {
      for (int stage = 0; stage < s.stages; ++stage) {
        for (const TimedAction& t : sim.stages[static_cast<std::size_t>(stage)].actions) {
          const bool forward = t.action.kind == PipelineAction::kForward;
          timeline.spans.push_back(
              {.rank = replica * s.stages + stage,
               .lane = Lane::kCompute,
               .kind = forward ? SpanKind::kForward : SpanKind::kBackward,
               .step = 0,
               .start_ns = static_cast<std::int64_t>(std::llround(t.start * 1e6)) + replica * 7,
               .end_ns = static_cast<std::int64_t>(std::llround(t.end * 1e6)) + replica * 7});
        }
      }
    }
    const std::vector<StageBubble> bubbles = pipeline_bubbles(timeline, s.stages);
    ASSERT_EQ(bubbles.size(), static_cast<std::size_t>(2 * s.stages));
    for (const StageBubble& b : bubbles) {
      EXPECT_NEAR(b.bubble(), textbook_bubble(shape), 1e-6)
          << "rank " << b.rank << " of " << to_string(ScheduleSpec{s.kind, s.chunks}) << " P="
          << s.stages << " M=" << s.micro;
    }
  }
}

}  // namespace
}  // namespace tandem
