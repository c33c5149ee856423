// Tensor parallelism (--tensor; Note [tensor-parallel layout] in model/layout.cpp, Note
// [rank order] in engine/tensor_parallel.h): the shards are slices of the unsplit model,
// and training split T ways, alone or composed with data parallelism, sharded data
// parallelism and pipelines, is the unsplit model's training to rounding (the split sums
// of the row-parallel products, the embedding and the parallel cross-entropy add in
// another order; nothing else differs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/trainer.h"
#include "model/layout.h"
#include "model/model_ops.h"
#include "model/transformer.h"

namespace tandem {
namespace {

const char* const kModels[] = {"gpt:layers=2,dim=32,heads=4,seq=16,vocab=64",
                               "llama:layers=2,dim=32,heads=4,seq=16,hidden=64,vocab=64"};

ModelSpec split_spec(const char* model, int tensor) {
  ModelSpec spec = ModelSpec::parse(model);
  spec.tensor = tensor;
  return spec;
}

// Rank r's initial shards, for every r.
std::vector<std::vector<float>> initial_shards(const ModelSpec& spec, std::uint64_t seed) {
  std::vector<std::vector<float>> shards;
  for (int r = 0; r < spec.tensor; ++r) {
    const ModelLayout layout(spec, {.tensor_rank = r});
    std::vector<float> flat(layout.numel());
    layout.initialize(flat, seed);
    shards.push_back(std::move(flat));
  }
  return shards;
}

TEST(TensorLayoutTest, ShardsAreSlicesOfTheUnsplitModelAndJoinBackToIt) {
  for (const char* model : kModels) {
    const ModelLayout whole(ModelSpec::parse(model));
    std::vector<float> full(whole.numel());
    whole.initialize(full, 7);
    for (int t : {2, 4}) {
      const ModelSpec spec = split_spec(model, t);
      const ModelLayout layout(spec);
      EXPECT_EQ(static_cast<std::int64_t>(layout.numel()), spec.rank_parameter_count()) << model;
      EXPECT_LT(layout.numel(), whole.numel()) << model;
      const std::vector<std::vector<float>> shards = initial_shards(spec, 7);
      EXPECT_EQ(layout.unshard(shards), full) << model << " split " << t;
      // qkv's q, k and v are each cut by heads: rank r's first q column of row 0 is the
      // whole's column r D/t, its first k column the whole's D + r D/t.
      const int D = spec.transformer.dim, W = D / t;
      const ParamInfo& qkv = layout.param("h0.attn.qkv.weight");
      const ParamInfo& whole_qkv = whole.param("h0.attn.qkv.weight");
      EXPECT_EQ(qkv.shape, (std::vector<int>{D, 3 * W}));
      for (int r = 0; r < t; ++r) {
        const float* mine = shards[static_cast<std::size_t>(r)].data() + qkv.offset;
        const float* all = full.data() + whole_qkv.offset;
        EXPECT_EQ(mine[0], all[r * W]) << model;
        EXPECT_EQ(mine[W], all[D + r * W]) << model;
        EXPECT_EQ(mine[3 * W], all[3 * D + r * W]) << model;  // row 1
      }
      // The vocabulary: rank r holds rows [r V/t, (r + 1) V/t) of wte.
      const ParamInfo& wte = layout.param("wte");
      EXPECT_EQ(wte.shape, (std::vector<int>{spec.transformer.vocab / t, D}));
      EXPECT_EQ(shards[1][wte.offset], full[whole.param("wte").offset + wte.numel]);
    }
  }
}

TrainConfig config(const char* model, int ranks, int tensor) {
  TrainConfig c;
  c.model = split_spec(model, tensor);
  c.ranks = ranks;
  c.batch = 4;
  c.steps = 4;
  c.sgd.momentum = 0.9f;
  c.sgd.weight_decay = 0.01f;
  c.seed = 3;
  return c;
}

// The unsplit model's training to rounding: every loss, and the final parameters (the
// first replica's, joined from its tensor group) by their relative distance.
void expect_same_to_rounding(const TrainResult& whole, const TrainResult& split,
                             const std::string& what) {
  ASSERT_EQ(whole.final_params.size(), split.final_params.size()) << what;
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < whole.final_params.size(); ++i) {
    const double d = static_cast<double>(whole.final_params[i]) - split.final_params[i];
    diff += d * d;
    norm += static_cast<double>(whole.final_params[i]) * whole.final_params[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-5) << what << ": the final parameters";
  EXPECT_GT(diff, 0.0) << what << ": bit for bit; the split sums were expected to round apart";
  auto losses = [](const TrainResult& r) {
    std::vector<float> out;
    for (const StepRecord& s : r.steps) {
      if (s.has_loss && s.rank == 0) out.push_back(s.loss);
    }
    return out;
  };
  const std::vector<float> a = losses(whole), b = losses(split);
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-5 * std::abs(a[i])) << what << ", step " << i;
  }
}

