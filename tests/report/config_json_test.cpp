// summary.json's "config" read back (calibration reads measured runs this way): every
// field that shapes a step survives the round trip.
#include <gtest/gtest.h>

#include "core/error.h"
#include "report/train_report.h"

namespace tandem {
namespace {

TEST(TrainConfigJsonTest, ReadsBackWhatShapesAStep) {
  TrainConfig c;
  c.model = ModelSpec::parse("gpt:layers=2,dim=64,heads=4,seq=16");
  c.ranks = 4;
  c.batch = 12;
  c.reducer.plan.strategy = Strategy::parse("fsdp");
  c.shard = {.prefetch = 3, .reshard_after_forward = false};
  c.reducer.plan.bucket_cap_bytes = 1 << 22;
  c.precision = Precision::kBf16;
  c.pipeline.micro_batches = 3;
  TrainConfig back = train_config_from_json(train_config_json(c, {}), "x");
  EXPECT_EQ(back.model.text, c.model.text);
  EXPECT_EQ(back.ranks, 4);
  EXPECT_EQ(back.batch, 12);
  EXPECT_EQ(back.reducer.plan.strategy.to_string(), "fsdp");
  EXPECT_EQ(back.shard.prefetch, 3);
  EXPECT_FALSE(back.shard.reshard_after_forward);
  EXPECT_EQ(back.reducer.plan.bucket_cap_bytes, 1 << 22);
  EXPECT_EQ(back.precision, Precision::kBf16);
  EXPECT_EQ(micro_batches(back), 3);
  EXPECT_FALSE(back.link.enabled());
  // An emulated link exactly (a replay divides its wire time).
  c.link = LinkModel::parse("2.5GB/s,17us");
  back = train_config_from_json(train_config_json(c, {}), "x");
  EXPECT_EQ(back.link.bandwidth_Bps, 2.5e9);
  EXPECT_EQ(back.link.latency_ns, 17'000);

  c = TrainConfig{};
  c.model = ModelSpec::parse("mlp:4x64");
  c.ranks = 4;
  c.pipeline.stages = 2;
  c.pipeline.schedule = parse_schedule("gpipe");
  c.pipeline.micro_batches = 4;
  c.accumulate = 1;
  back = train_config_from_json(train_config_json(c, {}), "x");
  EXPECT_EQ(back.pipeline.stages, 2);
  EXPECT_EQ(to_string(back.pipeline.schedule), "gpipe");
  EXPECT_EQ(micro_batches(back), 4);

  nlohmann::json broken = train_config_json(c, {});
  broken.erase("strategy");
  EXPECT_THROW(train_config_from_json(broken, "runs/a/summary.json"), UsageError);
  broken = train_config_json(c, {});
  broken["model"] = "mlp:nope";
  try {
    (void)train_config_from_json(broken, "runs/a/summary.json");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with("runs/a/summary.json")) << e.what();
  }
}

}  // namespace
}  // namespace tandem
