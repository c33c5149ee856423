// tandem simulate with --tensor T (Note [tensor-parallel passes] in simulator.cpp): the
// simulated step issues the collectives the split model issues (the engine's own run of
// the same configuration, in the same test, is the reference: per unit, their kinds and
// bytes), in place on the critical path, and each rank holds the memory the engine says.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "engine/trainer.h"
#include "model/model_ops.h"
#include "model/transformer.h"
#include "simulate/round_cluster.h"
#include "simulate/simulator.h"

namespace tandem {
namespace {

using testing::round_cluster;

const char* const kModels[] = {"gpt:layers=2,dim=32,heads=4,seq=16,vocab=64",
                               "llama:layers=2,dim=32,heads=4,seq=16,hidden=64,vocab=64"};

// mode 0: plain tensor parallelism, 1: sequence-parallel, 2: and --tp-overlap.
TrainConfig tensor_config(const char* model, int tensor, int ranks, int mode,
                          const std::string& strategy = "bucketed") {
  TrainConfig c;
  c.model = ModelSpec::parse(model);
  c.model.tensor = tensor;
  c.model.sequence_parallel = mode >= 1;
  c.model.tp_overlap = mode == 2;
  c.ranks = ranks;
  c.batch = 4;
  c.steps = 2;
  c.reducer.plan.strategy = Strategy::parse(strategy);
  return c;
}

std::string describe(const TrainConfig& c) {
  return c.model.text + " --tensor " + std::to_string(c.model.tensor) + " --ranks " +
         std::to_string(c.ranks) + (c.model.sequence_parallel ? " --sequence-parallel" : "") +
         (c.model.tp_overlap ? " --tp-overlap" : "") + " " + c.reducer.plan.strategy.to_string();
}

// Rank 0's tensor-parallel comm spans of step 1: (unit, kind, bytes) -> how many.
std::map<std::tuple<int, SpanKind, std::int64_t>, int> tensor_spans(const TrainResult& r) {
  std::map<std::tuple<int, SpanKind, std::int64_t>, int> out;
  for (const Span& s : r.timeline.spans) {
    if (s.rank == 0 && s.step == 1 && s.lane == Lane::kComm &&
        s.name == op_name(ModelOp::kTensor)) {
      ++out[{s.tag, s.kind, s.bytes}];
    }
  }
  return out;
}

// Rank 0's FLOPs of step 1 per (pass, unit).
std::map<std::pair<SpanKind, int>, double> flops_per_pass(const TrainResult& r) {
  std::map<std::pair<SpanKind, int>, double> out;
  for (const Span& s : r.timeline.spans) {
    if (s.rank == 0 && s.step == 1 && s.lane == Lane::kCompute) out[{s.kind, s.tag}] += s.flops;
  }
  return out;
}

TEST(SimulateTensorTest, EveryUnitIssuesTheCollectivesTheEngineIssues) {
  for (const char* model : kModels) {
    for (const auto& [tensor, ranks] : {std::pair{2, 2}, {2, 4}, {4, 4}}) {
      for (int mode = 0; mode < 3; ++mode) {
        TrainConfig c = tensor_config(model, tensor, ranks, mode);
        const std::string what = describe(c);
        const TrainResult measured = train_local(c);
        const TrainResult simulated = simulate_training(c, {.cluster = round_cluster(1, 8)});
        const auto want = tensor_spans(measured);
        ASSERT_FALSE(want.empty()) << what;
        EXPECT_EQ(tensor_spans(simulated), want) << what;
        // What a rank moves per step: its tensor group's collectives and ring sends, and
        // the replicas' gradient buckets.
        EXPECT_EQ(simulated.bytes_per_step, measured.bytes_per_step) << what;
        // The split passes' FLOPs, unit by unit.
        const auto sim_flops = flops_per_pass(simulated);
        for (const auto& [key, flops] : flops_per_pass(measured)) {
          EXPECT_NEAR(sim_flops.count(key) ? sim_flops.at(key) : -1, flops, 1e-6 * flops + 1e-9)
              << what << " pass " << static_cast<int>(key.first) << " unit " << key.second;
        }
      }
    }
  }
}

// 2 x 2 x 1: a pipeline of two stages of tensor groups. Each stage's units issue their
// group's collectives in every micro-batch; the activations move between the same
// tensor-parallel positions of the two stages.
TEST(SimulateTensorTest, PipelineStagesOfTensorGroupsIssueTheEnginesCollectives) {
  for (int mode = 0; mode < 3; ++mode) {
    TrainConfig c = tensor_config(kModels[0], 2, 4, mode);
    c.pipeline.stages = 2;
    c.pipeline.micro_batches = 2;
    const std::string what = describe(c) + " --pipeline 2";
    const TrainResult measured = train_local(c);
    const TrainResult simulated = simulate_training(c, {.cluster = round_cluster(1, 8)});
    EXPECT_EQ(tensor_spans(simulated), tensor_spans(measured)) << what;
    EXPECT_EQ(simulated.bytes_per_step, measured.bytes_per_step) << what;
    for (std::size_t r = 0; r < measured.memory.size(); ++r) {
      EXPECT_EQ(simulated.memory[r].state.params, measured.memory[r].state.params) << what << r;
    }
  }
}

TEST(SimulateTensorTest, RecomputationRepeatsTheForwardsCollectivesAsTheEngineDoes) {
  for (const Recompute r : {Recompute::kFull, Recompute::kSelective}) {
    for (int mode = 0; mode < 3; ++mode) {
      TrainConfig c = tensor_config(kModels[0], 2, 2, mode);
      c.model.recompute = r;
      const std::string what = describe(c) + " --recompute " + std::string(to_string(r));
      const TrainResult measured = train_local(c);
      const TrainResult simulated = simulate_training(c, {.cluster = round_cluster(1, 8)});
      EXPECT_EQ(tensor_spans(simulated), tensor_spans(measured)) << what;
      EXPECT_EQ(simulated.bytes_per_step, measured.bytes_per_step) << what;
    }
  }
}

// Each rank's parameters, gradients and optimizer state are its shard's, as the engine
// accounts them, and its activations what the split model allocates (sequence parallelism
// shrinks them).
TEST(SimulateTensorTest, MemoryPerRankIsTheEnginesAccounting) {
  for (const char* model : kModels) {
    for (const std::string strategy : {"bucketed", "zero1", "fsdp"}) {
      for (int mode = 0; mode < 2; ++mode) {
        TrainConfig c = tensor_config(model, 2, 4, mode, strategy);
        const std::string what = describe(c);
        const TrainResult measured = train_local(c);
        const TrainResult simulated = simulate_training(c, {.cluster = round_cluster(1, 8)});
        ASSERT_EQ(simulated.memory.size(), measured.memory.size()) << what;
        for (std::size_t r = 0; r < measured.memory.size(); ++r) {
          const StateBytes& want = measured.memory[r].state;
          const StateBytes& got = simulated.memory[r].state;
          EXPECT_EQ(got.params, want.params) << what << " rank " << r;
          EXPECT_EQ(got.grads, want.grads) << what << " rank " << r;
          EXPECT_EQ(got.optimizer, want.optimizer) << what << " rank " << r;
          // Activations: what the split model allocates (the formula train checks memory
          // with), which holds the activation slots the engine reports and its scratch.
          EXPECT_EQ(got.activations, Transformer::buffer_bytes(c.model, c.batch)) << what;
          EXPECT_GE(got.activations, want.activations) << what << " rank " << r;
        }
        if (mode == 1) {
          TrainConfig plain = c;
          plain.model.sequence_parallel = false;
          EXPECT_LT(simulated.memory[0].state.activations,
                    simulate_training(plain, {.cluster = round_cluster(1, 8)})
                        .memory[0]
                        .state.activations)
              << what;
        }
        // A tensor-parallel rank holds its shard: under the unsplit model's replica.
        const auto whole = 4 * ModelSpec::parse(model).parameter_count();
        if (strategy == "bucketed") {
          EXPECT_EQ(simulated.memory[0].state.params, 4 * c.model.rank_parameter_count()) << what;
          EXPECT_LT(simulated.memory[0].state.params, whole) << what;
        }
      }
    }
  }
}

// Plain tensor parallelism, one replica, no contention: every collective of the passes
// is waited for in place, so a step is exactly its compute plus its collectives, one
// after the other (its replica's gradient is averaged over one rank: no time).
TEST(SimulateTensorTest, InPlaceCollectivesAreOnTheCriticalPath) {
  for (int mode = 0; mode < 2; ++mode) {
    TrainConfig c = tensor_config(kModels[0], 2, 2, mode);
    c.steps = 1;
    const TrainResult r = simulate_training(c, {.cluster = round_cluster(1, 8)});
    std::int64_t compute = 0, comm = 0, start = INT64_MAX, end = 0;
    for (const Span& s : r.timeline.spans) {
      if (s.rank != 0) continue;
      if (s.lane == Lane::kCompute) compute += s.end_ns - s.start_ns;
      if (s.lane == Lane::kComm) comm += s.end_ns - s.start_ns;
      if (s.lane != Lane::kWait) {
        start = std::min(start, s.start_ns);
        end = std::max(end, s.end_ns);
      }
    }
    ASSERT_GT(comm, 0);
    // Nanosecond rounding of each span.
    const auto spans = static_cast<std::int64_t>(r.timeline.spans.size());
    EXPECT_NEAR(static_cast<double>(end - start), static_cast<double>(compute + comm),
                static_cast<double>(spans))
        << mode;
    // Each collective priced on the group's node: a ring of 2 at 10 GB/s.
    const std::int64_t E = 4LL * c.batch * c.model.transformer.seq * c.model.transformer.dim;
    for (const Span& s : r.timeline.spans) {
      if (s.lane != Lane::kComm || s.bytes != E) continue;
      const double ring = s.kind == SpanKind::kAllreduce ? 2.0 : 1.0;
      EXPECT_NEAR(static_cast<double>(s.end_ns - s.start_ns),
                  1e9 * (ring * 0.5 * static_cast<double>(E) / 10e9 + ring * 1e-6), 1.0);
    }
  }
}
// --tp-overlap: the gathers and reduce-scatters of the blocks, the embedding and the head
// are ring steps issued before the work they overlap, and while one moves the group computes.
TEST(SimulateTensorTest, OverlappedRingStepsRunBesideTheirProducts) {
  TrainConfig c = tensor_config(kModels[0], 4, 4, 2);
  const TrainResult r = simulate_training(c, {.cluster = round_cluster(1, 8)});
  const int L = c.model.transformer.layers;
  int sends = 0, overlapped = 0;
  std::vector<const Span*> compute;
  for (const Span& s : r.timeline.spans) {
    if (s.rank == 0 && s.step == 1 && s.lane == Lane::kCompute) compute.push_back(&s);
  }
  for (const Span& s : r.timeline.spans) {
    if (s.rank != 0 || s.step != 1 || s.kind != SpanKind::kSend) continue;
    ++sends;
    for (const Span* work : compute) {
      if (work->tag == s.tag && work->start_ns < s.end_ns && work->end_ns > s.start_ns) {
        ++overlapped;
        break;
      }
    }
  }
  EXPECT_EQ(sends, (L * 10 + 5) * 3);  // the blocks', the embedding's and the head's rings
  EXPECT_EQ(overlapped, sends);
}

// The outer ranks are a tensor group's strides (Note [rank order]): with 2 x 4 ranks on
// two nodes of 4, every tensor group is inside a node and the replicas' gradient ring
// spans both nodes, priced as such.
TEST(SimulateTensorTest, TensorGroupsAreInnermostAndTheReplicasRingSpansTheNodes) {
  TrainConfig c = tensor_config(kModels[0], 2, 8, 0);
  const Cluster cluster = round_cluster(2, 4);
  const TrainResult r = simulate_training(c, {.cluster = cluster});
  ASSERT_EQ(r.buckets.size(), 1U);
  for (const Span& s : r.timeline.spans) {
    if (s.lane != Lane::kComm || s.name == op_name(ModelOp::kTensor)) continue;
    // Ranks 0, 2 on node 0 and 4, 6 on node 1: a ring of 2 in each node, then 2 nodes.
    const double S = static_cast<double>(s.bytes);
    const double want =
        2.0 * 0.5 * S / 10e9 + 2 * 1e-6 + 2.0 * 0.5 * (S / 2) / (2 * 1e9 / 4) + 2 * 10e-6;
    EXPECT_NEAR(static_cast<double>(s.end_ns - s.start_ns), 1e9 * want, 1.0);
  }
  EXPECT_EQ(r.memory.size(), 8U);
  EXPECT_EQ(r.timeline.ranks, 8);
}

}  // namespace
}  // namespace tandem