TEST(TensorTrainTest, SplitTwoAndFourWaysIsTheUnsplitModelsTraining) {
  for (const char* model : kModels) {
    const TrainResult whole = train_local(config(model, 1, 1));
    for (int t : {2, 4}) {
      for (int mode = 0; mode < 3; ++mode) {  // plain, sequence-parallel, and overlapped
        TrainConfig c = config(model, t, t);
        c.model.sequence_parallel = mode >= 1;
        c.model.tp_overlap = mode == 2;
        const TrainResult split = train_local(c);
        const std::string what = std::string(model) + " --tensor " + std::to_string(t) +
                                 (mode >= 1 ? " --sequence-parallel" : "") +
                                 (mode == 2 ? " --tp-overlap" : "");
        expect_same_to_rounding(whole, split, what);
        // Every tensor rank of a step reports the same loss (the parallel cross-entropy's).
        for (const StepRecord& s : split.steps) {
          EXPECT_EQ(s.loss, split.steps.at(static_cast<std::size_t>(s.step * t)).loss) << what;
        }
      }
    }
  }
}

TEST(TensorTrainTest, RecomputationAndMicroBatchesSplitAlike) {
  for (const char* model : kModels) {
    for (Recompute r : {Recompute::kFull, Recompute::kSelective}) {
      TrainConfig c = config(model, 1, 1);
      c.model.recompute = r;
      c.accumulate = 2;
      const TrainResult whole = train_local(c);
      c.model.tensor = 2;
      c.ranks = 2;
      for (int mode = 0; mode < 3; ++mode) {
        c.model.sequence_parallel = mode >= 1;
        c.model.tp_overlap = mode == 2;
        expect_same_to_rounding(whole, train_local(c),
                                std::string(model) + " recompute " + std::string(to_string(r)) +
                                    (mode >= 1 ? " --sequence-parallel" : "") +
                                    (mode == 2 ? " --tp-overlap" : ""));
      }
    }
  }
}

// Note [sequence parallelism]: what a block keeps between its products shrinks T times;
// the heads' and the MLP's tensors were split already.
TEST(TensorTrainTest, SequenceParallelismKeepsTheDWideActivationsOfItsTokensOnly) {
  const ModelSpec whole = ModelSpec::parse(kModels[0]);
  const int batch = 4;
  auto kept = [&](int t, bool sequence) {
    ModelSpec spec = whole;
    spec.tensor = t;
    spec.sequence_parallel = sequence;
    return Transformer(spec, batch, 1, {.tensor_rank = t - 1}).activation_bytes();
  };
  const std::int64_t N = batch * whole.transformer.seq, D = whole.transformer.dim;
  const std::int64_t L = whole.transformer.layers;
  // Per token: the L + 1 residual streams, and per block ln1, xmid, ln2 (D each) and the
  // norms' four statistics; the final norm's D and two.
  const std::int64_t d_wide = N * ((L + 1) * D + L * (3 * D + 4) + D + 2) * 4;
  EXPECT_EQ(kept(2, false) - kept(2, true), d_wide / 2);
  EXPECT_EQ(kept(4, false) - kept(4, true), d_wide * 3 / 4);
}

TEST(TensorTrainTest, ComposesWithDataParallelStrategies) {
  for (const char* strategy : {"bucketed", "zero2", "fsdp"}) {
    const char* model = kModels[0];
    TrainConfig c = config(model, 2, 1);
    c.reducer.plan.strategy = Strategy::parse(strategy);
    c.verify = true;  // the replicas of each tensor position stay equal
    const TrainResult whole = train_local(c);
    c.model.tensor = 2;
    c.ranks = 4;  // 2 tensor x 2 replicas
    expect_same_to_rounding(whole, train_local(c), std::string("--tensor 2 x ") + strategy);
    c.model.sequence_parallel = true;  // the norms' gradients summed before the buckets
    expect_same_to_rounding(whole, train_local(c),
                            std::string("--tensor 2 --sequence-parallel x ") + strategy);
    c.model.tp_overlap = true;
    expect_same_to_rounding(
        whole, train_local(c),
        std::string("--tensor 2 --sequence-parallel --tp-overlap x ") + strategy);
  }
}

