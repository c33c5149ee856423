// `tandem simulate`: a training configuration predicted on a modelled cluster
// (simulate/simulator.h), reported as `train` reports a measured run.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "core/parse.h"
#include "flag_checks.h"
#include "report/results_dir.h"
#include "simulate/simulator.h"
#include "train_outputs.h"
#include "workload_flags.h"

namespace tandem::cli {

namespace {

struct SimulateFlags {
  WorkloadFlags workload;  // the step's shape, as train takes it (WorkloadUse::kSimulate)
  std::string cluster;
  int ranks = 0;  // 0: every device of the cluster
  std::vector<std::string> stragglers;
  std::string out;
  bool force = false;
  int warmup = 0;
};

int run_simulate(const SimulateFlags& flags, bool batch_given, const CommandLine& argv) {
  SimulateOptions options{.cluster = parse_cluster(flags.cluster)};
  for (const std::string& s : flags.stragglers) options.stragglers.push_back(Straggler::parse(s));
  WorkloadFlags workload = flags.workload;
  workload.ranks = flags.ranks > 0 ? flags.ranks : options.cluster.devices();
  const TrainConfig config = to_train_config(workload, batch_given, /*runs_here=*/false);
  std::optional<ResultsWriter> out;
  if (!flags.out.empty()) {
    out.emplace(flags.out, ResultsCommand::kTrain, argv, OutputPolicy{.force = flags.force});
  }
  std::printf("tandem simulate: %d ranks on %s\n  model %s (%lld parameters), batch %d per rank",
              config.ranks, options.cluster.describe().c_str(), config.model.text.c_str(),
              static_cast<long long>(config.model.parameter_count()), config.batch);
  if (config.accumulate > 1) std::printf(" x %d micro-batches", config.accumulate);
  std::printf(", %s GEMMs\n", std::string(to_string(config.precision)).c_str());
  const Strategy& strategy = config.reducer.plan.strategy;
  if (strategy.sharded()) {
    std::printf("  strategy %s", strategy.to_string().c_str());
    if (strategy.kind == StrategyKind::kFsdp) {
      std::printf(", prefetch %d%s", config.shard.prefetch,
                  config.shard.reshard_after_forward ? "" : ", kept from forward to backward");
    }
    std::printf("\n");
  } else {
    std::printf(
        "  strategy %s, bucket cap %s (first %s)\n", strategy.to_string().c_str(),
        format_bytes(static_cast<double>(config.reducer.plan.bucket_cap_bytes)).c_str(),
        format_bytes(static_cast<double>(config.reducer.plan.first_bucket_cap_bytes)).c_str());
  }
  std::printf(
      "  device %s: %s; overlap slows compute %.0f%% and communication %.0f%% "
      "(uncalibrated profile values)\n",
      options.cluster.device.name.c_str(), options.cluster.device.source.c_str(),
      100 * options.cluster.device.overlap_compute_slowdown,
      100 * options.cluster.device.overlap_comm_slowdown);
  std::fflush(stdout);
  const TrainResult result = simulate_training(config, options);
  std::printf("  %s\n  %s\n", result.blas.c_str(), result.backend_details.c_str());
  nlohmann::json simulated = {
      {"cluster", options.cluster.name},
      {"nodes", options.cluster.nodes},
      {"devices_per_node", options.cluster.devices_per_node},
      {"device", options.cluster.device.name},
      {"device_source", options.cluster.device.source},
      {"gemm_efficiency", options.cluster.device.gemm_efficiency},
      {"overlap_compute_slowdown", options.cluster.device.overlap_compute_slowdown},
      {"overlap_comm_slowdown", options.cluster.device.overlap_comm_slowdown},
      {"calibration", nullptr},
  };
  nlohmann::json stragglers = nlohmann::json::array();
  for (const Straggler& s : options.stragglers) {
    stragglers.push_back({{"rank", s.rank}, {"compute", s.compute}});
  }
  simulated["stragglers"] = stragglers;
  return write_train_outputs(config, result, flags.warmup, nullptr, out ? &*out : nullptr,
                             {{"simulated", simulated}});
}

}  // namespace

void add_simulate_command(CLI::App& app, RunCommand& run) {
  auto flags = std::make_shared<SimulateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "simulate",
      "Predict training steps on a modelled cluster (docs/SIMULATE.md): the same spans, "
      "metrics, summary.json, trace.json and report.html as a measured train run");
  cmd->add_option("--cluster", flags->cluster,
                  "NODESxDEVICESxPROFILE (8x8xh100), DEVICESxPROFILE, or a JSON file; "
                  "built-in profiles: " +
                      builtin_profiles())
      ->required();
  cmd->add_option("--ranks", flags->ranks, "Ranks (default: every device of the cluster)")
      ->check(integer_in(1, 1 << 20));
  flags->workload.steps = 3;
  add_workload_flags(*cmd, flags->workload, WorkloadUse::kSimulate);
  cmd->add_option("--straggler", flags->stragglers,
                  "rank=R,compute=Fx: that rank computes F times slower (repeatable)");
  cmd->add_option("--out", flags->out,
                  "Directory for steps.csv, trace.json, summary.json (marked simulated) and "
                  "report.html; refused if it holds results, without --force");
  add_force_flag(*cmd, flags->force);
  cmd->add_option("--warmup", flags->warmup, "Steps left out of the summary statistics")
      ->check(integer_in(0, 999))
      ->capture_default_str();
  cmd->callback([flags, cmd, &run] {
    const bool batch_given = cmd->count("--batch") > 0;
    flags->workload.given = given_options(*cmd);
    run = [flags, batch_given](const CommandLine& argv) {
      return run_simulate(*flags, batch_given, argv);
    };
  });
}

}  // namespace tandem::cli
