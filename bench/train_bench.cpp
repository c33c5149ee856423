// tandem train step time per strategy, with and without link emulation, plus the two
// baselines the foundation is judged against, all measured in one run:
//   - data parallelism: 2 ranks x 1 BLAS thread vs 1 process x 2 BLAS threads on the
//     same global batch;
//   - the timeline's own cost: recording on vs off.
// Configurations are interleaved over rounds so that machine noise hits all alike.
//
//   train_bench [--model mlp:8x1024] [--batch 64] [--steps 30] [--rounds 3]
//               [--link 1GB/s,10us]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "analysis/metrics.h"
#include "compute/cpu/blas.h"
#include "engine/trainer.h"
#include "report/machine.h"

using namespace tandem;

namespace {

struct Case {
  std::string name;
  TrainConfig config;
};

struct Measured {
  std::vector<double> step_ms;  // per round: median step time
  std::vector<double> comp_ms, comm_ms, ovl_ms;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void measure(const Case& c, int warmup, Measured& m) {
  const TrainResult r = train_local(c.config);
  std::map<int, double> slowest;
  for (const auto& s : r.steps) {
    if (s.step < warmup) continue;
    slowest[s.step] = std::max(slowest[s.step], (s.end_ns - s.start_ns) / 1e6);
  }
  std::vector<double> steps;
  for (const auto& [k, v] : slowest) steps.push_back(v);
  m.step_ms.push_back(median(steps));
  if (c.config.record) {
    auto metrics = drop_warmup(compute_step_metrics(r.timeline), warmup);
    std::vector<double> comp, comm, ovl;
    for (const auto& s : metrics) {
      comp.push_back(s.t_comp_ns / 1e6);
      comm.push_back(s.t_comm_ns / 1e6);
      ovl.push_back(s.t_ovl_ns / 1e6);
    }
    m.comp_ms.push_back(median(comp));
    m.comm_ms.push_back(median(comm));
    m.ovl_ms.push_back(median(ovl));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "mlp:8x1024", link = "1GB/s,10us";
  int batch = 64, steps = 30, rounds = 3, warmup = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--model") model = value;
    else if (flag == "--batch") batch = std::stoi(value);
    else if (flag == "--steps") steps = std::stoi(value);
    else if (flag == "--rounds") rounds = std::stoi(value);
    else if (flag == "--link") link = value;
    else {
      std::fprintf(stderr, "train_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  TrainConfig base;
  base.model = ModelSpec::parse(model);
  base.ranks = 2;
  base.batch = batch;
  base.steps = steps;
  base.blas_threads = 1;

  std::vector<Case> cases;
  {
    TrainConfig one = base;
    one.ranks = 1;
    one.batch = 2 * batch;
    one.blas_threads = 2;
    cases.push_back({"1 process, 2 BLAS threads, batch " + std::to_string(2 * batch), one});
  }
  // "bucketed 4MiB" caps buckets at 4 MiB: 25 MiB holds nearly all of an 8x1024 MLP in
  // one bucket, which backward completes only at its very end.
  struct StrategyCase {
    const char* label;
    const char* strategy;
    std::int64_t cap_bytes;
  };
  const StrategyCase strategies[] = {{"sequential", "sequential", 25ll << 20},
                                     {"layerwise", "layerwise", 25ll << 20},
                                     {"bucketed", "bucketed", 25ll << 20},
                                     {"bucketed 4MiB", "bucketed", 4ll << 20},
                                     {"chunked:10", "chunked:10", 25ll << 20}};
  for (bool emulated : {false, true}) {
    for (const StrategyCase& sc : strategies) {
      TrainConfig c = base;
      c.reducer.plan.strategy = Strategy::parse(sc.strategy);
      c.reducer.plan.bucket_cap_bytes = sc.cap_bytes;
      if (emulated) c.link = LinkModel::parse(link);
      cases.push_back({std::string("2 ranks ") + sc.label + (emulated ? " + link " + link : ""), c});
    }
  }
  {
    TrainConfig c = base;
    c.record = false;
    cases.push_back({"2 ranks bucketed, timeline off", c});
  }

  std::printf("# train_bench: %s, batch %d per rank, %d steps (%d warm-up), %d rounds\n",
              model.c_str(), batch, steps, warmup, rounds);
  std::printf("# machine: %s, %u cores; %s\n", machine_json()["cpu"].get<std::string>().c_str(),
              machine_json()["cores"].get<unsigned>(), blas_description().c_str());
  std::vector<Measured> results(cases.size());
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t i = 0; i < cases.size(); ++i) measure(cases[i], warmup, results[i]);
  }
  // Indices: 0 one process; 1..5 strategies; 6..10 the same with the link; 11 no timeline.
  const double baseline = median(results[0].step_ms);
  const double bucketed = median(results[3].step_ms);
  const double seq_link = median(results[6].step_ms);
  std::printf("%-48s %10s %9s %9s %9s %9s %9s\n", "configuration", "step ms", "vs 1proc",
              "vs seq", "comp ms", "comm ms", "ovl ms");
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const double t = median(results[i].step_ms);
    const double seq = i >= 6 && i <= 10 ? seq_link : median(results[1].step_ms);
    std::printf("%-48s %10.2f %9.3f %9.3f %9.2f %9.2f %9.2f\n", cases[i].name.c_str(), t,
                t / baseline, i >= 1 && i <= 10 ? t / seq : 0.0, median(results[i].comp_ms),
                median(results[i].comm_ms), median(results[i].ovl_ms));
  }
  std::printf("timeline cost: bucketed with timeline / without = %.4f\n",
              bucketed / median(results.back().step_ms));
  return 0;
}
