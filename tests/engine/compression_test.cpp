// Gradient compression (--compress, ddp/compression.h, Note [compression] in
// ddp/reducer.cpp): what a 16-bit bucket averages to, bit for bit; PowerSGD's buckets end
// equal on every rank with their vectors exact; the bytes on the wire; and whole runs of
// every strategy that keep the replicas equal and stay near the uncompressed run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/local/local_comm.h"
#include "core/error.h"
#include "ddp/reducer.h"
#include "engine/trainer.h"

namespace tandem {
namespace {

// Runs `body(rank, comm)` on one thread per rank of a local world.
void on_ranks(int ranks, const std::function<void(int, Communicator&)>& body) {
  auto comms = make_local_communicators(LocalOptions{.ranks = ranks});
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r, *comms[static_cast<std::size_t>(r)]);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// A rank's gradient value: differs by rank and element, over several binades.
float gradient(int rank, std::size_t i) {
  return std::ldexp(static_cast<float>(static_cast<int>((i * 37 + rank * 101) % 1001) - 500),
                    static_cast<int>(i % 7) - 12) /
         3.0f;
}

struct Reduced {
  std::vector<float> grads;  // what the reducer left, per rank
  std::vector<Bucket> buckets;
  std::int64_t bytes = 0, uncompressed = 0;
};

// Every unit's gradients set, then one step's hooks (no optimizer): the averaged gradients.
std::vector<Reduced> reduce_once(const std::string& model, const std::string& strategy,
                                 Compression compress, int ranks = 2) {
  std::vector<Reduced> out(static_cast<std::size_t>(ranks));
  on_ranks(ranks, [&](int r, Communicator& comm) {
    RankRecorder recorder(r, 64);
    ModelConfig config{.spec = ModelSpec::parse(model, 8), .batch = 2};
    std::unique_ptr<RankModel> m = make_rank_model(config, recorder);
    std::span<float> grads = m->grads();
    for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = gradient(r, i);
    ReducerOptions options;
    options.plan.strategy = Strategy::parse(strategy);
    options.plan.bucket_cap_bytes = 4096;
    options.plan.first_bucket_cap_bytes = 1024;
    options.compress = compress;
    Reducer reducer(comm, *m, options);
    m->begin_step(0);
    reducer.begin_step(0);
    for (int u = m->units() - 1; u >= 0; --u) reducer.after_backward(u, true);
    reducer.before_optimizer();
    reducer.after_optimizer();
    reducer.end_step();
    (void)m->end_step();
    Reduced& mine = out[static_cast<std::size_t>(r)];
    mine.grads.assign(grads.begin(), grads.end());
    mine.buckets = reducer.buckets();
    mine.bytes = reducer.bytes_per_step();
    mine.uncompressed = reducer.uncompressed_bytes_per_step();
  });
  return out;
}

TEST(CompressionTest, ParsesAndRejects) {
  EXPECT_EQ(Compression::parse("none"), Compression{});
  EXPECT_EQ(Compression::parse("fp16").wire_type(), DataType::kFloat16);
  EXPECT_EQ(Compression::parse("bf16").wire_type(), DataType::kBFloat16);
  const Compression p = Compression::parse("powersgd:4");
  EXPECT_EQ(p.kind, Compression::Kind::kPowerSgd);
  EXPECT_EQ(p.rank, 4);
  EXPECT_EQ(p.to_string(), "powersgd:4");
  for (const char* bad : {"", "fp8", "powersgd", "powersgd:0", "powersgd:x", "powersgd:2000"}) {
    EXPECT_THROW(Compression::parse(bad), UsageError) << bad;
  }
}

// fp16_compress_hook's arithmetic: each rank's value divided by the world size and rounded
// to 16 bits, the 16-bit values summed (the local backend: in fp32, rounded once), widened.
TEST(CompressionTest, ACastBucketAveragesExactlyAsTheHookDoes) {
  for (const char* type : {"fp16", "bf16"}) {
    const Compression compress = Compression::parse(type);
    const DataType t = compress.wire_type();
    for (const char* strategy : {"bucketed", "layerwise", "chunked:3"}) {
      const std::vector<Reduced> got = reduce_once("mlp:3x16", strategy, compress);
      ASSERT_EQ(got[0].grads, got[1].grads) << type << " " << strategy;
      for (std::size_t i = 0; i < got[0].grads.size(); ++i) {
        const float a = widen(t, narrow(t, gradient(0, i) * 0.5f));
        const float b = widen(t, narrow(t, gradient(1, i) * 0.5f));
        ASSERT_EQ(got[0].grads[i], widen(t, narrow(t, a + b)))
            << type << " " << strategy << " " << i;
      }
      EXPECT_EQ(2 * got[0].bytes, got[0].uncompressed) << type << " " << strategy;
    }
  }
}

// PowerSGD: one gradient on every rank, and what is not a matrix (the biases) is the exact
// average; the matrices are approximations, so they differ from it.
TEST(CompressionTest, PowerSgdLeavesEveryRankTheSameGradientWithExactBiases) {
  const std::vector<Reduced> got =
      reduce_once("mlp:3x16", "layerwise", Compression::parse("powersgd:1"), 3);
  const std::vector<Reduced> exact = reduce_once("mlp:3x16", "layerwise", Compression{}, 3);
  for (int r = 1; r < 3; ++r) EXPECT_EQ(got[0].grads, got[static_cast<std::size_t>(r)].grads);
  ModelLayout layout(ModelSpec::parse("mlp:3x16", 8));
  int matrices = 0;
  for (const ParamInfo& p : layout.params()) {
    double diff = 0;
    for (std::size_t i = p.offset; i < p.offset + p.numel; ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(got[0].grads[i] - exact[0].grads[i])));
    }
    if (p.shape.size() >= 2) {
      EXPECT_GT(diff, 0) << p.name << ": a rank-1 approximation of a 16x16 average";
      ++matrices;
    } else {
      EXPECT_LE(diff, 1e-6) << p.name;
    }
  }
  EXPECT_GT(matrices, 0);
  EXPECT_LT(got[0].bytes, got[0].uncompressed / 4);
}

