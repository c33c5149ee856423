// `tandem train`: data-parallel training, a line per step and a summary; with --out,
// steps.csv, trace.json and summary.json. Ranks are threads of this process (`local`)
// or the processes of an MPI job (`mpi`: rank 0 prints and writes for the whole job);
// the math on the CPU or, with --device cuda, on one GPU per rank (docs/GPU.md).
#include <algorithm>
#include <cstdio>
#include <optional>

#include "comm/backend_registry.h"
#include "commands.h"
#include "compute/cpu/blas.h"
#include "core/affinity.h"
#include "core/error.h"
#include "core/parse.h"
#include "engine/launch.h"
#include "engine/trainer.h"
#include "flag_checks.h"
#include "job_flags.h"
#include "power/nvml.h"
#include "report/results_dir.h"
#include "report/train_report.h"
#include "train_outputs.h"
#include "workload_flags.h"

namespace tandem::cli {

namespace {

struct TrainFlags {
  WorkloadFlags workload;
  std::string out;
  bool force = false;
  int warmup = 2;
  bool quiet = false;
  JobFlags job;
  PowerFlags power;
};

// `where` says what the ranks are, e.g. "local backend, threads of one process".
void print_header(const TrainConfig& c, const std::string& where) {
  std::printf("tandem train: %d rank%s (%s), model %s (%lld parameters), batch %d per rank",
              c.ranks, c.ranks == 1 ? "" : "s", where.c_str(), c.model.text.c_str(),
              static_cast<long long>(c.model.parameter_count()), c.batch);
  if (c.pipeline.micro_batches > 0) {
    std::printf(" in %d micro-batches of %d", micro_batches(c), micro_batch_rows(c));
  } else if (c.accumulate > 1) {
    std::printf(" x %d micro-batches", c.accumulate);
  }
  if (c.model.tensor > 1) {
    const int replicas = outer_ranks(c) / std::max(1, c.pipeline.stages);
    std::printf(
        "\n  tensor parallel %d x pipeline %d x data %d (tensor innermost): %lld "
        "parameters per rank, %s (docs/TENSOR.md)",
        c.model.tensor, c.pipeline.stages, replicas,
        static_cast<long long>(c.model.rank_parameter_count()),
        !c.model.sequence_parallel ? "an all-reduce after each row-parallel product"
        : !c.model.tp_overlap
            ? "sequence-parallel (an all-gather before each column-parallel product, a "
              "reduce-scatter after each row-parallel one)"
            : "sequence-parallel, its all-gathers and reduce-scatters overlapped in ring steps");
  }
  if (c.pipeline.stages > 1) std::printf("\n  pipeline %s", stage_plan(c).describe().c_str());
  std::printf("\n  strategy %s, bucket cap %s (first %s)",
              c.reducer.plan.strategy.to_string().c_str(),
              format_bytes(static_cast<double>(c.reducer.plan.bucket_cap_bytes)).c_str(),
              format_bytes(static_cast<double>(c.reducer.plan.first_bucket_cap_bytes)).c_str());
  if (c.device == Device::kCpu) {
    std::printf(", link %s",
                c.link.enabled() ? c.link.describe().c_str() : "shared memory (not emulated)");
  }
  std::printf("\n");
}

StepCallback step_printer(const TrainFlags& flags, int steps) {
  return [quiet = flags.quiet, steps](const StepRecord& r) {
    if (quiet) return;
    std::printf("step %4d/%d  loss %.4f  %8.2f ms  (rank 0)", r.step + 1, steps, r.loss,
                static_cast<double>(r.end_ns - r.start_ns) / 1e6);
    if (r.has_val_loss) std::printf("  validation loss %.4f", r.val_loss);
    std::printf("\n");
    std::fflush(stdout);
  };
}

// `out` is null without --out, and on every rank but 0 of a process job.
// After a device run: what it ran on, how its gradients moved and how it was timed.
void print_device_lines(const TrainResult& result) {
  std::printf("  ran on %s\n  all-reduce: %s (%s)\n  %s; compute spans timed by %s\n",
              result.device_details.c_str(), result.backend.c_str(), result.backend_details.c_str(),
              result.blas.c_str(), result.timing_source.c_str());
}

// One path for every backend and device: ranks are threads of this process (local) or
// the processes of a launcher's job (mpi: every process runs this and rank 0 prints and
// writes; once the job exists, a failure on any rank ends the whole job, engine/launch.h).
int run_train(const TrainFlags& flags, bool batch_given, bool ranks_given,
              const CommandLine& argv) {
  const std::string backend = resolve_backend(flags.job.backend);
  // Under a launcher the job's size is the ranks, before anything that depends on them.
  WorkloadFlags workload = flags.workload;
  workload.ranks = job_ranks(backend, workload.ranks, ranks_given);
  TrainConfig config = to_train_config(workload, batch_given);
  check_in_process_flags(workload, backend);
  refuse_split_auto_in_process_jobs(config.pipeline.split_auto, backend);
  const bool leader_process = backend == "local" || launched_world().rank == 0;
  // Locked for the whole run; the results appear at --out only when all are written.
  std::optional<ResultsWriter> out;
  if (leader_process && !flags.out.empty()) {
    out.emplace(flags.out, ResultsCommand::kTrain, argv, OutputPolicy{.force = flags.force});
  }
  Job job(backend, job_options(flags.job, config.timeout_ns));
  expect_job_size(job, config.ranks);
  const std::string where = !job.in_process() || config.device == Device::kCpu ? describe_ranks(job)
                            : config.device_comm == "shared"
                                ? "threads of one process, all on one GPU"
                                : "threads of one process, one GPU each";
  // Measured before the header, which prints it, and before every rank starts.
  if (config.pipeline.split_auto) config.pipeline.split = measured_split(config);
  if (job.leader()) {
    print_header(config, where);
    if (job.process() != nullptr) std::printf("  %s\n", job.process()->describe().c_str());
    if (job.in_process()) {
      std::printf("  CPUs: %s\n",
                  place_ranks(config.ranks, config.blas_threads, config.bind, allowed_cpus())
                      .description.c_str());
    }
    if (config.device == Device::kCpu) {
      configure_cpu_gemm(config);
      print_cpu_gemm_lines();
    } else {
      std::printf("  device %s, %s GEMMs, fp32 master weights and gradients\n",
                  std::string(to_string(config.device)).c_str(),
                  std::string(to_string(config.precision)).c_str());
    }
  }
  // Power on rank 0's host, sampled through the whole run and summarized over the
  // measured steps: RAPL zones, and NVML's GPUs on cuda (docs/METRICS.md, "Power").
  std::optional<PowerSampler> power;
  if (job.leader()) {
    NvmlDiscovery found =
        discover_power(flags.power.powercap_root, config.device == Device::kCuda);
    std::printf("  power%s: %s\n", job.in_process() ? "" : " on rank 0's host",
                found.status.c_str());
    power.emplace(std::move(found.sources), std::chrono::milliseconds(flags.power.interval_ms));
    power->start();
    std::fflush(stdout);
  }
  const TrainResult result = train(config, job, step_printer(flags, config.steps));
  if (power) power->stop();
  if (!job.leader()) return 0;
  if (config.device != Device::kCpu) print_device_lines(result);
  if (job.process() != nullptr) {
    std::printf("  clocks aligned to rank 0 within +-%s (ping-pong, half the best round trip)\n",
                format_duration_ns(static_cast<double>(result.clock_uncertainty_ns)).c_str());
  }
  return write_train_outputs(config, result, flags.warmup, power ? &*power : nullptr,
                             out ? &*out : nullptr);
}

}  // namespace

int write_train_outputs(const TrainConfig& config, const TrainResult& result, int warmup,
                        const PowerSampler* power, ResultsWriter* out,
                        const nlohmann::json& summary_extra) {
  const TrainSummary summary = summarize_training(config, result, warmup, power);
  std::fputs(format_train_summary(config, result, summary).c_str(), stdout);

  if (out != nullptr) {
    out->write("steps.csv", steps_csv(result));
    nlohmann::json body = train_summary_body(config, result, summary);
    for (const auto& [key, value] : summary_extra.items()) body[key] = value;
    out->write_summary(body);
    if (config.record) {
      out->write_trace("trace.json", result.timeline,
                       {.other_data = train_config_json(config, result)});
    }
    out->write_report();
    out->commit();
    std::printf("wrote %s/{steps.csv,summary.json%s,report.html}\n", out->path().c_str(),
                config.record ? ",trace.json" : "");
  }
  return 0;
}

void add_train_command(CLI::App& app, RunCommand& run) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd =
      app.add_subcommand("train",
                         "Train a model data-parallel (in-process ranks, or one rank per process "
                         "under mpirun/srun), overlapping gradient all-reduce with backward");
  add_workload_flags(*cmd, flags->workload);
  cmd->add_option("--out", flags->out,
                  "Directory for steps.csv (a row per rank per step), trace.json "
                  "(Chrome/Perfetto), summary.json and report.html; it appears when the run "
                  "is done, and one that holds results is refused without --force");
  add_force_flag(*cmd, flags->force);
  cmd->add_option("--warmup", flags->warmup, "Steps left out of the summary statistics")
      ->check(integer_in(0, 10'000'000))
      ->capture_default_str();
  cmd->add_flag("--quiet", flags->quiet, "No line per step, only the summary");
  add_job_flags(*cmd, flags->job);
  add_power_flags(*cmd, flags->power);
  cmd->callback([flags, cmd, &run] {
    const bool batch_given = cmd->count("--batch") > 0;
    const bool ranks_given = cmd->count("--ranks") > 0;
    flags->workload.given = given_options(*cmd);
    run = [flags, batch_given, ranks_given](const CommandLine& argv) {
      return run_train(*flags, batch_given, ranks_given, argv);
    };
  });
}

}  // namespace tandem::cli
