// Unused parameters (Note [unused parameters] in ddp/reducer.cpp): with --layer-drop a
// block a micro-batch skips produces no gradient. Without --find-unused its bucket can
// never become ready and the step stops with one line naming it and the flag (every rank
// ends, none hangs); with it the bucket goes out with zeros for the skipped block, the
// replicas stay equal, and a block skipped on every step on every rank never moves.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "engine/trainer.h"
#include "model/transformer.h"

namespace tandem {
namespace {

TrainConfig config(double layer_drop, bool find_unused) {
  TrainConfig c;
  c.model = ModelSpec::parse("gpt:layers=3,dim=32,heads=2,seq=16");
  c.model.layer_drop = layer_drop;
  c.ranks = 2;
  c.batch = 4;
  c.steps = 4;
  c.reducer.plan.strategy = Strategy::parse("bucketed");
  c.reducer.plan.bucket_cap_bytes = 40'000;  // several buckets
  c.reducer.plan.first_bucket_cap_bytes = 10'000;
  c.reducer.find_unused = find_unused;
  c.verify = true;
  return c;
}

TEST(UnusedParamsTest, WithoutFindUnusedTheStepStopsNamingTheBucketAndTheFlag) {
  try {
    (void)train_local(config(0.5, false));
    ADD_FAILURE() << "a skipped block's bucket cannot become ready";
  } catch (const RuntimeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bucket"), std::string::npos) << what;
    EXPECT_NE(what.find("never became ready"), std::string::npos) << what;
    EXPECT_NE(what.find("--find-unused"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  }
}

TEST(UnusedParamsTest, WithFindUnusedReplicasStayEqualAndTrainingDiffersFromNoDrop) {
  const TrainResult dropped = train_local(config(0.5, true));  // --verify after every step
  const TrainResult full = train_local(config(0, false));
  ASSERT_EQ(dropped.final_params.size(), full.final_params.size());
  EXPECT_NE(std::memcmp(dropped.final_params.data(), full.final_params.data(),
                        4 * full.final_params.size()),
            0);
  for (const StepRecord& r : dropped.steps) EXPECT_TRUE(std::isfinite(r.loss));
}

TEST(UnusedParamsTest, ABlockSkippedEverywhereNeverMovesAndTheRestLearns) {
  TrainConfig c = config(1.0, true);  // every block skipped on every micro-batch and rank
  c.accumulate = 2;
  const TrainResult result = train_local(c);
  const std::vector<float> initial = Transformer(c.model, c.batch, c.seed).download_params();
  const ModelLayout layout(c.model);
  ASSERT_EQ(result.final_params.size(), initial.size());
  for (int u = 0; u < layout.units(); ++u) {
    std::size_t moved = 0;
    for (std::size_t i = layout.unit_begin(u); i < layout.unit_end(u); ++i) {
      moved += std::memcmp(&result.final_params[i], &initial[i], 4) != 0;
    }
    const bool block = u >= 1 && u <= 3;
    if (block) {
      EXPECT_EQ(moved, 0u) << "block " << u << " got a gradient although it never ran";
    } else {
      EXPECT_GT(moved, 0u) << "unit " << u << " should learn";
    }
  }
  // Skipped blocks record no compute: only the embedding, the head and the loss do.
  for (const Span& s : result.timeline.spans) {
    if (s.lane == Lane::kCompute &&
        (s.kind == SpanKind::kForward || s.kind == SpanKind::kBackward)) {
      EXPECT_TRUE(s.tag == 0 || s.tag >= 4) << "unit " << s.tag;
    }
  }
}

TEST(UnusedParamsTest, WhatCannotSkipIsRefusedNamingTheFlag) {
  TrainConfig mlp = config(0.5, true);
  mlp.model = ModelSpec::parse("mlp:4x32");
  mlp.model.layer_drop = 0.5;
  EXPECT_THROW(validate(mlp), UsageError);
  TrainConfig sharded = config(0.5, true);
  sharded.reducer.plan.strategy = Strategy::parse("fsdp");
  try {
    validate(sharded);
    ADD_FAILURE() << "fsdp accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--layer-drop"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem
