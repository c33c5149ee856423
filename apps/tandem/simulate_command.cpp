// `tandem simulate`: a training configuration predicted on a modelled cluster
// (simulate/simulator.h), reported as `train` reports a measured run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "analysis/statistics.h"
#include "commands.h"
#include "core/error.h"
#include "core/files.h"
#include "core/parse.h"
#include "experiment/calibrate.h"
#include "experiment/profile_replay.h"
#include "experiment/replay.h"
#include "flag_checks.h"
#include "report/analyze_summary.h"
#include "report/results_dir.h"
#include "report/train_report.h"
#include "simulate/simulator.h"
#include "trace_import/analyze_report.h"
#include "train_outputs.h"
#include "workload_flags.h"

namespace tandem::cli {

namespace {

namespace fs = std::filesystem;

struct SimulateFlags {
  WorkloadFlags workload;  // the step's shape, as train takes it (WorkloadUse::kSimulate)
  std::string cluster;
  int ranks = 0;  // 0: every device of the cluster
  std::vector<std::string> stragglers;
  std::vector<std::string> degraded;  // --degraded-link
  std::string out;
  bool force = false;
  int warmup = 0;
  int trace_ranks = 256;
  std::string calibration;             // --calibration DIR (for --cluster here)
  std::vector<std::string> calibrate;  // --calibrate RUN...
  std::vector<std::string> against;    // --against RUN...
  std::string from_trace;              // --from-trace RUN
  std::vector<std::string> what_if;    // --what-if K=V
  std::string baseline;                // --baseline TRACES (a profile's compute-only run)
};

void print_calibration(const Calibration& c) {
  std::printf("  compute: GEMMs at");
  const char* names[] = {"fp32", "tf32", "fp16", "bf16"};
  for (std::size_t p = 0; p < 4; ++p) {
    if (c.gemm_flops_per_s[p] > 0)
      std::printf(" %.1f GFLOP/s %s,", c.gemm_flops_per_s[p] / 1e9, names[p]);
  }
  if (c.weight_bytes_per_s > 0) {
    std::printf(" weights read at %.2f GB/s (in quadrature),", c.weight_bytes_per_s / 1e9);
  }
  std::printf(" memory %.1f GB/s; fit error median %.1f%%, largest %.1f%% (%s), %d sample%s\n",
              c.memory_bytes_per_s / 1e9, 100 * c.compute.median, 100 * c.compute.max,
              c.compute.worst.c_str(), c.compute.samples, c.compute.samples == 1 ? "" : "s");
  std::printf(
      "  collectives: ring at %.2f GB/s per direction, %.1f us per hop, %.1f us hand-off per "
      "collective; fit error median %.1f%%, largest %.1f%% (%s), %d sample%s\n",
      c.link.bandwidth_bytes_per_s / 1e9, c.link.latency_s * 1e6, c.link.overhead_s * 1e6,
      100 * c.comm.median, 100 * c.comm.max, c.comm.worst.c_str(), c.comm.samples,
      c.comm.samples == 1 ? "" : "s");
  if (c.first_touch_bytes_per_s > 0) {
    std::printf("  memory given back and touched again: %.2f GB/s\n",
                c.first_touch_bytes_per_s / 1e9);
  }
  if (c.give_back_s > 0) {
    std::printf("  memory given back: %.1f us per unit (the median give-back span)\n",
                c.give_back_s * 1e6);
  }
  if (c.jitter_samples > 0) {
    std::printf(
        "  ranks apart: a rank's compute in a step %.1f%% of it and %.2f ms from its peers' "
        "mean (standard deviations, combined as squares; %d rank-steps); a step waits for the "
        "slowest rank's\n",
        100 * c.compute_jitter, c.compute_jitter_s * 1e3, c.jitter_samples);
  }
  if (c.issuer_samples > 0) {
    std::printf(
        "  last issuer: the rank that issued a collective last computed again %.0f%% into its "
        "transfer (%d collectives): its communication thread took the core\n",
        100 * c.issuer_held, c.issuer_samples);
  }
  if (c.contention_samples > 0) {
    const int sharded = c.sharded_contention_samples;
    const int others = c.contention_samples - sharded;
    const auto family = [](int samples) {
      return samples > 0 ? std::to_string(samples) + " configuration" + (samples == 1 ? "" : "s")
                         : std::string("none of its own: the fit over all");
    };
    std::printf(
        "  contention: beside all-reduces overlap slows compute %.1f%% and collectives %.1f%% "
        "(%s); beside reduce-scatters and all-gathers %.1f%% and %.1f%% (%s)\n",
        100 * c.overlap_compute_slowdown, 100 * c.overlap_comm_slowdown, family(others).c_str(),
        100 * c.sharded_compute_slowdown, 100 * c.sharded_comm_slowdown, family(sharded).c_str());
  } else if (c.contention_candidates > 0) {
    std::printf(
        "  contention: not fitted (%s long enough to show it; try layerwise or smaller "
        "buckets): 0\n",
        c.contention_candidates == 1 ? "the characterized configuration did not overlap"
                                     : ("none of the " + std::to_string(c.contention_candidates) +
                                        " characterized configurations overlapped")
                                           .c_str());
  } else {
    std::printf("  contention: not fitted (no characterize run among the inputs): 0\n");
  }
  // Each configuration's own factors: how far the pooled ones stand from each.
  for (const ContentionPoint& p : c.contention_points) {
    const auto lane = [](double factor, const std::string& left_out) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%+.1f%%", 100 * factor);
      return left_out.empty() ? std::string(buf) : "left out (" + left_out + ")";
    };
    std::printf("    %s%s: compute %s, collectives %s\n", p.what.c_str(),
                p.sharded ? " (sharded)" : "", lane(p.compute, p.compute_left_out).c_str(),
                lane(p.comm, p.comm_left_out).c_str());
  }
}

// --calibrate RUN... --out DIR: the fit, written to DIR/calibration.json, and every
// measured run predicted beside its measurement.
int run_calibrate(const SimulateFlags& flags) {
  if (flags.out.empty()) throw UsageError("--calibrate: needs --out DIR for the calibration");
  const MeasuredRuns measured = read_measured_runs(flags.calibrate, "--calibrate");
  if (measured.runs.empty()) {
    throw UsageError(
        "--calibrate: none of the runs can calibrate the simulator (" +
        (measured.skipped.empty() ? std::string("no runs") : measured.skipped.front()) + ")");
  }
  const fs::path file = fs::path(flags.out) / kCalibrationFile;
  if (fs::exists(file) && !flags.force) {
    throw UsageError("--out " + flags.out + ": holds a calibration; --force replaces it");
  }
  const std::vector<ComputeSample> compute = compute_samples(measured.runs);
  const std::vector<CommSample> comm = comm_samples(measured.runs);
  const Calibration c =
      fit_calibration(compute, comm, measured.contention, give_back_samples(measured.runs),
                      spread_samples(measured.runs), issuer_samples(measured.runs));
  std::string source = "calibrated from " + std::to_string(flags.calibrate.size()) +
                       (flags.calibrate.size() == 1 ? " run directory" : " run directories");
  if (!measured.machine.empty()) source += " on " + measured.machine;
  std::printf("tandem simulate --calibrate: %zu measured configurations from %zu directories\n",
              measured.runs.size(), flags.calibrate.size());
  for (const std::string& s : measured.skipped) std::printf("  skipped %s\n", s.c_str());
  print_calibration(c);
  std::printf("%s",
              format_predictions(predict_runs(c, measured.memory_bytes, measured.runs)).c_str());
  std::error_code ec;
  fs::create_directories(flags.out, ec);
  if (ec) throw UsageError("--out " + flags.out + ": " + ec.message());
  write_file_atomic(file, calibration_json(c, measured.memory_bytes, source).dump(2) + "\n");
  const fs::path samples = fs::path(flags.out) / kCalibrationSamplesFile;
  write_file_atomic(samples, calibration_samples_csv(c, compute, comm));
  std::printf("wrote %s and %s\n", file.string().c_str(), samples.string().c_str());
  return 0;
}

// --calibration DIR --against RUN...: runs the fit did not see, predicted and compared.
int run_against(const SimulateFlags& flags) {
  if (flags.calibration.empty()) throw UsageError("--against: needs --calibration DIR");
  const MeasuredRuns measured = read_measured_runs(flags.against, "--against");
  double memory = 0;
  std::string source;
  const Calibration c = read_calibration((fs::path(flags.calibration) / kCalibrationFile).string(),
                                         "--calibration", &memory, &source);
  std::printf(
      "tandem simulate --against: %zu measured configurations, predicted with the "
      "calibration in %s (%s)\n",
      measured.runs.size(), flags.calibration.c_str(), source.c_str());
  for (const std::string& s : measured.skipped) std::printf("  skipped %s\n", s.c_str());
  std::printf("%s", format_predictions(predict_runs(c, memory, measured.runs)).c_str());
  return 0;
}

// --from-trace TRACES [--what-if ...] of PyTorch profiles (experiment/profile_replay.h):
// per step measured, replayed and what-if; --out gets the what-if as `analyze` writes a
// profile, beside the replay's replayed.trace.json.
int run_profile_replay(const SimulateFlags& flags, const WhatIf& what_if, const CommandLine& argv) {
  const std::vector<std::string> inputs = expand_trace_inputs({flags.from_trace}, "--from-trace");
  std::optional<ResultsWriter> out;
  if (!flags.out.empty()) {
    out.emplace(flags.out, ResultsCommand::kAnalyze, argv, OutputPolicy{.force = flags.force});
  }
  const ImportResult run = import_traces(inputs);
  std::optional<ImportResult> baseline;
  if (!flags.baseline.empty()) {
    if (!what_if.contention_off && !what_if.slowdown_off) {
      throw UsageError(
          "--baseline: prices contention=off and slowdown=off; give --what-if with one of them");
    }
    baseline = import_traces(expand_trace_inputs({flags.baseline}, "--baseline"));
    check_baseline_matches(run, *baseline);
  }
  const ProfileReplay r = replay_profile(run, what_if, baseline ? &*baseline : nullptr);
  const auto warmup = static_cast<std::size_t>(flags.warmup);
  const AnalyzeResult measured = analyze_timeline(run.timeline, nullptr, warmup);
  const AnalyzeResult replayed = analyze_timeline(r.replayed, nullptr, warmup);
  ImportResult changed = run;
  changed.timeline = r.what_if;
  const AnalyzeResult after = analyze_imports(changed, nullptr, warmup);
  std::printf(
      "tandem simulate --from-trace: %s, %zu trace files, %zu ranks, %zu iterations after %zu "
      "warm-up\n",
      flags.from_trace.c_str(), inputs.size(), run.ranks.size(), measured.steps.size(), warmup);
  for (const std::string& note : r.notes) std::printf("  note: %s\n", note.c_str());
  std::printf("  iteration  E2E ms: measured   replayed   what-if (%s)\n",
              what_if.describe().c_str());
  nlohmann::json steps = nlohmann::json::array();
  for (std::size_t i = 0; i < measured.steps.size(); ++i) {
    const double m = measured.steps[i].e2e_ns / 1e6;
    const double p = i < replayed.steps.size() ? replayed.steps[i].e2e_ns / 1e6 : NAN;
    const double w = i < after.steps.size() ? after.steps[i].e2e_ns / 1e6 : NAN;
    std::printf("  %9d  %16.3f %10.3f %10.3f\n", measured.steps[i].step, m, p, w);
    steps.push_back({{"step", measured.steps[i].step},
                     {"measured_ms", m},
                     {"replayed_ms", p},
                     {"what_if_ms", w}});
  }
  const double m = measured.e2e_ms.median, p = replayed.e2e_ms.median, w = after.e2e_ms.median;
  std::printf("  E2E (median)  measured %10.3f ms\n", m);
  std::printf("                replayed %10.3f ms  (%+.1f%% of measured)\n", p, 100 * (p / m - 1));
  if (what_if.any()) {
    std::printf("                what-if  %10.3f ms  (%+.1f%% of replayed: %s)\n", w,
                100 * (w / p - 1), what_if.describe().c_str());
  }
  std::fflush(stdout);
  if (out) {
    nlohmann::json body = analyze_summary_body(after, changed, nullptr, {});
    body["simulated"] = {{"replay_of", flags.from_trace},
                         {"what_if", what_if.describe()},
                         {"measured_step_ms", m},
                         {"replayed_step_ms", p},
                         {"what_if_step_ms", w},
                         {"steps", steps},
                         {"notes", r.notes}};
    out->write_summary(body);
    out->write("iterations.csv", iterations_csv(after));
    out->write("collectives.csv", collectives_csv(after));
    const nlohmann::json source = {{"source", "tandem simulate --from-trace"}, {"inputs", inputs}};
    out->write_trace("trace.json", r.what_if, {.other_data = source, .counters = {}});
    if (what_if.any()) {
      out->write_trace("replayed.trace.json", r.replayed, {.other_data = source, .counters = {}});
    }
    out->write_report();
    out->commit();
    std::printf("wrote %s/{summary.json,iterations.csv,collectives.csv,trace.json,%sreport.html}\n",
                out->path().c_str(), what_if.any() ? "replayed.trace.json," : "");
  }
  return 0;
}

// --from-trace RUN [--what-if ...]: the run replayed as measured, and the what-if; RUN a
// results directory of tandem's, or PyTorch profiles (run_profile_replay).
int run_replay(const SimulateFlags& flags, const CommandLine& argv) {
  const WhatIf what_if = WhatIf::parse(flags.what_if);
  std::error_code ec;
  if (!fs::exists(fs::path(flags.from_trace) / "summary.json", ec) &&
      !is_characterize_point(flags.from_trace)) {
    return run_profile_replay(flags, what_if, argv);
  }
  if (!flags.baseline.empty()) {
    throw UsageError(
        "--baseline: for a replay of PyTorch profiles; a characterize run's own compute-only "
        "scenario prices contention=off and slowdown=off");
  }
  std::optional<ResultsWriter> out;
  if (!flags.out.empty()) {
    out.emplace(flags.out, ResultsCommand::kTrain, argv, OutputPolicy{.force = flags.force});
  }
  const Replay r = replay_run(flags.from_trace, what_if);
  const double replayed = median_e2e_s(r.replayed.timeline, 0);
  const double changed = median_e2e_s(r.what_if.timeline, 0);
  std::printf("tandem simulate --from-trace: %s, %d ranks, %s, strategy %s\n", r.what.c_str(),
              r.config.ranks, r.config.model.text.c_str(),
              r.config.reducer.plan.strategy.to_string().c_str());
  for (const std::string& note : r.notes) std::printf("  note: %s\n", note.c_str());
  std::printf("  E2E (iteration window)  measured %10.3f ms\n", r.measured_s * 1e3);
  std::printf("                          replayed %10.3f ms  (%+.1f%% of measured)\n",
              replayed * 1e3, 100 * (replayed / r.measured_s - 1));
  if (what_if.any()) {
    std::printf("                          what-if  %10.3f ms  (%+.1f%% of replayed: %s)\n",
                changed * 1e3, 100 * (changed / replayed - 1), what_if.describe().c_str());
  }
  // Without contention, beside the point's own eq. 4 (docs/SIMULATE.md, "Without
  // contention, against eq. 4").
  if ((what_if.slowdown_off || what_if.contention_off) && std::isfinite(r.e2e_ideal_s)) {
    std::printf(
        "                          E2E_ideal %9.3f ms  (eq. 4, the point's own; the what-if "
        "%+.1f%% of it)\n",
        r.e2e_ideal_s * 1e3, 100 * (changed / r.e2e_ideal_s - 1));
  }
  // Each replayed step (the middle half of the run's by E2E), as a profile's iterations.
  std::printf(
      "  step   measured   replayed    what-if  (E2E ms of the middle half of the steps; "
      "what-if: %s)\n",
      what_if.describe().c_str());
  nlohmann::json steps = nlohmann::json::array();
  for (const Replay::Step& s : r.steps) {
    std::printf("  %4d %10.3f %10.3f %10.3f\n", s.step, s.measured_s * 1e3, s.replayed_s * 1e3,
                s.what_if_s * 1e3);
    steps.push_back({{"step", s.step},
                     {"measured_ms", s.measured_s * 1e3},
                     {"replayed_ms", number_or_null(s.replayed_s * 1e3)},
                     {"what_if_ms", number_or_null(s.what_if_s * 1e3)}});
  }
  std::fflush(stdout);
  nlohmann::json simulated = {{"replay_of", flags.from_trace},
                              {"what_if", what_if.describe()},
                              {"measured_step_ms", r.measured_s * 1e3},
                              {"replayed_step_ms", replayed * 1e3},
                              {"what_if_step_ms", changed * 1e3},
                              {"e2e_ideal_ms", number_or_null(r.e2e_ideal_s * 1e3)},
                              {"calibration", nullptr},
                              {"steps", steps}};
  // The run as replayed beside the what-if's own trace: report.html draws both Gantts.
  if (out && what_if.any() && r.config.record) {
    out->write_trace("replayed.trace.json", r.replayed.timeline,
                     {.other_data = train_config_json(r.config, r.replayed)});
  }
  const int rc = write_train_outputs(r.config, r.what_if, flags.warmup, nullptr,
                                     out ? &*out : nullptr, {{"simulated", simulated}});
  if (out && what_if.any() && r.config.record) {
    std::printf(
        "wrote %s/replayed.trace.json (the run replayed, beside the what-if in "
        "report.html)\n",
        flags.out.c_str());
  }
  return rc;
}

int run_simulate(const SimulateFlags& flags, bool batch_given, const CommandLine& argv) {
  if (!flags.what_if.empty() && flags.from_trace.empty()) {
    throw UsageError("--what-if: changes a replay; give --from-trace RUN");
  }
  if (!flags.baseline.empty() && flags.from_trace.empty()) {
    throw UsageError("--baseline: a compute-only profile for --from-trace TRACES");
  }
  if (!flags.calibrate.empty() || !flags.against.empty() || !flags.from_trace.empty()) {
    // Fitting or checking a calibration, or a replay, simulates the runs' own
    // configurations.
    const char* mode = !flags.from_trace.empty() ? "--from-trace"
                       : flags.calibrate.empty() ? "--against"
                                                 : "--calibrate";
    for (const std::string& flag : flags.workload.given) {
      if (flag == "--calibrate" || flag == "--against" || flag == "--calibration" ||
          flag == "--out" || flag == "--force" || flag == "--from-trace" || flag == "--what-if" ||
          (flag == "--baseline" && !flags.from_trace.empty()) ||
          (flag == "--warmup" && !flags.from_trace.empty())) {
        continue;
      }
      throw UsageError(flag + ": " + mode +
                       " simulates the configurations its runs measured; give " + flag +
                       " to a simulation");
    }
    if (!flags.from_trace.empty()) {
      if (!flags.calibrate.empty() || !flags.against.empty()) {
        throw UsageError("--from-trace: a replay, not with --calibrate or --against");
      }
      return run_replay(flags, argv);
    }
    if (!flags.calibrate.empty() && !flags.against.empty()) {
      throw UsageError(
          "--against: check a calibration after writing it (--calibration DIR "
          "--against RUN...), not with --calibrate");
    }
    return flags.calibrate.empty() ? run_against(flags) : run_calibrate(flags);
  }
  if (flags.cluster.empty()) {
    throw UsageError(
        "--cluster: required (NODESxDEVICESxPROFILE, a JSON file, or here with "
        "--calibration)");
  }
  const bool here = flags.cluster == "here";
  SimulateOptions options{.cluster = resolve_cluster(
                              flags.cluster, flags.calibration,
                              here ? (flags.ranks > 0 ? flags.ranks : flags.workload.ranks) : 0)};
  for (const std::string& s : flags.stragglers) options.stragglers.push_back(Straggler::parse(s));
  options.recorded_ranks = flags.trace_ranks;
  for (const std::string& d : flags.degraded) {
    const DegradedLink link = DegradedLink::parse(d);
    if (link.node >= options.cluster.nodes) {
      throw UsageError("--degraded-link " + d + ": the cluster has " +
                       std::to_string(options.cluster.nodes) + " nodes (0.." +
                       std::to_string(options.cluster.nodes - 1) + ")");
    }
    options.cluster.degraded.push_back(link);
  }
  WorkloadFlags workload = flags.workload;
  workload.ranks = flags.ranks > 0 ? flags.ranks : options.cluster.devices();
  TrainConfig config = to_train_config(workload, batch_given, /*runs_here=*/false);
  if (config.pipeline.split_auto) config.pipeline.split = predicted_split(config, options);
  std::optional<ResultsWriter> out;
  if (!flags.out.empty()) {
    out.emplace(flags.out, ResultsCommand::kTrain, argv, OutputPolicy{.force = flags.force});
  }
  std::printf("tandem simulate: %d ranks on %s\n  model %s (%lld parameters), batch %d per rank",
              config.ranks, options.cluster.describe().c_str(), config.model.text.c_str(),
              static_cast<long long>(config.model.parameter_count()), config.batch);
  if (config.accumulate > 1) std::printf(" x %d micro-batches", config.accumulate);
  std::printf(", %s GEMMs\n", std::string(to_string(config.precision)).c_str());
  if (config.model.tensor > 1) {
    const int replicas = outer_ranks(config) / std::max(1, config.pipeline.stages);
    std::printf(
        "  tensor parallel %d x pipeline %d x data %d (tensor innermost): %lld parameters per "
        "rank, each group's collectives on the critical path%s%s (docs/TENSOR.md)\n",
        config.model.tensor, config.pipeline.stages, replicas,
        static_cast<long long>(config.model.rank_parameter_count()),
        config.model.sequence_parallel ? ", sequence-parallel" : "",
        config.model.tp_overlap ? ", overlapped in ring steps" : "");
  }
  const Strategy& strategy = config.reducer.plan.strategy;
  if (config.pipeline.stages > 1) {
    std::printf("  pipeline %s; replicas' strategy %s\n", stage_plan(config).describe().c_str(),
                strategy.to_string().c_str());
  } else if (strategy.sharded()) {
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
  const DeviceProfile& device = options.cluster.device;
  std::printf("  device %s: %s; overlap slows compute %.1f%% and communication %.1f%%",
              device.name.c_str(), device.source.c_str(), 100 * device.overlap_compute_slowdown,
              100 * device.overlap_comm_slowdown);
  const double sharded_compute = device.compute_slowdown(SpanKind::kReduceScatter);
  const double sharded_comm = device.comm_slowdown(SpanKind::kReduceScatter);
  if (sharded_compute != device.overlap_compute_slowdown ||
      sharded_comm != device.overlap_comm_slowdown) {
    std::printf(", beside reduce-scatters and all-gathers %.1f%% and %.1f%%", 100 * sharded_compute,
                100 * sharded_comm);
  }
  std::printf(" (%s)\n", here ? "calibrated" : "uncalibrated profile values");
  std::fflush(stdout);
  const TrainResult result = simulate_training(config, options);
  std::printf("  %s\n  %s\n", result.blas.c_str(), result.backend_details.c_str());
  if (config.record && flags.trace_ranks > 0 && config.ranks > flags.trace_ranks) {
    std::printf(
        "  timeline: %d of %d ranks recorded (--trace-ranks; every class of alike ranks "
        "represented, the others are copies); per-rank means are over them\n",
        flags.trace_ranks, config.ranks);
  }
  nlohmann::json simulated = {
      {"cluster", options.cluster.name},
      {"nodes", options.cluster.nodes},
      {"devices_per_node", options.cluster.devices_per_node},
      {"device", device.name},
      {"device_source", device.source},
      {"gemm_efficiency", device.gemm_efficiency},
      {"overlap_compute_slowdown", device.overlap_compute_slowdown},
      {"overlap_comm_slowdown", device.overlap_comm_slowdown},
      {"sharded_compute_slowdown", sharded_compute},
      {"sharded_comm_slowdown", sharded_comm},
      {"first_touch_gbps", device.first_touch_bytes_per_s / 1e9},
      {"compute_jitter", device.compute_jitter},
      {"compute_jitter_ms", device.compute_jitter_s * 1e3},
      {"issuer_held", device.issuer_held},
      {"calibration", here ? nlohmann::json(flags.calibration) : nlohmann::json(nullptr)},
  };
  nlohmann::json stragglers = nlohmann::json::array();
  for (const Straggler& s : options.stragglers) {
    stragglers.push_back({{"rank", s.rank}, {"compute", s.compute}});
  }
  simulated["stragglers"] = stragglers;
  nlohmann::json degraded = nlohmann::json::array();
  for (const DegradedLink& d : options.cluster.degraded) {
    degraded.push_back({{"node", d.node}, {"intra", d.intra}, {"network", d.network}});
  }
  simulated["degraded_links"] = degraded;
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
                  "NODESxDEVICESxPROFILE (8x8xh100), DEVICESxPROFILE, a JSON file, or here "
                  "(this machine, with --calibration); built-in profiles: " +
                      builtin_profiles());
  cmd->add_option("--degraded-link", flags->degraded,
                  "node=N,network=Fx and/or intra=Fx: that node's network share or intra-node "
                  "link at F of its bandwidth (repeatable)");
  cmd->add_option("--trace-ranks", flags->trace_ranks,
                  "Spans of at most N ranks in the timeline, trace.json and per-rank metrics "
                  "(every class of alike ranks first; 0: all)")
      ->check(integer_in(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--calibration", flags->calibration,
                  "With --cluster here: a directory --calibrate wrote (docs/SIMULATE.md)");
  cmd->add_option("--calibrate", flags->calibrate,
                  "RUN...: fit the simulator to these measured train and characterize results "
                  "directories, print each run predicted beside its measurement, and write "
                  "--out DIR/calibration.json and DIR/samples.csv (every sample fitted, with "
                  "its prediction)")
      ->expected(1, -1);
  cmd->add_option("--from-trace", flags->from_trace,
                  "RUN: replay a measured train or characterize results directory step by "
                  "step, each step with its own passes and transfers as measured (the replay "
                  "should match its steps), then "
                  "with --what-if; or PyTorch profiler traces (a file per rank, or a directory "
                  "of them), replayed as a graph of what waited for what; --out gets the "
                  "what-if's results");
  cmd->add_option(
      "--what-if", flags->what_if,
      "With --from-trace: network=Fx (collectives and transfers F times as fast), "
      "contention=off (every pass and transfer at its unoverlapped time), "
      "slowdown=off (every pass at its unoverlapped time, communication as it ran: "
      "E2E ideal, eq. 4, scheduled), overlap=off (communication after compute), bucket-mb=M (DDP's "
      "bucket cap, bucketed and sequential runs), ranks=N (N ranks with the run's "
      "per-rank batch, collectives priced by the run's fit of its link); over an emulated "
      "--link only its wire time is the network's, and a collective never measured is that "
      "wire plus the rest fitted to the run's own; bucket-mb and ranks not for profiles; "
      "repeatable");
  cmd->add_option("--baseline", flags->baseline,
                  "TRACES: with --from-trace PyTorch profiles and --what-if contention=off or "
                  "slowdown=off, a "
                  "compute-only profile of the same job (as analyze --baseline takes): its "
                  "kernels' times price the overlapped ones");
  cmd->add_option("--against", flags->against,
                  "RUN...: with --calibration, predict these measured runs (ones the fit did not "
                  "see) beside their measurements")
      ->expected(1, -1);
  cmd->add_option("--ranks", flags->ranks,
                  "Ranks (default: every device of the cluster; 2 with --cluster here)")
      ->check(integer_in(1, 1 << 20));
  flags->workload.steps = 3;
  add_workload_flags(*cmd, flags->workload, WorkloadUse::kSimulate);
  cmd->add_option("--straggler", flags->stragglers,
                  "rank=R,compute=Fx: that rank's compute takes F times as long (under 1: faster; "
                  "repeatable)");
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
