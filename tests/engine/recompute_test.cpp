// --recompute (Note [activation recomputation] in model/transformer_passes.h): training is
// bit for bit the run that keeps every activation, data parallel and pipelined; the
// activations kept shrink by exactly what is no longer kept; the work run again is timed
// as backward spans named "recompute".
#include <gtest/gtest.h>

#include <cstring>

#include "engine/same_training.h"
#include "engine/trainer.h"
#include "model/model_ops.h"
#include "model/transformer.h"

namespace tandem {
namespace {

TrainConfig config(std::string_view model, Recompute recompute) {
  TrainConfig c;
  c.model = ModelSpec::parse(model);
  c.model.recompute = recompute;
  c.ranks = 2;
  c.batch = 4;
  c.steps = 4;
  c.accumulate = 2;
  c.sgd.weight_decay = 0.01f;
  c.verify = true;
  return c;
}

const char* const kModels[] = {"gpt:layers=3,dim=32,heads=2,seq=16",
                               "llama:layers=3,dim=32,heads=2,seq=16"};

TEST(RecomputeTest, DataParallelTrainingIsBitForBitTheRunThatKeepsEverything) {
  for (const char* model : kModels) {
    const TrainResult kept = train_local(config(model, Recompute::kNone));
    for (Recompute r : {Recompute::kFull, Recompute::kSelective}) {
      const TrainResult again = train_local(config(model, r));
      expect_same_training(kept, again, std::string(model) + " " + std::string(to_string(r)));
      EXPECT_LT(again.memory.at(0).state.activations, kept.memory.at(0).state.activations)
          << model << " " << to_string(r);
    }
  }
}

TEST(RecomputeTest, PipelinedTrainingIsBitForBitTheRunThatKeepsEverything) {
  for (const char* schedule : {"1f1b", "gpipe"}) {
    auto pipelined = [&](Recompute r) {
      // Several blocks per stage: a stage of one block holding one micro-batch keeps as
      // much as the replay that stands in for it.
      TrainConfig c = config("llama:layers=6,dim=32,heads=2,seq=16,vocab=64", r);
      c.accumulate = 1;
      c.pipeline.stages = 2;
      c.pipeline.micro_batches = 4;
      c.pipeline.schedule = parse_schedule(schedule);
      c.verify = false;  // stages hold different units
      return train_local(c);
    };
    const TrainResult kept = pipelined(Recompute::kNone);
    for (Recompute r : {Recompute::kFull, Recompute::kSelective}) {
      const TrainResult again = pipelined(r);
      expect_same_training(kept, again, std::string(schedule) + " " + std::string(to_string(r)));
      for (std::size_t rank = 0; rank < 2; ++rank) {
        EXPECT_LT(again.memory.at(rank).state.activations, kept.memory.at(rank).state.activations)
            << schedule << " " << to_string(r) << " rank " << rank;
      }
    }
  }
}

// Each rank, each step, each micro-batch: full replays a block's four forward spans,
// selective its attention once; backward spans of the block's unit, named "recompute".
TEST(RecomputeTest, TheWorkRunAgainIsTimedAsBackwardSpansOfEachBlock) {
  for (auto [r, per_block] : {std::pair{Recompute::kFull, 4}, std::pair{Recompute::kSelective, 1},
                              std::pair{Recompute::kNone, 0}}) {
    const TrainResult result = train_local(config(kModels[0], r));
    std::map<int, int> per_unit;
    std::map<int, double> flops;
    for (const Span& s : result.timeline.spans) {
      if (s.name != op_name(ModelOp::kRecompute)) continue;
      EXPECT_EQ(s.kind, SpanKind::kBackward);
      ++per_unit[s.tag];
      flops[s.tag] += s.flops;
    }
    const int expected = per_block * 2 /*ranks*/ * 4 /*steps*/ * 2 /*micro-batches*/;
    for (int unit = 1; unit <= 3; ++unit) {
      EXPECT_EQ(per_unit[unit], expected) << to_string(r) << " unit " << unit;
      EXPECT_EQ(flops[unit] > 0, per_block > 0) << to_string(r) << " unit " << unit;
    }
    EXPECT_EQ(per_unit.count(0) + per_unit.count(4), 0u) << "only blocks run again";
    EXPECT_EQ(result.spans_dropped, 0u) << to_string(r);
  }
}

// What each mode keeps, to the byte: selective drops every block's probabilities but the
// replay's one copy; full drops every block's tensors but the replay's one block.
TEST(RecomputeTest, TheActivationsKeptShrinkByExactlyWhatIsNoLongerKept) {
  ModelSpec spec = ModelSpec::parse("gpt:layers=4,dim=32,heads=2,seq=16");
  const int batch = 3;
  auto kept = [&](Recompute r) {
    spec.recompute = r;
    return Transformer(spec, batch, 1).activation_bytes();
  };
  const std::int64_t none = kept(Recompute::kNone), full = kept(Recompute::kFull),
                     selective = kept(Recompute::kSelective);
  const std::int64_t probs = 4ll * batch * 2 * 16 * 16;  // [B, H, T, T] floats
  EXPECT_EQ(none - selective, 3 * probs);                // 4 blocks' less the replay's
  const std::int64_t tokens = batch * 16, D = 32, F = 128;
  // ln1, qkv, atty, xmid, ln2 (7 D), four norm statistics, up and act (2 F), probabilities
  const std::int64_t block = 4 * (tokens * (7 * D + 4 + 2 * F)) + probs;
  EXPECT_EQ(none - full, 3 * block);
  // The memory estimate that refuses runs before they start follows the same order.
  auto estimated = [&](Recompute r) {
    spec.recompute = r;
    return Transformer::buffer_bytes(spec, batch);
  };
  EXPECT_LT(estimated(Recompute::kFull), estimated(Recompute::kSelective));
  EXPECT_EQ(estimated(Recompute::kNone) - estimated(Recompute::kSelective), 3 * probs);
}

}  // namespace
}  // namespace tandem
