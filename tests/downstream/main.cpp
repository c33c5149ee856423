// Trains a small MLP data-parallel on two in-process ranks through libtandem, then reads
// the timeline it recorded with tandem's metrics: what a program built on an installed
// tandem does. Prints one line; exits 1 when something is off.
#include <cstdio>

#include "analysis/metrics.h"
#include "analysis/waiting.h"
#include "engine/trainer.h"

int main() {
  tandem::TrainConfig config;
  config.model = tandem::ModelSpec::parse("mlp:2x64");
  config.ranks = 2;
  config.batch = 8;
  config.steps = 6;
  config.verify = true;  // the replicas hold identical parameters after every step
  const tandem::TrainResult result = tandem::train_local(config);
  const auto steps = tandem::compute_step_metrics(result.timeline);
  const tandem::WaitingAnalysis waiting = tandem::explain_waiting(result.timeline, 1);
  if (steps.size() != 6 || waiting.ranks.size() != 2 || result.steps.empty()) {
    std::printf("downstream: unexpected result (%zu steps)\n", steps.size());
    return 1;
  }
  std::printf(
      "downstream: %zu steps on %d ranks, %.0f bytes all-reduced per step, %d "
      "collectives matched\n",
      steps.size(), config.ranks, steps.back().bytes, waiting.collectives);
  return 0;
}
