// `tandem train`: data-parallel training on in-process ranks, a line per step and a
// summary; with --out, steps.csv, trace.json and summary.json.
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "compute/cpu/blas.h"
#include "core/files.h"
#include "core/parse.h"
#include "report/train_report.h"
#include "timeline/chrome_trace.h"
#include "workload_flags.h"

namespace tandem::cli {

namespace {

struct TrainFlags {
  WorkloadFlags workload;
  std::string out;
  int warmup = 2;
  bool quiet = false;
};

void print_header(const TrainConfig& c) {
  std::printf("tandem train: %d ranks (local backend, threads of one process), model %s "
              "(%lld parameters), batch %d per rank",
              c.ranks, c.model.text.c_str(), static_cast<long long>(c.model.parameter_count()),
              c.batch);
  if (c.accumulate > 1) std::printf(" x %d micro-batches", c.accumulate);
  std::printf("\n  strategy %s, bucket cap %s (first %s), link %s\n",
              c.reducer.plan.strategy.to_string().c_str(),
              format_bytes(static_cast<double>(c.reducer.plan.bucket_cap_bytes)).c_str(),
              format_bytes(static_cast<double>(c.reducer.plan.first_bucket_cap_bytes)).c_str(),
              c.link.enabled() ? c.link.describe().c_str() : "shared memory (not emulated)");
}

int run_train(const TrainFlags& flags, bool batch_given) {
  const TrainConfig config = to_train_config(flags.workload, batch_given);
  const std::filesystem::path out = flags.out;
  if (!flags.out.empty()) prepare_output_dir(out, "--out");

  print_header(config);
  set_blas_threads(config.blas_threads);
  std::printf("  BLAS: %s per rank\n", blas_description().c_str());
  std::fflush(stdout);

  const TrainResult result = train_local(config, [&](const StepRecord& r) {
    if (flags.quiet) return;
    std::printf("step %4d/%d  loss %.4f  %8.2f ms  (rank 0)\n", r.step + 1, config.steps, r.loss,
                static_cast<double>(r.end_ns - r.start_ns) / 1e6);
    std::fflush(stdout);
  });

  const TrainSummary summary = summarize_training(config, result, flags.warmup);
  std::fputs(format_train_summary(config, result, summary).c_str(), stdout);

  if (!flags.out.empty()) {
    write_file_atomic(out / "steps.csv", steps_csv(result));
    write_file_atomic(out / "summary.json",
                      train_summary_json(config, result, summary).dump(2) + "\n");
    if (config.record) {
      write_chrome_trace(result.timeline, (out / "trace.json").string(),
                         {.other_data = train_config_json(config, result)});
    }
    std::printf("wrote %s/{steps.csv,summary.json%s}\n", flags.out.c_str(),
                config.record ? ",trace.json" : "");
  }
  return 0;
}

}  // namespace

void add_train_command(CLI::App& app, std::function<int()>& run) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a model data-parallel on in-process ranks, overlapping gradient "
               "all-reduce with backward");
  add_workload_flags(*cmd, flags->workload);
  cmd->add_option("--out", flags->out,
                  "Directory for steps.csv (a row per rank per step), trace.json "
                  "(Chrome/Perfetto) and summary.json");
  cmd->add_option("--warmup", flags->warmup, "Steps left out of the summary statistics")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--quiet", flags->quiet, "No line per step, only the summary");
  cmd->callback([flags, cmd, &run] {
    const bool batch_given = cmd->count("--batch") > 0;
    run = [flags, batch_given] { return run_train(*flags, batch_given); };
  });
}

}  // namespace tandem::cli
