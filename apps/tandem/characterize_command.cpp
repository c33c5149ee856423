// `tandem characterize`: the four scenarios of a workload (or of every point of a
// sweep), the metrics table, and the results directory.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "analysis/metric_catalogue.h"
#include "commands.h"
#include "compute/cpu/blas.h"
#include "compute/precision.h"
#include "core/error.h"
#include "core/files.h"
#include "core/parse.h"
#include "experiment/characterize.h"
#include "experiment/gpu/gpu_microbench.h"
#include "experiment/sweep.h"
#include "power/nvml.h"
#include "report/results_dir.h"
#include "timeline/chrome_trace.h"
#include "workload_flags.h"

namespace tandem::cli {

namespace {

namespace fs = std::filesystem;

struct CharacterizeFlags {
  WorkloadFlags workload;
  std::string microbench;
  std::string synthetic;
  std::vector<std::string> sweeps;
  std::string out;
  bool resume = false;
  int warmup = 2;
  int iterations = 25;
  int power_interval_ms = 50;
  std::string powercap_root = "/sys/class/powercap";
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
  bool precision_given = false;
};

// Applies one sweep value to the flags of the workload kind in use.
void apply(const std::string& key, const std::string& value, CharacterizeFlags& f,
           bool& batch_given) {
  WorkloadFlags& w = f.workload;
  const bool train = f.microbench.empty() && f.synthetic.empty();
  auto number = [&](std::string_view what) { return static_cast<int>(parse_int(value, what)); };
  if (key == "ranks") {
    w.ranks = number("--sweep ranks");
    if (w.ranks < 1 || w.ranks > 1024) throw UsageError("--sweep ranks: must be 1..1024");
    f.ranks_given = true;
  } else if (key == "threads") {
    w.threads = number("--sweep threads");
    if (w.threads < 1 || w.threads > 1024) throw UsageError("--sweep threads: must be 1..1024");
  } else if (key == "link") {
    w.link = value;
  } else if (key == "chunks" && !f.synthetic.empty()) {
    f.synthetic_chunks = number("--sweep chunks");
    if (f.synthetic_chunks < 1 || f.synthetic_chunks > 100000) {
      throw UsageError("--sweep chunks: must be 1..100000");
    }
  } else if (!train) {
    throw UsageError("--sweep " + key + ": does not apply to " +
                     (f.microbench.empty() ? "--synthetic" : "--microbench"));
  } else if (key == "strategy") {
    w.strategy = value;
  } else if (key == "chunks") {
    w.strategy = "chunked:" + value;
  } else if (key == "bucket-mb") {
    w.bucket_mb = parse_double(value, "--sweep bucket-mb");
    if (!(w.bucket_mb > 0)) throw UsageError("--sweep bucket-mb: must be > 0");
  } else if (key == "batch") {
    w.batch = number("--sweep batch");
    if (w.batch < 1) throw UsageError("--sweep batch: must be >= 1");
    batch_given = true;
  } else if (key == "model") {
    w.model = value;
  }
}

// --device cuda --microbench: ranks are this process's GPUs (all of them unless --ranks
// says otherwise; one GPU runs the emulated ring).
std::unique_ptr<Workload> make_gpu_microbench(const CharacterizeFlags& f) {
  GpuMicrobenchSpec spec{.bench = MicrobenchSpec::parse(f.microbench)};
  spec.bench.ranks = f.ranks_given ? f.workload.ranks : std::max(1, cuda_device_count());
  if (!f.workload.link.empty()) throw UsageError("--link: not with --device cuda");
  spec.precision = f.precision_given ? f.workload.precision : "bf16";
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
  if (device == Device::kCuda && !f.microbench.empty()) return make_gpu_microbench(f);
  if (!f.microbench.empty()) {
    MicrobenchSpec spec = MicrobenchSpec::parse(f.microbench);
    spec.ranks = f.workload.ranks;
    spec.blas_threads = f.workload.threads;
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

class Progress {
 public:
  Progress(std::size_t total, bool enabled) : total_(total), tty_(enabled && ::isatty(1)) {}
  void update(std::size_t done, const std::string& point, Scenario scenario) {
    if (tty_) {
      const int width = 24;
      const int filled = static_cast<int>(width * done / std::max<std::size_t>(1, total_));
      std::printf("\r\033[K[%s%s] %zu/%zu %s: %s", std::string(filled, '#').c_str(),
                  std::string(width - filled, '.').c_str(), done, total_, point.c_str(),
                  std::string(to_string(scenario)).c_str());
      std::fflush(stdout);
    }
  }
  void finish_point(std::size_t done, const std::string& point, const std::string& result) {
    if (tty_) std::printf("\r\033[K");
    std::printf("[%zu/%zu] %s: %s\n", done, total_, point.c_str(), result.c_str());
    std::fflush(stdout);
  }

 private:
  std::size_t total_;
  bool tty_;
};

std::string one_line_result(const Characterization& c) {
  char buf[200];
  const auto& m = c.metrics;
  std::snprintf(buf, sizeof buf,
                "E2E ovl %.2f ms, seq %.2f ms, ideal %.2f ms; slowdown %.1f%%, overlap ratio "
                "%.1f%%, hidden comm %.1f%%",
                m.e2e_ovl_ns.median / 1e6, m.e2e_seq_ns.median / 1e6, m.e2e_ideal_ns.median / 1e6,
                100 * m.compute_slowdown.median, 100 * m.overlap_ratio.median,
                100 * m.hidden_share.median);
  return buf;
}

void write_point_traces(const ResultsWriter& dir, const std::string& id,
                        const Characterization& c) {
  for (const auto& run : c.runs) {
    ChromeTraceOptions options{
        .other_data = {{"scenario", to_string(run.scenario)}, {"config", c.config}}};
    if (!run.power_samples.empty()) {
      for (std::size_t s = 0; s < run.power.size(); ++s) {
        CounterTrack track{.name = "power " + run.power[s].source, .series = "watts"};
        for (const auto& sample : run.power_samples) {
          if (sample.source == static_cast<int>(s))
            track.samples.push_back({sample.t_ns, sample.watts});
        }
        options.counters.push_back(std::move(track));
      }
    }
    dir.write_trace(
        fs::path("points") / id / (std::string(to_string(run.scenario)) + ".trace.json"),
        run.timeline, options);
  }
}

// summary.json, iterations.csv and trace.json from every finished point, in grid order.
void rebuild_outputs(const ResultsWriter& dir, const std::vector<std::string>& ids,
                     const std::vector<SweepAxis>& axes) {
  nlohmann::json axes_json = nlohmann::json::array();
  for (const auto& a : axes) axes_json.push_back({{"key", a.key}, {"values", a.values}});
  std::string csv = kIterationsCsvHeader;
  nlohmann::json points = nlohmann::json::array();
  for (nlohmann::json& p : dir.load_points(ids)) {
    csv += p["iterations_csv"].get<std::string>();
    p.erase("iterations_csv");
    points.push_back(std::move(p));
  }
  dir.write_summary({{"sweep", axes_json}, {"points_total", ids.size()}, {"points", points}});
  dir.write("iterations.csv", csv);
  for (const auto& id : ids) {
    const fs::path trace = dir.path() / "points" / id / "overlapped.trace.json";
    if (dir.finished_points().count(id) && fs::exists(trace)) {
      dir.write("trace.json", read_file(trace));
      break;
    }
  }
}

int run_characterize(CharacterizeFlags flags, bool batch_given, const CommandLine& argv) {
  if (!flags.microbench.empty() && !flags.synthetic.empty()) {
    throw UsageError("--microbench and --synthetic: choose one workload");
  }
  std::vector<SweepAxis> axes;
  for (const auto& s : flags.sweeps) axes.push_back(parse_sweep(s));
  const std::vector<SweepPoint> grid = expand_grid(axes);
  std::vector<std::string> ids;
  for (const auto& p : grid) ids.push_back(point_id(p));

  // Every point's workload is built (and so validated) before anything runs.
  std::vector<std::unique_ptr<Workload>> workloads;
  for (const auto& point : grid) {
    CharacterizeFlags f = flags;
    bool given = batch_given;
    for (const auto& [key, value] : point) apply(key, value, f, given);
    workloads.push_back(make_workload(f, given));
  }
  std::optional<ResultsWriter> dir;
  if (!flags.out.empty()) dir.emplace(flags.out, ResultsCommand::kCharacterize, argv, flags.resume);

  set_blas_threads(flags.workload.threads);
  // Power: RAPL zones always; NVML's GPUs with --device cuda (docs/GPU.md, "Power").
  std::vector<std::unique_ptr<PowerSource>> sources = discover_rapl(flags.powercap_root);
  std::string power_line = sources.empty() ? "RAPL unavailable (no readable zone)"
                                           : std::to_string(sources.size()) + " RAPL zone(s)";
  if (flags.workload.device == "cuda") {
    NvmlDiscovery nvml = discover_nvml();
    power_line +=
        nvml.sources.empty() ? ", NVML unavailable (" + nvml.status + ")" : ", NVML " + nvml.status;
    for (auto& s : nvml.sources) sources.push_back(std::move(s));
  }
  PowerSampler power(std::move(sources), std::chrono::milliseconds(flags.power_interval_ms));
  std::printf(
      "tandem characterize: %zu configuration%s x 4 scenarios, %d warm-up + %d measured "
      "iterations each; power: %s\n",
      grid.size(), grid.size() == 1 ? "" : "s", flags.warmup, flags.iterations, power_line.c_str());
  if (dir && !dir->finished_points().empty()) {
    std::printf("resuming %s: %zu of %zu configurations already done\n", flags.out.c_str(),
                dir->finished_points().size(), grid.size());
  }
  std::fflush(stdout);

  Progress progress(grid.size(), !flags.no_progress);
  std::optional<Characterization> last;
  for (std::size_t i = 0; i < grid.size(); ++i) {
    if (dir && dir->finished_points().count(ids[i])) continue;
    const std::string label = describe(grid[i]);
    Characterization c = characterize(
        *workloads[i], {.warmup = flags.warmup,
                        .iterations = flags.iterations,
                        .power = &power,
                        .on_scenario = [&](Scenario s) { progress.update(i, label, s); }});
    progress.finish_point(i + 1, label, one_line_result(c));
    if (dir) {
      write_point_traces(*dir, ids[i], c);
      nlohmann::json result = to_json(c);
      result["id"] = ids[i];
      nlohmann::json params = nlohmann::json::object();
      for (const auto& [key, value] : grid[i]) params[key] = value;
      result["params"] = params;
      result["iterations_csv"] = iterations_csv_rows(ids[i], c);
      dir->commit_point(ids[i], result);
      rebuild_outputs(*dir, ids, axes);
    }
    last = std::move(c);
  }
  if (last) {
    std::printf("\n%s\n", last->description.c_str());
    std::fputs(format_metrics_table(last->metrics).c_str(), stdout);
  }
  if (dir) {
    rebuild_outputs(*dir, ids, axes);
    dir->write_report();
    std::printf("wrote %s/{summary.json,iterations.csv,trace.json,report.html,points/}\n",
                flags.out.c_str());
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
      "ideal and modelled times");
  add_workload_flags(*cmd, flags->workload);
  cmd->add_option("--microbench", flags->microbench,
                  "Instead of training: gemm=N[xCOUNT],allreduce=SIZE, an N x N sgemm loop "
                  "(COUNT calls, default: as many as cover the all-reduce) while an all-reduce "
                  "of SIZE runs");
  cmd->add_option("--synthetic", flags->synthetic,
                  "Instead of training: compute=D,comm=D,chunks=N[,mode=sleep|busy], phases "
                  "of known duration (sleep: no contention by construction)");
  cmd->add_option("--sweep", flags->sweeps,
                  "KEY=V1,V2,... (repeatable: a grid); keys: strategy bucket-mb chunks batch "
                  "model ranks link threads; separate values with ';' when they hold commas");
  cmd->add_option("--out", flags->out,
                  "Results directory: summary.json, iterations.csv, trace.json, points/<id>/");
  cmd->add_flag("--resume", flags->resume, "Continue a sweep in --out, skipping finished points");
  cmd->add_option("--warmup", flags->warmup, "Iterations dropped from each scenario")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  cmd->add_option("--iterations", flags->iterations, "Measured iterations per scenario")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--power-interval-ms", flags->power_interval_ms, "Power sampling interval")
      ->check(CLI::Range(1, 60000))
      ->capture_default_str();
  cmd->add_option("--powercap-root", flags->powercap_root,
                  "Where RAPL zones are read (a directory laid out like /sys/class/powercap)")
      ->capture_default_str();
  cmd->add_flag("--no-progress", flags->no_progress, "No progress bar on a terminal");
  cmd->add_option("--emulated-peers", flags->emulated_peers,
                  "--device cuda on one GPU: ring size the emulated all-reduce mimics")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--emulated-blocks", flags->emulated_blocks,
                  "--device cuda on one GPU: CUDA blocks of the emulated ring's kernels (0: 16, "
                  "about NCCL's channel count)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--nccl-min-ctas", flags->nccl_min_ctas,
                  "--device cuda with NCCL: minCTAs of the communicator (0: NCCL's default)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option("--nccl-max-ctas", flags->nccl_max_ctas,
                  "--device cuda with NCCL: maxCTAs of the communicator (0: NCCL's default)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option("--kernel-timing", flags->kernel_timing,
                  "--device cuda: kernel spans from cupti activity records (falls back to "
                  "events when CUPTI cannot start) or from CUDA events around each GEMM")
      ->check(CLI::IsMember({"cupti", "events"}))
      ->capture_default_str();
  cmd->callback([flags, cmd, &run] {
    const bool batch_given = cmd->count("--batch") > 0;
    flags->ranks_given = cmd->count("--ranks") > 0;
    flags->precision_given = cmd->count("--precision") > 0;
    run = [flags, batch_given](const CommandLine& argv) {
      return run_characterize(*flags, batch_given, argv);
    };
  });
}

}  // namespace tandem::cli