TEST(TensorTrainTest, ComposesWithPipelinesAndDataParallelism) {
  for (const char* schedule : {"1f1b", "interleaved:2"}) {
    for (int replicas : {1, 2}) {
      TrainConfig c =
          config("llama:layers=4,dim=32,heads=4,seq=16,hidden=64,vocab=64", 2 * replicas, 1);
      c.pipeline.stages = 2;
      c.pipeline.micro_batches = 4;
      c.pipeline.schedule = parse_schedule(schedule);
      const TrainResult whole = train_local(c);
      c.model.tensor = 2;
      c.ranks = 4 * replicas;  // 2 tensor x 2 stages x replicas
      expect_same_to_rounding(whole, train_local(c),
                              std::string(schedule) + ", replicas " + std::to_string(replicas));
      c.model.sequence_parallel = true;  // stages send their tokens' activations
      expect_same_to_rounding(whole, train_local(c),
                              std::string(schedule) + ", replicas " + std::to_string(replicas) +
                                  ", --sequence-parallel");
      c.model.tp_overlap = true;  // ring transfers beside the stages' point to point
      expect_same_to_rounding(
          whole, train_local(c),
          std::string(schedule) + ", replicas " + std::to_string(replicas) + ", --tp-overlap");
    }
  }
}

// Per micro-batch, forward: the embedding's sum (N x D), two per block, the loss's row
// maxima (gathered, N per rank) and its sums (2N); backward: the head's and two per
// block's input gradients (N x D).
std::int64_t tensor_bytes_per_micro_batch(const ModelSpec& spec, int rows) {
  const std::int64_t N = static_cast<std::int64_t>(rows) * spec.transformer.seq;
  const std::int64_t D = spec.transformer.dim, L = spec.transformer.layers;
  return 4 * (N * D * (1 + 2 * L) + N * spec.tensor + 2 * N + N * D * (1 + 2 * L));
}

// With sequence parallelism: forward, the embedding's reduce-scatter, per block two
// all-gathers and two reduce-scatters, the head's gather and the loss's; backward, the
// head's gather and reduce-scatter, per block two gathers of the output gradient, two of
// the norms' outputs and two reduce-scatters, the embedding's gather (each N x D, counted
// whole), and the norms' gradients (2D each, gpt).
std::int64_t sequence_bytes_per_micro_batch(const ModelSpec& spec, int rows) {
  const std::int64_t N = static_cast<std::int64_t>(rows) * spec.transformer.seq;
  const std::int64_t D = spec.transformer.dim, L = spec.transformer.layers;
  return 4 * (N * D * (1 + 4 * L + 1) + N * spec.tensor + 2 * N + N * D * (2 + 6 * L + 1) +
              2 * D * (1 + 2 * L));
}

// With --tp-overlap each block's four gathers and reduce-scatters of forward and six of
// backward, the embedding's two and the head's three are T - 1 ring sends of n = N / T
// tokens each (counted where sent); the loss's and the norms' as with sequence
// parallelism.
std::int64_t overlap_bytes_per_micro_batch(const ModelSpec& spec, int rows) {
  const std::int64_t N = static_cast<std::int64_t>(rows) * spec.transformer.seq;
  const std::int64_t D = spec.transformer.dim, L = spec.transformer.layers, T = spec.tensor;
  return 4 * (N * T + 2 * N + 2 * D + (10 * L + 5) * (T - 1) * (N / T) * D + L * 4 * D);
}

