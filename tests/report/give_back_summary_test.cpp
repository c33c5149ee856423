// The train summary's giving-back figure: the "give back" spans of zero2 and fsdp
// (Note [giving back, timed] in ddp/sharded.cpp), per step, mean over ranks; none for a
// strategy that gives nothing back. Timelines from the simulator, whose give-backs cost
// exactly the device's give_back_s.
#include <gtest/gtest.h>

#include "report/train_report.h"
#include "simulate/round_cluster.h"

namespace tandem {
namespace {

TEST(GiveBackSummaryTest, IsTheGiveBackSpansPerStepMeanOverRanks) {
  Cluster cluster = testing::round_cluster(1, 2);
  cluster.device.give_back_s = 1e-4;
  for (const auto& [strategy, per_step] :
       {std::pair{"fsdp", 11}, std::pair{"zero2", 4}, std::pair{"bucketed", 0}}) {
    TrainConfig config;
    config.model = ModelSpec::parse("mlp:4x1024");
    config.ranks = 2;
    config.batch = 32;
    config.steps = 3;
    config.reducer.plan.strategy = Strategy::parse(strategy);
    const TrainResult r = simulate_training(config, {.cluster = cluster});
    const TrainSummary s = summarize_training(config, r, /*warmup=*/0);
    if (per_step == 0) {
      EXPECT_EQ(s.give_back_ms.count, 0u) << strategy;
      EXPECT_TRUE(train_summary_body(config, r, s)["give_back_ms"].is_null()) << strategy;
      continue;
    }
    EXPECT_EQ(s.give_back_ms.count, 3u) << strategy;
    EXPECT_NEAR(s.give_back_ms.median, per_step * 0.1, 1e-9) << strategy;
    EXPECT_NE(format_train_summary(config, r, s).find("giving back"), std::string::npos);
  }
}

}  // namespace
}  // namespace tandem
