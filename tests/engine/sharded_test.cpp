// Sharded data parallelism (ddp/sharded.h) on the local backend: every stage ends with
// the parameters of DDP's sequential strategy bit for bit, for even and uneven shards, and
// keeps the memory it promises.
#include "ddp/sharded.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "engine/trainer.h"
#include "model/rank_model.h"

namespace tandem {
namespace {

TrainConfig config(const std::string& model, std::string_view strategy, int ranks) {
  TrainConfig c;
  c.model = ModelSpec::parse(model);
  c.ranks = ranks;
  c.batch = model.starts_with("mlp") ? 8 : 2;
  c.steps = model.starts_with("mlp") ? 12 : 4;
  c.reducer.plan.strategy = Strategy::parse(strategy);
  c.sgd.weight_decay = 0.01f;  // the shard's SGD reads the parameters too
  c.verify = true;
  return c;
}

// A sharded run, named for failure messages.
struct Variant {
  const char* strategy;
  int prefetch = 1;
  bool reshard_after_forward = true;
};

const Variant kVariants[] = {{"zero1"},   {"zero2"},          {"fsdp", 0}, {"fsdp", 1},
                             {"fsdp", 2}, {"fsdp", 1, false}, {"fsdp", 64}};

std::string name(const Variant& v) {
  return std::string(v.strategy) + " prefetch " + std::to_string(v.prefetch) +
         (v.reshard_after_forward ? "" : " kept to backward");
}

void expect_every_variant_equals_sequential(const std::string& model, int ranks, int accumulate) {
  TrainConfig reference_config = config(model, "sequential", ranks);
  reference_config.accumulate = accumulate;
  const TrainResult reference = train_local(reference_config);
  ASSERT_EQ(reference.final_params.size(),
            static_cast<std::size_t>(reference_config.model.parameter_count()));
  for (const Variant& v : kVariants) {
    TrainConfig c = config(model, v.strategy, ranks);
    c.accumulate = accumulate;
    c.shard = {.prefetch = v.prefetch, .reshard_after_forward = v.reshard_after_forward};
    const TrainResult result = train_local(c);
    ASSERT_EQ(result.final_params.size(), reference.final_params.size()) << name(v);
    std::size_t differing = 0;
    for (std::size_t i = 0; i < reference.final_params.size(); ++i) {
      differing += std::memcmp(&result.final_params[i], &reference.final_params[i], 4) != 0;
    }
    EXPECT_EQ(differing, 0u) << model << ", " << ranks << " ranks, accumulate " << accumulate
                             << ": " << name(v) << " differs from sequential in " << differing
                             << " parameters";
    for (std::size_t i = 0; i < result.steps.size(); ++i) {
      EXPECT_EQ(result.steps[i].loss, reference.steps[i].loss) << name(v) << " step " << i;
    }
  }
}

// 3 ranks make every unit's shard uneven (padding), 1 rank makes the collectives trivial.
TEST(ShardedTest, MlpEndsBitwiseEqualToSequentialForOneToFourRanks) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    expect_every_variant_equals_sequential("mlp:4x50", ranks, 1);
  }
  expect_every_variant_equals_sequential("mlp:4x50", 3, 3);
}

// gpt's head reads the embedding's wte (tied) and adds to its gradient from the far end of
// backward; llama has no tie.
TEST(ShardedTest, TransformersEndBitwiseEqualToSequentialForOneToFourRanks) {
  for (const std::string model : {"gpt:layers=2,dim=16,heads=2,seq=6,vocab=29",
                                  "llama:layers=2,dim=16,heads=2,seq=6,vocab=29"}) {
    for (int ranks = 1; ranks <= 4; ++ranks)
      expect_every_variant_equals_sequential(model, ranks, 1);
    expect_every_variant_equals_sequential(model, 3, 2);
  }
}

TEST(ShardedTest, ShardsReallyExchangeGradients) {
  // A stage that never reduced would train each rank on its own shard of the data.
  TrainConfig two = config("mlp:4x50", "fsdp", 2);
  TrainConfig one = two;
  one.ranks = 1;
  EXPECT_NE(hash_floats(train_local(two).final_params), hash_floats(train_local(one).final_params));
}

