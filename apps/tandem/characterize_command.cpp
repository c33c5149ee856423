// `tandem characterize`: flags, the workload of every sweep point, who runs and who writes
// (threads of this process, or the processes of an mpirun/srun job with rank 0 printing
// and writing), and the terminal (header, the metrics table). The sweep itself is
// experiment/sweep_runner.h.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "analysis/metric_catalogue.h"
#include "comm/link_model.h"
#include "commands.h"
#include "compute/cpu/blas.h"
#include "compute/precision.h"
#include "core/affinity.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/parse.h"
#include "experiment/characterize.h"
#include "experiment/gpu_microbench.h"
#include "experiment/sweep.h"
#include "experiment/sweep_runner.h"
#include "flag_checks.h"
#include "job_flags.h"
#include "power/nvml.h"
#include "report/results_dir.h"
#include "simulate/calibration.h"
#include "sweep_progress.h"
#include "workload_flags.h"

namespace tandem::cli {

namespace {

struct CharacterizeFlags {
  WorkloadFlags workload;
  JobFlags job;
  std::string microbench;
  std::string synthetic;
  std::string simulate;                 // a cluster (docs/SIMULATE.md): predict, not run
  std::vector<std::string> stragglers;  // with --simulate
  std::string calibration;              // with --simulate here
  std::vector<std::string> sweeps;
  std::set<std::string> given;  // every option given on the command line
  std::string out;
  bool resume = false;
  bool force = false;
  int warmup = 2;
  int iterations = 25;
  PowerFlags power;
  bool no_progress = false;
  int synthetic_chunks = 0;  // set by --sweep chunks=... over --synthetic's own
  // --device cuda --microbench: the device communicator and kernel timing (the
  // --device, --precision and --device-comm flags are the workload's).
  int emulated_peers = 8;
  int emulated_blocks = 0;
  int nccl_min_ctas = 0;
  int nccl_max_ctas = 0;
  std::string kernel_timing = "cupti";
  bool ranks_given = false;
  // What the results depend on (settings_of), stored in --out for --resume to compare.
  nlohmann::json settings;
};

// Applies one sweep value to the flags of the workload kind in use.
void apply(const std::string& key, const std::string& value, CharacterizeFlags& f,
           bool& batch_given) {
  WorkloadFlags& w = f.workload;
  const bool train = f.microbench.empty() && f.synthetic.empty();
  // The same bounds as the flags of the same name.
  auto number = [&](long long min, long long max) {
    return static_cast<int>(parse_int_in(value, "--sweep " + key, min, max));
  };
  // A value a flag's own parser accepts, its errors named as the sweep's.
  auto checked_by = [&](const auto& parse) {
    try {
      parse();
    } catch (const UsageError& e) {
      throw UsageError("--sweep " + key + ": " + e.what());
    }
  };
  if (key == "ranks") {
    w.ranks = number(1, 1024);
    f.ranks_given = true;
  } else if (key == "threads") {
    w.threads = number(1, 1024);
  } else if (key == "link") {
    checked_by([&] { (void)LinkModel::parse(value); });  // the bounds of --link
    w.link = value;
  } else if (key == "power-cap") {
    (void)parse_watts(value, "--sweep power-cap");  // set per point by the sweep's hook
  } else if (key == "chunks" && !f.synthetic.empty()) {
    f.synthetic_chunks = number(1, 100000);
  } else if (!train) {
    throw UsageError("--sweep " + key + ": does not apply to " +
                     (f.microbench.empty() ? "--synthetic" : "--microbench"));
  } else if (key == "strategy") {
    w.strategy = value;
  } else if (key == "chunks") {
    w.strategy = "chunked:" + value;
  } else if (key == "bucket-mb") {
    w.bucket_mb = parse_double_in(value, "--sweep bucket-mb", kBucketMbBounds);
  } else if (key == "batch") {
    w.batch = number(1, 1 << 20);
    batch_given = true;
  } else if (key == "model") {
    w.model = value;
  } else if (key == "prefetch") {
    w.prefetch = number(0, 64);
  } else if (key == "pipeline") {
    w.pipeline = number(1, 1024);
  } else if (key == "schedule") {
    checked_by([&] { (void)parse_schedule(value); });
    w.schedule = value;
  } else if (key == "precision") {
    checked_by([&] { (void)parse_precision(value); });
    w.precision = value;
  } else if (key == "gemm") {
    checked_by([&] { (void)parse_gemm_library(value); });
    w.gemm = value;
  } else if (key == "micro-batches") {
    w.micro_batches = number(1, 4096);
  } else if (key == "overlap-optimizer" || key == "double-buffer" || key == "sequence-parallel" ||
             key == "tp-overlap") {
    // yes/no, and on/off as the issues spell tp-overlap.
    const bool yes = value == "yes" || value == "on";
    if (!yes && value != "no" && value != "off") {
      throw UsageError("--sweep " + key + ": expected yes or no (on or off), not '" + value + "'");
    }
    (key == "overlap-optimizer"   ? w.overlap_optimizer
     : key == "double-buffer"     ? w.double_buffer
     : key == "sequence-parallel" ? w.sequence_parallel
                                  : w.tp_overlap) = yes;
  } else if (key == "tensor") {
    w.tensor = number(1, 1024);
  } else if (key == "compress") {
    checked_by([&] { (void)Compression::parse(value); });
    w.compress = value;
  } else if (key == "recompute") {
    checked_by([&] { (void)parse_recompute(value); });
    w.recompute = value;
  }
}

// --device cuda --microbench: ranks are this process's GPUs (all of them unless --ranks
// says otherwise; one GPU runs the emulated ring).
std::unique_ptr<Workload> make_gpu_microbench(const CharacterizeFlags& f) {
  GpuMicrobenchSpec spec{.bench = MicrobenchSpec::parse(f.microbench)};
  spec.bench.ranks = f.ranks_given ? f.workload.ranks : std::max(1, cuda_device_count());
  if (!f.workload.link.empty()) throw UsageError("--link: not with --device cuda");
  spec.precision = f.given.contains("--precision") ? f.workload.precision : "bf16";
  try {
    (void)parse_precision(spec.precision);
  } catch (const UsageError& e) {
    throw UsageError(std::string("--precision: ") + e.what());
  }
  spec.comm_backend = f.workload.device_comm;
  spec.emulated_peers = f.emulated_peers;
  spec.emulated_blocks = f.emulated_blocks;
  spec.nccl_min_ctas = f.nccl_min_ctas;
  spec.nccl_max_ctas = f.nccl_max_ctas;
  spec.timeout_s = f.workload.timeout_s;
  spec.prefer_cupti = f.kernel_timing == "cupti";
  return make_gpu_microbench_workload(spec);
}

std::unique_ptr<Workload> make_workload(const CharacterizeFlags& f, bool batch_given) {
  Device device = Device::kCpu;
  try {
    device = parse_device(f.workload.device);
  } catch (const UsageError& e) {
    throw UsageError(std::string("--device: ") + e.what());
  }
  if (device == Device::kCuda && !f.synthetic.empty()) {
    throw UsageError("--synthetic: runs on the CPU only (drop --device cuda)");
  }
  if (!f.simulate.empty()) {
    if (!f.microbench.empty() || !f.synthetic.empty() || device != Device::kCpu) {
      throw UsageError("--simulate predicts a training configuration on its cluster: drop " +
                       std::string(!f.microbench.empty()  ? "--microbench"
                                   : !f.synthetic.empty() ? "--synthetic"
                                                          : "--device"));
    }
    SimulateOptions options{.cluster =
                                resolve_cluster(f.simulate, f.calibration, f.workload.ranks)};
    for (const std::string& s : f.stragglers) options.stragglers.push_back(Straggler::parse(s));
    // The precision is the simulated device's, not this CPU's (which validate checks).
    WorkloadFlags cpu = f.workload;
    cpu.precision = "fp32";
    TrainConfig config = to_train_config(cpu, batch_given, /*runs_here=*/false);
    config.precision =
        for_flag("--precision", [&] { return parse_precision(f.workload.precision); });
    return make_simulated_workload(config, options);
  }
  if (!f.stragglers.empty()) throw UsageError("--straggler: only with --simulate");
  if (!f.calibration.empty()) throw UsageError("--calibration: only with --simulate here");
  if (device == Device::kCuda && !f.microbench.empty()) return make_gpu_microbench(f);
  if (!f.microbench.empty()) {
    MicrobenchSpec spec = MicrobenchSpec::parse(f.microbench);
    spec.ranks = f.workload.ranks;
    spec.blas_threads = f.workload.threads;
    spec.bind = f.workload.binds_ranks();
    if (!f.workload.link.empty()) {
      try {
        spec.link = LinkModel::parse(f.workload.link);
      } catch (const UsageError& e) {
        throw UsageError(std::string("--link: ") + e.what());
      }
    }
    return make_microbench_workload(spec);
  }
  if (!f.synthetic.empty()) {
    const std::string text =
        f.synthetic.starts_with("synthetic:") ? f.synthetic : "synthetic:" + f.synthetic;
    SyntheticSpec spec;
    try {
      spec = SyntheticSpec::parse(text);
    } catch (const UsageError& e) {
      throw UsageError(std::string("--synthetic: ") + e.what());
    }
    spec.ranks = f.workload.ranks;
    if (f.synthetic_chunks > 0) spec.chunks = f.synthetic_chunks;
    return make_synthetic_workload(spec);
  }
  return make_train_workload(to_train_config(f.workload, batch_given));
}

// Under a launcher the job's processes are its ranks and its interconnect is what is
// measured: a flag or sweep axis that would change either is refused.
void check_process_job(const CharacterizeFlags& flags, const std::vector<SweepAxis>& axes,
                       const std::string& backend) {
  for (const SweepAxis& axis : axes) {
    if (axis.key == "ranks") {
      throw UsageError("--sweep ranks: an " + backend +
                       " job has one rank per process, fixed by mpirun -np or srun -n; "
                       "launch one job per rank count instead");
    }
    if (axis.key == "link") {
      throw UsageError("--sweep link: link emulation is for the local backend; under " + backend +
                       " the real interconnect is measured");
    }
    if (axis.key == "power-cap") {
      throw UsageError("--sweep power-cap: sets the power limit of this process's GPUs; under " +
                       backend + " each host's would need setting, run it with the local backend");
    }
  }
  check_in_process_flags(flags.workload, backend);
  if (flags.workload.split == "auto") {
    refuse_split_auto_in_process_jobs(true, backend);
  }
}

// Every point's workload, built (and so validated) before anything runs.
std::vector<SweepItem> build_points(const CharacterizeFlags& flags, bool batch_given,
                                    const std::vector<SweepAxis>& axes) {
  std::vector<SweepItem> points;
  for (SweepPoint& point : expand_grid(axes)) {
    CharacterizeFlags f = flags;
    bool given = batch_given;
    for (const auto& [key, value] : point) apply(key, value, f, given);
    std::unique_ptr<Workload> workload = make_workload(f, given);
    points.push_back({std::move(point), std::move(workload)});
  }
  return points;
}

// The header (rank 0): what runs, where the ranks are, and what measures power.
void print_header(const CharacterizeFlags& flags, std::size_t points, const Job& job,
                  const std::string& power_line) {
  std::printf(
      "tandem characterize: %zu configuration%s x 4 scenarios, %d warm-up + %d measured "
      "iterations each; power%s: %s\n  ranks: %s\n",
      points, points == 1 ? "" : "s", flags.warmup, flags.iterations,
      job.in_process() ? "" : " on rank 0's host", power_line.c_str(),
      flags.simulate.empty() ? describe_ranks(job).c_str() : "simulated, one per device");
  if (job.process() != nullptr) std::printf("  %s\n", job.process()->describe().c_str());
  if (job.in_process() && flags.simulate.empty()) {
    // The flags' ranks and threads (a sweep of either places each point as it runs;
    // summary.json records each point's binding).
    std::printf("  CPUs: %s\n", place_ranks(flags.workload.ranks, flags.workload.threads,
                                            flags.workload.binds_ranks(), allowed_cpus())
                                    .description.c_str());
  }
  if (!flags.simulate.empty()) {
    std::printf("  simulated on %s (docs/SIMULATE.md): nothing runs here\n",
                resolve_cluster(flags.simulate, flags.calibration, flags.workload.ranks)
                    .describe()
                    .c_str());
  } else if (flags.workload.device == "cpu") {
    // The GEMMs of the flags' settings (a sweep of gemm or precision changes them per
    // point; summary.json records each point's).
    print_cpu_gemm_lines();
  }
  std::fflush(stdout);
}

// The last point's table and the report (rank 0).
void print_results(const SweepOutcome& outcome, SharedOutputs& outputs) {
  if (outcome.last) {
    std::printf("\n%s\n", outcome.last->description.c_str());
    std::fputs(format_metrics_table(outcome.last->metrics).c_str(), stdout);
    if (const std::string story = overlap_story(outcome.last->metrics); !story.empty()) {
      std::printf("%s\n", story.c_str());
    }
    std::fputs(format_waiting_lines(*outcome.last).c_str(), stdout);
    std::fputs(format_power_table(*outcome.last).c_str(), stdout);
  }
  if (outputs.writer) {
    outputs.writer->write_report();
    outputs.writer->commit();
    std::printf("wrote %s/{summary.json,iterations.csv,trace.json,report.html,points/}\n",
                outputs.writer->path().c_str());
  }
}

// Ranks are threads of this process (local) or the processes of a launcher's job (mpi:
// every process runs every scenario of every point, and rank 0 alone prints and writes).
// Errors before the Job exists are usage errors on every process; after, a failure on
// any rank ends the whole job (engine/launch.h).
int run_characterize(CharacterizeFlags flags, bool batch_given, const CommandLine& argv) {
  if (!flags.microbench.empty() && !flags.synthetic.empty()) {
    throw UsageError("--microbench and --synthetic: choose one workload");
  }
  const std::string backend = resolve_backend(flags.job.backend);
  if (!flags.simulate.empty() && backend != "local") {
    throw UsageError("--simulate: a prediction runs in one process, not under " + backend);
  }
  SweepOptions options{.axes = {},
                       .finished = {},
                       .warmup = flags.warmup,
                       .iterations = flags.iterations,
                       .power = nullptr,
                       .job = nullptr};
  for (const auto& s : flags.sweeps) {
    options.axes.push_back(parse_sweep(s));
    // A swept key replaces its flag's value: both given is refused, never one silently.
    const std::string flag = "--" + options.axes.back().key;
    if (flags.given.contains(flag)) {
      throw UsageError("--sweep " + options.axes.back().key + ": " + flag +
                       " is given too, and the sweep's values would replace it; give one");
    }
  }
  if (backend != "local") {
    check_process_job(flags, options.axes, backend);
    // Every point runs on the job's ranks (a device microbenchmark: one GPU per process).
    flags.workload.ranks = job_ranks(backend, flags.workload.ranks, flags.ranks_given);
    flags.ranks_given = true;
    // The launcher's process count, not --ranks' default: a resume with -np 4 of a sweep
    // measured with -np 2 differs.
    flags.settings["--ranks"] = std::to_string(flags.workload.ranks);
  }
  std::vector<SweepItem> points = build_points(flags, batch_given, options.axes);
  // Power caps (docs/CHARACTERIZE.md, "Power caps"): only when swept, a GPU's limit through
  // NVML, every value checked against every GPU's range and the right to change it tried
  // before anything is written or run; the limits go back as found when the sweep ends,
  // however it ends (the destructor).
  std::optional<NvmlPowerLimits> limits;
  std::optional<InterruptCleanup> limits_on_signal;  // Ctrl-C puts them back too
  for (const SweepAxis& axis : options.axes) {
    if (axis.key != "power-cap") continue;
    if (flags.workload.device != "cuda") {
      throw UsageError("--sweep power-cap: sets a GPU's power limit; it needs --device cuda");
    }
    if (!flags.simulate.empty()) {
      throw UsageError("--sweep power-cap: not with --simulate, which runs nothing here");
    }
    // The GPUs this process sees (CUDA_VISIBLE_DEVICES), never another's on the node.
    const std::vector<std::string> gpus = cuda_pci_bus_ids();
    if (gpus.empty() || std::find(gpus.begin(), gpus.end(), std::string()) != gpus.end()) {
      throw UsageError("--sweep power-cap: cannot tell which GPUs the run uses (no PCI bus id)");
    }
    limits.emplace("libnvidia-ml.so.1", gpus);
    limits_on_signal.emplace([&limits] {
      try {
        limits->close();
      } catch (const std::exception& e) {  // the signal's cleanup swallows it: say it here
        std::fprintf(stderr, "tandem: %s\n", e.what());
      }
    });
    for (const std::string& v : axis.values) limits->check(parse_watts(v, "--sweep power-cap"));
    options.before_point = [&limits](const SweepPoint& point) {
      for (const auto& [key, value] : point) {
        if (key == "power-cap") limits->set(parse_watts(value, "--sweep power-cap"));
      }
    };
  }
  // The header names them; each point applies its own. Before the outputs open: a
  // precision the cpu cannot run is one line and leaves nothing behind. A simulation runs
  // no GEMM here.
  if (flags.simulate.empty()) apply_cpu_gemm_flags(flags.workload);

  Job job(backend,
          job_options(flags.job, static_cast<std::int64_t>(flags.workload.timeout_s * 1e9)));
  expect_job_size(job, flags.workload.ranks);
  options.job = &job;
  SharedOutputs outputs = open_shared_outputs(
      job, flags.out, ResultsCommand::kCharacterize, argv,
      OutputPolicy{.resume = flags.resume, .force = flags.force, .settings = flags.settings});
  if (!outputs.refused.empty()) return 2;  // the leader said why (job_flags.h)
  options.finished = outputs.finished;

  std::optional<PowerSampler> power;
  // No bar in a process job: Open MPI gives a rank's stdout a pseudo-terminal of its own
  // even when the user's is a file.
  TerminalProgress progress(flags.out, !flags.no_progress && job.in_process());
  try {
    // Power is sampled on rank 0's host only (docs/CHARACTERIZE.md, "Power").
    if (job.leader() && !flags.simulate.empty()) {
      print_header(flags, points.size(), job, "not sampled (a simulation)");
    } else if (job.leader()) {
      // Power: RAPL zones always; NVML's GPUs with --device cuda (docs/GPU.md, "Power").
      NvmlDiscovery found = discover_power(flags.power.powercap_root, flags.workload.device == "cuda");
      power.emplace(std::move(found.sources), std::chrono::milliseconds(flags.power.interval_ms));
      options.power = &*power;
      print_header(flags, points.size(), job, found.status);
      if (limits) {
        for (const NvmlPowerLimits::Gpu& g : limits->gpus()) {
          std::printf("  power cap swept on %s: %g W now (accepts %g to %g W), put back after\n",
                      g.name.c_str(), g.found_w, g.min_w, g.max_w);
        }
      }
    }
    const SweepOutcome outcome =
        run_sweep(points, options, outputs.writer ? &*outputs.writer : nullptr,
                  job.leader() ? &progress : nullptr);
    if (job.leader()) print_results(outcome, outputs);
  } catch (const std::exception& e) {
    job.fail(e);  // in-process: rethrown
  }
  return 0;
}

}  // namespace

void add_characterize_command(CLI::App& app, RunCommand& run) {
  auto flags = std::make_shared<CharacterizeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "characterize",
      "Measure what overlap buys and costs: run compute-only, comm-only, sequential and "
      "overlapped scenarios of one workload (or a sweep) and derive slowdown, overlap ratio, "
      "ideal and modelled times (in-process ranks, or one rank per process under "
      "mpirun/srun)");
  add_workload_flags(*cmd, flags->workload);
  add_job_flags(*cmd, flags->job);
  cmd->add_option("--microbench", flags->microbench,
                  "Instead of training: gemm=N[xCOUNT],allreduce=SIZE, an N x N sgemm loop "
                  "(COUNT calls, default: as many as cover the all-reduce) while an all-reduce "
                  "of SIZE runs");
  cmd->add_option("--synthetic", flags->synthetic,
                  "Instead of training: compute=D,comm=D,chunks=N[,mode=sleep|busy|ideal], phases "
                  "of known duration (sleep: no contention by construction; ideal: spans on the "
                  "ideal schedule, a virtual clock, nothing runs)");
  cmd->add_option("--simulate", flags->simulate,
                  "Instead of running: predict the training workload's four scenarios on a "
                  "cluster, NODESxDEVICESxPROFILE, a JSON file, or here with --calibration, as "
                  "tandem simulate (docs/SIMULATE.md)");
  cmd->add_option("--calibration", flags->calibration,
                  "With --simulate here: a directory tandem simulate --calibrate wrote");
  cmd->add_option("--straggler", flags->stragglers,
                  "With --simulate: rank=R,compute=Fx, that rank's compute takes F times as "
                  "long (under 1: faster)");
  cmd->add_option(
      "--sweep", flags->sweeps,
      "KEY=V1,V2,... (repeatable: a grid); keys: strategy bucket-mb chunks batch "
      "model prefetch pipeline schedule micro-batches ranks link threads precision gemm "
      "power-cap (a GPU's power limit in watts, set per point and put back after; needs "
      "--device cuda and the right to change it; docs/CHARACTERIZE.md), overlap-optimizer and "
      "double-buffer (yes,no), recompute, compress, tensor, sequence-parallel and tp-overlap "
      "(yes,no); not ranks, link or "
      "power-cap under mpirun; separate values with ';' when they hold commas");
  cmd->add_option("--out", flags->out,
                  "Results directory: summary.json, iterations.csv, trace.json, report.html, "
                  "points/<id>/ (under mpirun written by rank 0 alone, for the whole job)");
  cmd->add_flag("--resume", flags->resume,
                "Continue a sweep in --out (or the OUT.partial an interrupted first run left), "
                "skipping finished points (under mpirun, the points rank 0 finds finished); "
                "its settings must be the same");
  add_force_flag(*cmd, flags->force);
  cmd->add_option("--warmup", flags->warmup, "Iterations dropped from each scenario")
      ->check(integer_in(0, 1000000))
      ->capture_default_str();
  cmd->add_option("--iterations", flags->iterations, "Measured iterations per scenario")
      ->check(integer_in(1, 1000000))
      ->capture_default_str();
  add_power_flags(*cmd, flags->power);
  cmd->add_flag("--no-progress", flags->no_progress, "No progress bar on a terminal");
  cmd->add_option("--emulated-peers", flags->emulated_peers,
                  "--device cuda on one GPU: ring size the emulated all-reduce mimics")
      ->check(integer_in(1, 1024))
      ->capture_default_str();
  cmd->add_option("--emulated-blocks", flags->emulated_blocks,
                  "--device cuda on one GPU: CUDA blocks of the emulated ring's kernels (0: 16, "
                  "about NCCL's channel count)")
      ->check(integer_in(0, 65535))
      ->capture_default_str();
  cmd->add_option("--nccl-min-ctas", flags->nccl_min_ctas,
                  "--device cuda with NCCL: minCTAs of the communicator (0: NCCL's default)")
      ->check(integer_in(0, 64))
      ->capture_default_str();
  cmd->add_option("--nccl-max-ctas", flags->nccl_max_ctas,
                  "--device cuda with NCCL: maxCTAs of the communicator (0: NCCL's default)")
      ->check(integer_in(0, 64))
      ->capture_default_str();
  cmd->add_option("--kernel-timing", flags->kernel_timing,
                  "--device cuda: kernel spans from cupti activity records (falls back to "
                  "events when CUPTI cannot start) or from CUDA events around each GEMM")
      ->check(CLI::IsMember({"cupti", "events"}))
      ->capture_default_str();
  cmd->callback([flags, cmd, &run] {
    const bool batch_given = cmd->count("--batch") > 0;
    flags->ranks_given = cmd->count("--ranks") > 0;
    flags->settings = settings_of(*cmd, {"--out", "--resume", "--force", "--no-progress"});
    // With a sweep a flag may apply to some points only (--prefetch with
    // strategy=bucketed,fsdp): checked for runs without one.
    flags->given = given_options(*cmd);
    if (flags->sweeps.empty()) flags->workload.given = flags->given;
    run = [flags, batch_given](const CommandLine& argv) {
      return run_characterize(*flags, batch_given, argv);
    };
  });
}

}  // namespace tandem::cli
