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
  std::string cluster;
  int ranks = 0;  // 0: every device of the cluster
  std::string model = "mlp:8x1024";
  int batch = 64;
  int steps = 3;
  int accumulate = 1;
  std::string strategy = "bucketed";
  double bucket_mb = 25;
  double first_bucket_mb = 1;
  std::string precision = "fp32";
  std::vector<std::string> stragglers;
  bool no_timeline = false;
  std::string out;
  bool force = false;
  int warmup = 0;
};

TrainConfig to_config(const SimulateFlags& f, bool batch_given, int devices) {
  TrainConfig c;
  c.model = for_flag("--model", [&] { return ModelSpec::parse(f.model); });
  c.ranks = f.ranks > 0 ? f.ranks : devices;
  c.batch = !batch_given && c.model.default_batch > 0 ? c.model.default_batch : f.batch;
  c.steps = f.steps;
  c.accumulate = f.accumulate;
  c.reducer.plan.strategy = for_flag("--strategy", [&] { return Strategy::parse(f.strategy); });
  c.reducer.plan.bucket_cap_bytes = static_cast<std::int64_t>(f.bucket_mb * (1 << 20));
  c.reducer.plan.first_bucket_cap_bytes = static_cast<std::int64_t>(f.first_bucket_mb * (1 << 20));
  if (c.reducer.plan.bucket_cap_bytes < 4) throw UsageError("--bucket-mb: below one float");
  if (c.reducer.plan.first_bucket_cap_bytes < 4) {
    throw UsageError("--first-bucket-mb: below one float");
  }
  c.precision = for_flag("--precision", [&] { return parse_precision(f.precision); });
  c.record = !f.no_timeline;
  c.device = Device::kCpu;  // not run: the cluster's device is simulated
  return c;
}

int run_simulate(const SimulateFlags& flags, bool batch_given, const CommandLine& argv) {
  SimulateOptions options{.cluster = parse_cluster(flags.cluster)};
  for (const std::string& s : flags.stragglers) options.stragglers.push_back(Straggler::parse(s));
  const TrainConfig config = to_config(flags, batch_given, options.cluster.devices());
  std::optional<ResultsWriter> out;
  if (!flags.out.empty()) {
    out.emplace(flags.out, ResultsCommand::kTrain, argv, OutputPolicy{.force = flags.force});
  }
  std::printf("tandem simulate: %d ranks on %s\n  model %s (%lld parameters), batch %d per rank",
              config.ranks, options.cluster.describe().c_str(), config.model.text.c_str(),
              static_cast<long long>(config.model.parameter_count()), config.batch);
  if (config.accumulate > 1) std::printf(" x %d micro-batches", config.accumulate);
  std::printf(
      ", %s GEMMs\n  strategy %s, bucket cap %s (first %s)\n",
      std::string(to_string(config.precision)).c_str(),
      config.reducer.plan.strategy.to_string().c_str(),
      format_bytes(static_cast<double>(config.reducer.plan.bucket_cap_bytes)).c_str(),
      format_bytes(static_cast<double>(config.reducer.plan.first_bucket_cap_bytes)).c_str());
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
  cmd->add_option("--ranks", flags->ranks, "Data-parallel ranks (default: every device)")
      ->check(integer_in(1, 1'000'000));
  cmd->add_option("--model", flags->model,
                  "As train's --model: mlp:DxW, gpt:..., llama:..., or a preset (gpt3-xl, "
                  "gpt3-2.7b, gpt3-6.7b, gpt3-13b, llama2-13b)")
      ->capture_default_str();
  cmd->add_option("--batch", flags->batch,
                  "Rows (sequences) per rank per step (a preset's own by default)")
      ->check(integer_in(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--steps", flags->steps, "Steps to simulate")
      ->check(integer_in(1, 1000))
      ->capture_default_str();
  cmd->add_option("--accumulate", flags->accumulate, "Micro-batches per synchronization")
      ->check(integer_in(1, 4096))
      ->capture_default_str();
  cmd->add_option("--strategy", flags->strategy,
                  "sequential, layerwise, bucketed or chunked:N (sharded strategies and "
                  "pipelines are not simulated yet)")
      ->capture_default_str();
  cmd->add_option("--bucket-mb", flags->bucket_mb, "Bucket cap (MiB)")
      ->check(number_in(kBucketMbBounds))
      ->capture_default_str();
  cmd->add_option("--first-bucket-mb", flags->first_bucket_mb, "First bucket's cap (MiB)")
      ->check(number_in(kBucketMbBounds))
      ->capture_default_str();
  cmd->add_option("--precision", flags->precision, "GEMM precision: fp32, tf32, fp16, bf16")
      ->capture_default_str();
  cmd->add_option("--straggler", flags->stragglers,
                  "rank=R,compute=Fx: that rank computes F times slower (repeatable)");
  cmd->add_flag("--no-timeline", flags->no_timeline, "No trace.json (for very many ranks)");
  cmd->add_option("--out", flags->out,
                  "Directory for steps.csv, trace.json, summary.json (marked simulated) and "
                  "report.html; refused if it holds results, without --force");
  add_force_flag(*cmd, flags->force);
  cmd->add_option("--warmup", flags->warmup, "Steps left out of the summary statistics")
      ->check(integer_in(0, 999))
      ->capture_default_str();
  cmd->callback([flags, cmd, &run] {
    const bool batch_given = cmd->count("--batch") > 0;
    run = [flags, batch_given](const CommandLine& argv) {
      return run_simulate(*flags, batch_given, argv);
    };
  });
}

}  // namespace tandem::cli