// The bytes of units e..e+prefetch (distinct units) at their largest: what fsdp gathers at
// once, from the layout alone.
std::int64_t gathered_bound(const ModelLayout& layout, int prefetch) {
  const int n = layout.units();
  std::vector<int> order;  // the units read, event by event: forward, then backward
  std::vector<std::vector<int>> needs;
  for (int u = 0; u < n; ++u) needs.push_back(layout.units_read(u));
  for (int u = n - 1; u >= 0; --u) needs.push_back(layout.units_read(u));
  std::int64_t bound = 0;
  for (std::size_t e = 0; e < needs.size(); ++e) {
    std::set<int> units;
    for (std::size_t f = e; f <= std::min(e + static_cast<std::size_t>(prefetch), needs.size() - 1);
         ++f) {
      units.insert(needs[f].begin(), needs[f].end());
    }
    std::int64_t bytes = 0;
    for (int u : units) {
      bytes += static_cast<std::int64_t>((layout.unit(u).padded_end - layout.unit(u).begin) * 4);
    }
    bound = std::max(bound, bytes);
  }
  return bound;
}

TEST(ShardedTest, MemoryIsAccountedAsPromised) {
  for (const std::string model : {"mlp:6x64", "gpt:layers=3,dim=16,heads=2,seq=6,vocab=29"}) {
    const int ranks = 4;
    const TrainResult ddp = train_local(config(model, "sequential", ranks));
    ASSERT_EQ(ddp.memory.size(), static_cast<std::size_t>(ranks));
    const StateBytes replica = ddp.memory[0].state;
    const std::int64_t params = ModelSpec::parse(model).parameter_count() * 4;
    EXPECT_EQ(replica.params, params);
    EXPECT_EQ(replica.grads, params);
    EXPECT_EQ(replica.optimizer, params);
    EXPECT_EQ(replica.gathered_peak, 0);

    const ModelLayout layout(ModelSpec::parse(model), sharded_layout(ranks));
    // Padding: fewer than `ranks` elements per unit, shared out over the ranks.
    const std::int64_t padding = layout.units() * 4;
    for (int prefetch : {0, 1, 2}) {
      TrainConfig c = config(model, "fsdp", ranks);
      c.shard.prefetch = prefetch;
      const TrainResult fsdp = train_local(c);
      ASSERT_EQ(fsdp.memory.size(), static_cast<std::size_t>(ranks));
      for (const RankMemory& m : fsdp.memory) {
        EXPECT_LE(m.state.params, replica.params / ranks + padding) << model;
        EXPECT_LE(m.state.grads, replica.grads / ranks + padding) << model;
        EXPECT_LE(m.state.optimizer, replica.optimizer / ranks + padding) << model;
        EXPECT_EQ(m.state.gathered_peak, gathered_bound(layout, prefetch))
            << model << " prefetch " << prefetch;
        EXPECT_GT(m.state.grads_peak, 0);
        EXPECT_GT(m.peak_rss_bytes, 0);
        EXPECT_GT(m.steps_peak_rss_bytes, 0);
        EXPECT_LE(m.steps_peak_rss_bytes, m.peak_rss_bytes);
      }
    }
    const TrainResult zero1 = train_local(config(model, "zero1", ranks));
    std::int64_t padded = 0;
    for (int u = 0; u < layout.units(); ++u) {
      padded += static_cast<std::int64_t>((layout.unit(u).padded_end - layout.unit(u).begin) * 4);
    }
    EXPECT_EQ(zero1.memory[0].state.params, padded);
    EXPECT_LE(padded, params + padding);
    EXPECT_LE(zero1.memory[0].state.optimizer, replica.optimizer / ranks + padding);
    EXPECT_EQ(zero1.memory[0].state.gathered_peak, 0);
    EXPECT_EQ(zero1.memory[0].state.grads_peak, 0);  // zero1 keeps full gradients
    const TrainResult zero2 = train_local(config(model, "zero2", ranks));
    EXPECT_LE(zero2.memory[0].state.grads, replica.grads / ranks + padding);
    EXPECT_GT(zero2.memory[0].state.grads_peak, 0);
  }
}