TrainConfig small_gpt(const std::string& strategy, const std::string& compress) {
  TrainConfig c;
  c.model = ModelSpec::parse("gpt:layers=2,dim=32,heads=2,seq=16,vocab=64");
  c.ranks = 2;
  c.batch = 4;
  c.steps = 6;
  c.reducer.plan.strategy = Strategy::parse(strategy);
  c.reducer.plan.bucket_cap_bytes = 40'000;
  c.reducer.plan.first_bucket_cap_bytes = 10'000;
  c.reducer.compress = Compression::parse(compress);
  c.verify = true;  // every rank's parameters compared after every step
  return c;
}

// Whole runs: the replicas stay equal (--verify), the parameters move away from the fp32
// run's by rounding-sized amounts only, and the bytes fall as the compression says.
TEST(CompressionTest, EveryStrategyTrainsCompressedWithEqualReplicas) {
  struct Case {
    const char* strategy;
    const char* compress;
    double tolerance;  // max |compressed - fp32| over max |fp32 - initial| of a parameter
  };
  for (const Case& k :
       {Case{"bucketed", "fp16", 0.02}, Case{"layerwise", "bf16", 0.05},
        Case{"chunked:3", "fp16", 0.02}, Case{"zero2", "bf16", 0.05}, Case{"fsdp", "fp16", 0.02},
        Case{"zero1", "fp16", 0.02}, Case{"bucketed", "powersgd:2", 1.0}}) {
    const std::string what = std::string(k.strategy) + " " + k.compress;
    TrainConfig plain = small_gpt(k.strategy, "none");
    const TrainResult base = train_local(plain);
    const TrainResult got = train_local(small_gpt(k.strategy, k.compress));
    ASSERT_EQ(got.final_params.size(), base.final_params.size()) << what;
    plain.steps = 1;
    plain.sgd.lr = 1e-30f;  // a step too small to move any parameter: the initial ones
    double moved = 0, off = 0;
    const std::vector<float> initial = train_local(plain).final_params;
    for (std::size_t i = 0; i < base.final_params.size(); ++i) {
      moved = std::max(moved, static_cast<double>(std::fabs(base.final_params[i] - initial[i])));
      off =
          std::max(off, static_cast<double>(std::fabs(got.final_params[i] - base.final_params[i])));
    }
    EXPECT_GT(off, 0) << what << ": compression changed nothing";
    EXPECT_LT(off, k.tolerance * moved) << what;
    EXPECT_LT(got.bytes_per_step, got.uncompressed_bytes_per_step) << what;
    EXPECT_EQ(got.uncompressed_bytes_per_step, base.bytes_per_step) << what;
    if (std::string(k.strategy).find("zero") == std::string::npos &&
        std::string(k.strategy) != "fsdp" && std::string(k.compress) != "powersgd:2") {
      EXPECT_EQ(2 * got.bytes_per_step, base.bytes_per_step) << what;
    }
    for (const StepRecord& r : got.steps) EXPECT_TRUE(std::isfinite(r.loss)) << what;
  }
}

TEST(CompressionTest, WhatCannotCompressIsRefusedNamingTheFlag) {
  for (const auto& [strategy, compress] : std::vector<std::pair<std::string, std::string>>{
           {"zero2", "powersgd:2"}, {"chunked:3", "powersgd:2"}}) {
    try {
      (void)train_local(small_gpt(strategy, compress));
      ADD_FAILURE() << strategy << " " << compress;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--compress"), std::string::npos) << e.what();
    }
  }
  TrainConfig piped = small_gpt("bucketed", "fp16");
  piped.pipeline.stages = 2;
  EXPECT_THROW((void)train_local(piped), UsageError);
}

}  // namespace
}  // namespace tandem