// Note [tensor-parallel overlap]: every gather and reduce-scatter of the blocks, the
// embedding and the head is ring transfers, and each send of a ring step is issued before
// the block of work it overlaps starts.
TEST(TensorTrainTest, OverlappedCollectivesAreRingTransfersIssuedBeforeTheirProducts) {
  for (int t : {2, 4}) {
    TrainConfig c = config(kModels[0], t, t);
    c.model.sequence_parallel = true;
    c.model.tp_overlap = true;
    const TrainResult r = train_local(c);
    EXPECT_EQ(r.bytes_per_step,
              overlap_bytes_per_micro_batch(c.model, c.batch) + 4 * c.model.rank_parameter_count())
        << t;
    const NameId tp_name = op_name(ModelOp::kTensor);
    EXPECT_EQ(r.spans_dropped, 0U) << t;
    const int L = c.model.transformer.layers;
    int sends = 0, collectives = 0;
    std::map<int, int> sends_of_unit;
    std::vector<const Span*> sends_of_step, compute_of_step;
    for (const Span& s : r.timeline.spans) {
      if (s.step != 2 || s.rank != 0) continue;
      if (s.lane == Lane::kComm && s.name == tp_name) {
        if (s.kind == SpanKind::kSend) {
          ++sends;
          ++sends_of_unit[s.tag];
          sends_of_step.push_back(&s);
        } else if (s.kind != SpanKind::kRecv) {
          ++collectives;  // only the norms' gradient sums and the loss's two
        }
      }
      if (s.lane == Lane::kCompute && s.kind == SpanKind::kForward) compute_of_step.push_back(&s);
    }
    EXPECT_EQ(sends, (L * 10 + 5) * (t - 1)) << t;
    EXPECT_EQ(sends_of_unit[0], 2 * (t - 1)) << t;      // the embedding's sum and gradient
    EXPECT_EQ(sends_of_unit[L + 1], 3 * (t - 1)) << t;  // the head's input, again, its gradient
    EXPECT_EQ(collectives, L * 2 + 1 + 2) << t;
    // Ring sends are issued before forward products of the same unit start: issued,
    // the transfer goes on while the product computes (how long it takes is timing, and
    // not asserted).
    int overlapped = 0;
    for (const Span* send : sends_of_step) {
      for (const Span* work : compute_of_step) {
        if (work->tag == send->tag && send->issue_ns != 0 && send->issue_ns <= work->start_ns) {
          ++overlapped;
          break;
        }
      }
    }
    EXPECT_GT(overlapped, 0) << t;
  }
}

TEST(TensorTrainTest, ItsCollectivesAreOnTheTimelineAndCounted) {
  TrainConfig c = config(kModels[0], 2, 2);
  c.accumulate = 2;
  c.model.sequence_parallel = true;
  EXPECT_EQ(train_local(c).bytes_per_step, 2 * sequence_bytes_per_micro_batch(c.model, c.batch) +
                                               4 * c.model.rank_parameter_count());
  c.model.sequence_parallel = false;
  const TrainResult r = train_local(c);
  // One replica: besides them, only its gradient's all-reduce over itself.
  EXPECT_EQ(r.bytes_per_step, 2 * tensor_bytes_per_micro_batch(c.model, c.batch) +
                                  4 * c.model.rank_parameter_count());
  int tp = 0, waits = 0;
  const NameId tp_name = op_name(ModelOp::kTensor);
  for (const Span& s : r.timeline.spans) {
    if (s.step != 1 || s.rank != 1) continue;
    if (s.lane == Lane::kComm && s.name == tp_name) {
      ++tp;
      EXPECT_TRUE(s.kind == SpanKind::kAllreduce || s.kind == SpanKind::kAllgather);
      EXPECT_GT(s.bytes, 0);
    }
    if (s.lane == Lane::kWait) ++waits;
  }
  const int L = c.model.transformer.layers;
  EXPECT_EQ(tp, 2 * ((1 + 2 * L + 2) + (1 + 2 * L)));  // two micro-batches
  EXPECT_GT(waits, 0);
}

TEST(TensorTrainTest, RefusesWhatCannotBeSplitInOneLine) {
  auto refused = [](TrainConfig c) {
    try {
      validate(c);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(
      refused(config("gpt:layers=2,dim=32,heads=4,seq=16,vocab=64", 3, 3)).find("--tensor 3: gpt"),
      std::string::npos);
  EXPECT_NE(refused(config(kModels[0], 3, 2)).find("does not divide --ranks 3"), std::string::npos);
  TrainConfig mlp = config(kModels[0], 2, 1);
  mlp.model = ModelSpec::parse("mlp:2x64");
  mlp.model.tensor = 2;
  EXPECT_NE(refused(mlp).find("splits transformer blocks"), std::string::npos);
  TrainConfig cuda = config(kModels[0], 2, 2);
  cuda.device = Device::kCuda;
  EXPECT_NE(refused(cuda).find("--tensor 2"), std::string::npos);
  EXPECT_EQ(refused(config(kModels[1], 4, 4)), "");
  TrainConfig sequence = config(kModels[0], 2, 1);
  sequence.model.sequence_parallel = true;
  EXPECT_NE(refused(sequence).find("needs --tensor 2 or more"), std::string::npos);
  sequence = config("gpt:layers=2,dim=32,heads=4,seq=5,vocab=64", 4, 4);
  sequence.model.sequence_parallel = true;
  sequence.batch = 2;  // 10 tokens
  EXPECT_NE(refused(sequence).find("10 tokens"), std::string::npos);
  TrainConfig overlap = config(kModels[0], 2, 2);
  overlap.model.tp_overlap = true;
  EXPECT_NE(refused(overlap).find("--tp-overlap"), std::string::npos);
}

}  // namespace
}  // namespace tandem