TEST(ShardedTest, GathersAndReduceScattersAreTaggedWithTheirUnit) {
  TrainConfig c = config("mlp:4x50", "fsdp", 2);
  c.steps = 2;
  c.verify = false;
  const TrainResult result = train_local(c);
  std::set<int> gathered, reduced;
  for (const Span& s : result.timeline.spans) {
    if (s.step < 0 || s.lane != Lane::kComm) continue;
    EXPECT_TRUE(s.kind == SpanKind::kAllgather || s.kind == SpanKind::kReduceScatter);
    (s.kind == SpanKind::kAllgather ? gathered : reduced).insert(s.tag);
  }
  EXPECT_EQ(gathered, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(reduced, (std::set<int>{0, 1, 2, 3}));
}

// Note [giving back, timed]: every give-back of a step is a "give back" span on the idle
// lane, tagged with its unit: zero2 a unit's gradient once (after its reduce-scatter),
// fsdp its gradient and its parameters after each pass that released them (after the
// forward but for the last unit's, kept for its backward, and after the backward); zero1
// and a compute-only run give nothing back.
TEST(ShardedTest, EveryGiveBackOfAStepIsTimedWithItsUnit) {
  struct Case {
    const char* strategy;
    CommMode mode;
    std::map<int, int> per_unit;  // give-backs per (rank, step)
  };
  const Case cases[] = {{"zero1", CommMode::kOverlapped, {}},
                        {"zero2", CommMode::kOverlapped, {{0, 1}, {1, 1}, {2, 1}, {3, 1}}},
                        {"fsdp", CommMode::kOverlapped, {{0, 3}, {1, 3}, {2, 3}, {3, 2}}},
                        {"fsdp", CommMode::kOff, {}}};
  for (const Case& k : cases) {
    TrainConfig c = config("mlp:4x50", k.strategy, 2);
    c.steps = 2;
    c.verify = false;
    c.reducer.mode = k.mode;
    const TrainResult result = train_local(c);
    std::map<std::tuple<int, int>, std::map<int, int>> seen;  // (rank, step) -> unit -> count
    for (const Span& s : result.timeline.spans) {
      if (result.timeline.names->name(s.name) != "give back") continue;
      EXPECT_EQ(s.lane, Lane::kIdle) << k.strategy;
      EXPECT_EQ(s.kind, SpanKind::kMemory) << k.strategy;
      EXPECT_GE(s.step, 0) << k.strategy;
      ++seen[{s.rank, s.step}][s.tag];
    }
    if (k.per_unit.empty()) {
      EXPECT_TRUE(seen.empty()) << k.strategy;
      continue;
    }
    EXPECT_EQ(seen.size(), 4u) << k.strategy;  // 2 ranks x 2 steps
    for (const auto& [at, units] : seen) EXPECT_EQ(units, k.per_unit) << k.strategy;
  }
}

// Compute-only: no collective, and the overlapped scenario's optimizer work: rank 0
// updates its block of every unit (the first half of each padded unit) and nothing else.
TEST(ShardedTest, ComputeOnlyScenarioSendsNothingAndUpdatesTheRanksBlocks) {
  for (const char* strategy : {"zero1", "fsdp"}) {
    TrainConfig c = config("mlp:4x50", strategy, 2);
    c.reducer.mode = CommMode::kOff;
    c.steps = 1;
    const TrainResult result = train_local(c);
    for (const Span& s : result.timeline.spans) {
      if (s.step >= 0) {
        EXPECT_NE(s.lane, Lane::kComm) << strategy;
      }
    }
    TrainConfig none = c;
    none.sgd.lr = 1e-30f;  // the same initial parameters, (practically) not moved
    const TrainResult initial = train_local(none);
    const ModelLayout layout(c.model);  // packed, as final_params is
    const ModelLayout padded(c.model, sharded_layout(2));
    ASSERT_EQ(result.final_params.size(), layout.numel());
    int moved_in = 0, moved_out = 0;
    for (int u = 0; u < layout.units(); ++u) {
      const std::size_t half =
          (padded.unit(u).padded_end - padded.unit(u).begin) / 2;  // rank 0's block
      for (std::size_t i = layout.unit_begin(u); i < layout.unit_end(u); ++i) {
        const bool moved = result.final_params[i] != initial.final_params[i];
        ((i - layout.unit_begin(u)) < half ? moved_in : moved_out) += moved ? 1 : 0;
      }
    }
    EXPECT_GT(moved_in, 0) << strategy;
    EXPECT_EQ(moved_out, 0) << strategy;
  }
}

// The held-out loss is the full model's: fsdp gathers every unit for the pass and gives
// them back after it (it was once computed on the discarded, zero parameters: ln(vocab)),
// and training goes on as sequential's.
TEST(ShardedTest, ValidationLossIsTheFullModelsAsSequentials) {
  const std::string path = ::testing::TempDir() + "sharded_validation.txt";
  {
    std::ofstream text(path);
    for (int i = 0; i < 400; ++i) text << "unit " << i % 17 << " gathers, shard " << i % 5 << ". ";
  }
  auto run = [&](std::string_view strategy, int ranks) {
    TrainConfig c = config("gpt:layers=2,dim=16,heads=2,seq=8,vocab=256", strategy, ranks);
    c.data_path = path;
    c.eval_every = 2;
    return train_local(c);
  };
  for (const auto& [strategy, ranks] : {std::pair{"fsdp", 2}, {"fsdp", 3}, {"zero2", 2}}) {
    const TrainResult reference = run("sequential", ranks);
    const TrainResult result = run(strategy, ranks);
    ASSERT_EQ(result.steps.size(), reference.steps.size()) << strategy;
    int evaluated = 0;
    for (std::size_t i = 0; i < result.steps.size(); ++i) {
      const StepRecord& got = result.steps[i];
      const StepRecord& want = reference.steps[i];
      ASSERT_EQ(got.has_val_loss, want.has_val_loss) << strategy << " step " << got.step;
      if (!got.has_val_loss) continue;
      ++evaluated;
      EXPECT_EQ(got.val_loss, want.val_loss)
          << strategy << " " << ranks << " ranks, step " << got.step;
    }
    EXPECT_GE(evaluated, 2 * ranks) << strategy;
  }
  std::remove(path.c_str());
}

// What ShardedSync keeps its state with (RankModel::allocate_zeroed, copy, sgd_step), on
// the CPU model: zeroed arrays, exact copies, and the model's own SGD bit for bit.
TEST(ShardedTest, TheCpuModelKeepsAStrategysStateWithItsOwnSgd) {
  RankRecorder recorder(0, 0, /*enabled=*/false);
  ModelConfig model_config;
  model_config.spec = ModelSpec::parse("mlp:2x8");
  model_config.sgd = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
  const std::unique_ptr<RankModel> model = make_rank_model(model_config, recorder);
  const std::vector<float> initial = {0.5f, -1.25f, 3.0f, 0.0f, 7.5f};
  const std::vector<float> grads = {0.1f, 0.2f, -0.3f, 0.4f, -0.5f};
  std::unique_ptr<ModelArray> params = model->allocate_zeroed(initial.size());
  std::unique_ptr<ModelArray> grad = model->allocate_zeroed(initial.size());
  std::unique_ptr<ModelArray> velocity = model->allocate_zeroed(initial.size());
  ASSERT_EQ(velocity->span().size(), initial.size());
  for (float v : velocity->span()) EXPECT_EQ(v, 0.0f);
  model->copy(initial, params->span());
  model->copy(grads, grad->span());
  Sgd reference(model_config.sgd, initial.size());
  std::vector<float> want = initial;
  for (int step = 0; step < 3; ++step) {
    reference.step(want, grads, 0.5f);
    model->sgd_step(params->span(), grad->span(), velocity->span(), 0.5f);
  }
  EXPECT_EQ(std::memcmp(params->span().data(), want.data(), want.size() * sizeof(float)), 0);
}

TEST(ShardedTest, BadOptionsAreUsageErrors) {
  TrainConfig c = config("mlp:4x50", "fsdp", 2);
  c.shard.prefetch = -1;
  EXPECT_THROW(validate(c), UsageError);
  c.shard.prefetch = 65;
  EXPECT_THROW(validate(c), UsageError);
}

}  // namespace
}  // namespace tandem
