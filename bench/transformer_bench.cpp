// Transformer training throughput on the CPU against the machine's single-thread sgemm
// rate, both measured in the same run, interleaved over rounds so that noise hits both:
//   - sgemm: C = A.B, 1024^3, one GEMM thread, sustained over 0.3 s windows, the best of
//     5 windows per round;
//   - 1 rank x 1 thread, and 2 ranks x 1 thread (bucketed all-reduce overlapping
//     backward), training the model on synthetic tokens.
// Achieved GFLOP/s per rank = the FLOPs of one rank's step (the compute spans' FLOPs:
// every matrix product, forward and backward, attention's included) / the median step
// time. Targets: >= 60% of the sgemm rate for the default model with 2 ranks (issue 12),
// >= 75% for gpt:layers=4,dim=256,heads=4,seq=128,vocab=256 (issue 25).
//
//   transformer_bench [--model gpt:layers=4,dim=256,heads=4,seq=128] [--batch 8]
//                     [--steps 8] [--warmup 2] [--rounds 3]
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "compute/cpu/blas.h"
#include "core/clock.h"
#include "engine/trainer.h"
#include "report/machine.h"

using namespace tandem;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GFLOP/s of one thread on a square sgemm of size n, sustained: calls repeated for at
// least 0.3 s, the best of `reps` such windows after a warm-up call (as gemm_bench).
double sgemm_gflops(int n, int reps) {
  set_blas_threads(1);
  std::vector<float> a(static_cast<std::size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    int calls = 0;
    const std::int64_t t0 = now_ns();
    std::int64_t t = t0;
    do {
      sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      ++calls;
      t = now_ns();
    } while (t - t0 < 300'000'000);
    best = std::max(best, 2.0 * n * n * n * calls / static_cast<double>(t - t0));
  }
  return best;
}

struct Run {
  double step_ms = 0;          // median over measured steps of the slowest rank's step
  double flops_per_rank = 0;   // one rank's step
};

Run measure(const TrainConfig& config, int warmup) {
  const TrainResult r = train_local(config);
  std::map<int, double> slowest;
  for (const StepRecord& s : r.steps) {
    if (s.step < warmup) continue;
    slowest[s.step] = std::max(slowest[s.step], static_cast<double>(s.end_ns - s.start_ns) / 1e6);
  }
  std::vector<double> steps;
  for (const auto& [step, ms] : slowest) steps.push_back(ms);
  Run run;
  run.step_ms = median(steps);
  for (const Span& s : r.timeline.spans) {
    if (s.rank == 0 && s.step == warmup && s.lane == Lane::kCompute) run.flops_per_rank += s.flops;
  }
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "gpt:layers=4,dim=256,heads=4,seq=128";
  int batch = 8, steps = 8, warmup = 2, rounds = 3;
  set_blas_threads(1);  // the header below names what runs: one GEMM thread per rank
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--model") model = value;
    else if (flag == "--batch") batch = std::stoi(value);
    else if (flag == "--steps") steps = std::stoi(value);
    else if (flag == "--warmup") warmup = std::stoi(value);
    else if (flag == "--rounds") rounds = std::stoi(value);
    else {
      std::fprintf(stderr, "transformer_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  TrainConfig base;
  base.model = ModelSpec::parse(model);
  base.batch = batch;
  base.steps = steps;
  base.blas_threads = 1;
  base.reducer.plan.strategy = Strategy::parse("bucketed");
  TrainConfig one = base;
  one.ranks = 1;
  TrainConfig two = base;
  two.ranks = 2;

  std::printf("# transformer_bench: %s (%lld parameters), batch %d per rank, %d steps (%d "
              "warm-up), %d rounds\n",
              base.model.describe().c_str(), static_cast<long long>(base.model.parameter_count()),
              batch, steps, warmup, rounds);
  std::printf("# machine: %s, %u cores; %s\n", machine_json()["cpu"].get<std::string>().c_str(),
              machine_json()["cores"].get<unsigned>(), blas_description().c_str());
  std::vector<double> gemm, ms1, ms2;
  double flops = 0;
  for (int round = 0; round < rounds; ++round) {
    gemm.push_back(sgemm_gflops(1024, 5));
    const Run r1 = measure(one, warmup);
    const Run r2 = measure(two, warmup);
    ms1.push_back(r1.step_ms);
    ms2.push_back(r2.step_ms);
    flops = r1.flops_per_rank;
  }
  const double sgemm_rate = median(gemm);
  const double tokens = static_cast<double>(batch) * base.model.transformer.seq;
  std::printf("single-thread sgemm 1024^3: %.1f GFLOP/s (median of %d rounds)\n", sgemm_rate,
              rounds);
  std::printf("FLOPs per rank per step: %.3g\n", flops);
  std::printf("%-34s %10s %12s %14s %10s\n", "configuration", "step ms", "tokens/s",
              "GFLOP/s/rank", "of sgemm");
  for (const auto& [label, ranks, ms] :
       {std::tuple{"1 rank x 1 thread", 1, median(ms1)},
        std::tuple{"2 ranks x 1 thread, bucketed", 2, median(ms2)}}) {
    const double gflops = flops / (ms / 1e3) / 1e9;
    std::printf("%-34s %10.2f %12.0f %14.1f %9.1f%%\n", label, ms, ranks * tokens / (ms / 1e3),
                gflops, 100 * gflops / sgemm_rate);
  }
  return 0;
}
