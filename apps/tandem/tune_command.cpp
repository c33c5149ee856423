// `tandem tune` (docs/TUNE.md): the fastest configuration of a training run. The default
// (bucketed, 25 MiB) is characterized first (its four scenarios: the simulator's
// calibration, and the sequential time every answer is compared with); the simulator then
// ranks the space, and successive halving measures the most promising on real steps
// (experiment/tune.h). With --simulate the simulator alone ranks the space of a cluster.
//
// In a process job (mpirun) every rank runs every measurement; rank 0 decides what comes
// next and tells the others, and alone prints and writes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "analysis/statistics.h"
#include "comm/backend_registry.h"
#include "commands.h"
#include "core/error.h"
#include "core/files.h"
#include "core/memory.h"
#include "core/parse.h"
#include "experiment/calibrate.h"
#include "experiment/characterize.h"
#include "experiment/tune.h"
#include "experiment/workload.h"
#include "flag_checks.h"
#include "job_flags.h"
#include "power/nvml.h"
#include "report/results_dir.h"
#include "simulate/calibration.h"
#include "simulate/simulator.h"
#include "workload_flags.h"

namespace tandem::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct TuneFlags {
  WorkloadFlags workload;
  JobFlags job;
  std::string out;
  bool force = false;
  bool resume = false;
  std::string budget = "10m";
  std::vector<std::string> space;  // --space KEY=V1,V2
  bool exhaustive = false;
  int warmup = 2;
  int baseline_iterations = 10;
  int top = 12;
  int candidates = 0;  // --candidates: the first round's size (0: default_first_round)
  std::string objective = "time";
  PowerFlags power;
  bool simulate = false;
  std::string cluster;
  std::string calibration;
  bool batch_given = false;
  bool ranks_given = false;
  nlohmann::json settings;
  // The flags of the run, as `tandem train` takes them: (flag, its values; none for a switch).
  std::vector<std::pair<std::string, std::vector<std::string>>> train_args;
};

// What tune chooses: given by the user, it would be overridden in silence.
constexpr const char* kChosenFlags[] = {
    "--strategy",      "--bucket-mb", "--prefetch", "--no-reshard-after-forward",
    "--micro-batches", "--pipeline",  "--schedule", "--split",
    "--accumulate",    "--threads",   "--tensor",   "--sequence-parallel",
    "--tp-overlap"};

std::string quoted(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_.,:=/+@%") == std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The run's flags, then the candidate's (which replace any of the same name: a
// pipeline's --batch).
std::string train_command(const TuneFlags& flags, const TuneCandidate& c) {
  std::string text = "tandem train";
  for (const auto& [flag, values] : flags.train_args) {
    const bool replaced =
        std::any_of(c.flags.begin(), c.flags.end(), [&](const auto& f) { return f.first == flag; });
    if (replaced) continue;
    text += " " + flag;
    for (const std::string& v : values) text += " " + quoted(v);
  }
  for (const auto& [flag, value] : c.flags) {
    text += " " + flag;
    if (!value.empty()) text += " " + quoted(value);
  }
  return text;
}

std::string ms_text(double seconds) {
  if (!std::isfinite(seconds)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", seconds * 1e3);
  return buf;
}

std::string duration_text(double seconds) {
  char buf[32];
  if (seconds >= 90) {
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(seconds) / 60,
                  static_cast<int>(seconds) % 60);
  } else if (seconds >= 10) {
    std::snprintf(buf, sizeof buf, "%.0fs", seconds);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);  // a tiny search is not "0s"
  }
  return buf;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Joules per measured step over every power source, from the samples of a measurement
// (the steps from `warmup` on: their first start to their last end on the timeline).
double energy_per_step(const PowerSampler& sampler, const Timeline& timeline, int warmup,
                       int steps) {
  std::int64_t begin = INT64_MAX, end = INT64_MIN;
  for (const Span& span : timeline.spans) {
    if (span.step < warmup) continue;
    begin = std::min(begin, span.start_ns);
    end = std::max(end, span.end_ns);
  }
  if (begin >= end || steps <= 0) return kUndefinedScore;
  double joules = 0;
  for (const PowerSummary& p : sampler.summarize(begin, end)) joules += p.energy_joules;
  return joules / steps;
}

// The table of the candidates measured (or, simulated, the best predicted), fastest first.
void print_table(const std::vector<TuneCandidate>& candidates, bool measured, int top) {
  std::vector<int> order;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    const TuneCandidate& c = candidates[static_cast<std::size_t>(i)];
    if (c.refused.empty() && (!measured || !c.samples_s.empty())) order.push_back(i);
  }
  const auto key = [&](int i) {
    const TuneCandidate& c = candidates[static_cast<std::size_t>(i)];
    // The last round's candidates first (the most rounds), then by what they measured.
    return measured ? std::pair(-static_cast<double>(c.rounds), c.measured_s())
                    : std::pair(0.0, c.predicted_s);
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });
  std::printf("\n  %-58s %12s %12s %21s %6s %10s\n", "configuration", "predicted", "measured",
              "p10 - p90", "rounds", "memory");
  int shown = 0;
  for (const int i : order) {
    if (shown++ == top) {
      std::printf("  ... %zu more in summary.json\n", order.size() - static_cast<std::size_t>(top));
      break;
    }
    const TuneCandidate& c = candidates[static_cast<std::size_t>(i)];
    const Summary s = summarize(c.samples_s);
    std::string range = "";
    if (s.count > 0) range = ms_text(s.p10) + " - " + ms_text(s.p90);
    std::string label = c.label() + (c.is_default ? " (default)" : "");
    std::printf("  %-58s %12s %12s %21s %6d %10s\n", label.c_str(), ms_text(c.predicted_s).c_str(),
                s.count > 0 ? ms_text(s.median).c_str() : "", range.c_str(), c.rounds,
                format_bytes(c.memory_bytes).c_str());
  }
}

// candidates.csv: every candidate, refused ones with their reason.
std::string candidates_csv(const std::vector<TuneCandidate>& candidates) {
  std::string out =
      "id,configuration,default,refused,predicted_ms,memory_bytes,rounds,"
      "measured_ms,p10_ms,p90_ms,steps\n";
  const auto cell = [](const std::string& s) {
    std::string q = "\"";
    for (const char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  const auto num = [](double v) {
    if (!std::isfinite(v)) return std::string();
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return std::string(buf);
  };
  for (const TuneCandidate& c : candidates) {
    const Summary s = summarize(c.samples_s);
    out += cell(c.id()) + "," + cell(c.label()) + "," + (c.is_default ? "1" : "0") + "," +
           cell(c.refused) + "," + (c.refused.empty() ? num(c.predicted_s * 1e3) : "") + "," +
           (c.refused.empty() ? num(c.memory_bytes) : "") + "," + std::to_string(c.rounds) + "," +
           num(s.median * 1e3) + "," + num(s.p10 * 1e3) + "," + num(s.p90 * 1e3) + "," +
           std::to_string(s.count) + "\n";
  }
  return out;
}

nlohmann::json space_json(const TuneSpace& s) {
  const auto yes_no = [](const std::vector<bool>& axis) {
    std::vector<std::string> out;
    for (const bool v : axis) out.emplace_back(v ? "yes" : "no");
    return out;
  };
  const std::vector<std::string> reshard = yes_no(s.reshard);
  return {{"strategy", s.strategies},
          {"bucket-mb", s.bucket_mb},
          {"prefetch", s.prefetch},
          {"reshard", reshard},
          {"micro-batches", s.micro_batches},
          {"pipeline", s.pipeline},
          {"schedule", s.schedules},
          {"threads", s.threads},
          {"tensor", s.tensor},
          {"sequence-parallel", yes_no(s.sequence_parallel)},
          {"tp-overlap", yes_no(s.tp_overlap)}};
}

// The base run: the user's flags with tune's choices at train's defaults.
TrainConfig base_config(const TuneFlags& flags, bool runs_here) {
  for (const char* flag : kChosenFlags) {
    if (flags.workload.given.contains(flag) && !(std::string(flag) == "--threads" && !runs_here)) {
      // The axis of the space that holds the flag's choice.
      const std::string name = std::string(flag).substr(2);
      const std::string hint =
          name == "no-reshard-after-forward" ? "restrict its values with --space reshard=yes,no"
          : name == "accumulate" ? "it cuts --batch into micro-batches itself: restrict them "
                                   "with --space micro-batches=V1,V2"
          : name == "split"      ? "it splits a pipeline's stages by their measured times "
                                   "(--split auto), or by FLOPs under mpirun"
                                 : "restrict its values with --space " + name + "=V1,V2";
      throw UsageError(std::string(flag) + ": tune chooses it; " + hint + " (docs/TUNE.md)");
    }
  }
  for (const char* flag : {"--no-timeline", "--eval-every"}) {
    if (flags.workload.given.contains(flag)) {
      throw UsageError(std::string(flag) + ": not with tune, which times every step");
    }
  }
  WorkloadFlags w = flags.workload;
  w.given.clear();
  TrainConfig base = to_train_config(w, flags.batch_given, runs_here);
  if (base.ranks < 2) {
    throw UsageError("--ranks " + std::to_string(base.ranks) +
                     ": tune chooses how gradients move between ranks; it needs 2 or more");
  }
  return base;
}

TuneSpace make_space(const TuneFlags& flags, const TrainConfig& base, bool runs_here) {
  TuneSpace space = TuneSpace::defaults(
      base, runs_here ? static_cast<int>(std::thread::hardware_concurrency()) : 1);
  std::set<std::string> keys;
  for (const std::string& s : flags.space) {
    const std::string key(trim(std::string_view(s).substr(0, s.find('='))));
    if (!keys.insert(key).second) {
      throw UsageError("--space " + key +
                       "=...: given twice (one --space per key, its values "
                       "comma-separated)");
    }
    space.set(s);
  }
  return space;
}

nlohmann::json tune_body(const TuneFlags& flags, const std::string& mode,
                         const std::vector<TuneCandidate>& candidates, const TuneSpace& space) {
  nlohmann::json list = nlohmann::json::array();
  for (const TuneCandidate& c : candidates) {
    nlohmann::json j = to_json(c);
    j["command"] = train_command(flags, c);
    list.push_back(std::move(j));
  }
  nlohmann::json pareto = nlohmann::json::array();
  for (const int i : pareto_front(candidates)) {
    pareto.push_back(candidates[static_cast<std::size_t>(i)].id());
  }
  return {{"mode", mode}, {"space", space_json(space)}, {"candidates", list}, {"pareto", pareto}};
}

void write_outputs(ResultsWriter& writer, const std::vector<TuneCandidate>& candidates,
                   const nlohmann::json& body) {
  writer.write("candidates.csv", candidates_csv(candidates));
  writer.write_summary({{"tune", body}});
  writer.write_report();
  writer.commit();
  std::printf("wrote %s/{summary.json,candidates.csv,report.html}\n", writer.path().c_str());
}

// --simulate: the simulator alone ranks the space on a cluster; nothing runs here.
int run_simulated(const TuneFlags& flags, const CommandLine& argv) {
  if (flags.cluster.empty()) {
    throw UsageError(
        "--simulate: needs --cluster (NODESxDEVICESxPROFILE, a JSON file, or here "
        "with --calibration)");
  }
  for (const char* flag : {"--exhaustive", "--resume", "--budget", "--baseline-iterations",
                           "--warmup", "--backend", "--objective"}) {
    if (flags.workload.given.contains(flag)) {
      throw UsageError(std::string(flag) + ": for a measured search; not with --simulate");
    }
  }
  TuneFlags f = flags;
  const bool here = flags.cluster == "here";
  Cluster cluster =
      resolve_cluster(flags.cluster, flags.calibration, here ? flags.workload.ranks : 0);
  if (!flags.ranks_given) f.workload.ranks = cluster.devices();
  std::optional<ResultsWriter> out;
  if (!flags.out.empty()) {
    out.emplace(flags.out, ResultsCommand::kTune, argv, OutputPolicy{.force = flags.force});
  }
  const TrainConfig base = base_config(f, false);
  const TuneSpace space = make_space(f, base, false);
  std::vector<TuneCandidate> candidates = tune_candidates(base, space, true, false);
  // A large cluster takes minutes to simulate a space: say how far it is, every 5 s.
  const Clock::time_point began = Clock::now();
  Clock::time_point said = began;
  predict_candidates(candidates, cluster, [&](std::size_t done, std::size_t total) {
    if (seconds_since(said) < 5) return;
    said = Clock::now();
    const double elapsed = seconds_since(began);
    std::printf(
        "  simulated %zu of %zu configurations, about %s left\n", done, total,
        duration_text(elapsed / static_cast<double>(done) * static_cast<double>(total - done))
            .c_str());
    std::fflush(stdout);
  });
  std::size_t refused = 0;
  for (const TuneCandidate& c : candidates) refused += c.refused.empty() ? 0 : 1;
  std::printf(
      "tandem tune --simulate: %s, %d ranks, batch %d per rank on %s\n  %zu configurations, %zu "
      "of them refused (they do not fit, or cannot run); ranked by predicted step time\n",
      base.model.text.c_str(), base.ranks, base.batch, cluster.describe().c_str(),
      candidates.size(), refused);
  print_table(candidates, false, flags.top);
  int best = -1, fallback = -1;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    const TuneCandidate& c = candidates[static_cast<std::size_t>(i)];
    if (c.is_default) fallback = i;
    if (c.refused.empty() &&
        (best < 0 || c.predicted_s < candidates[static_cast<std::size_t>(best)].predicted_s)) {
      best = i;
    }
  }
  nlohmann::json body = tune_body(f, "simulated", candidates, space);
  body["cluster"] = cluster.describe();
  if (best >= 0) {
    const TuneCandidate& b = candidates[static_cast<std::size_t>(best)];
    const TuneCandidate& d = candidates[static_cast<std::size_t>(fallback)];
    std::printf("\npredicted best: %s, %s", b.label().c_str(), ms_text(b.predicted_s).c_str());
    if (d.refused.empty()) {
      std::printf(" (the default %s: %s)", ms_text(d.predicted_s).c_str(),
                  d.predicted_s > 0 ? (std::to_string(static_cast<int>(std::lround(
                                           100 * (d.predicted_s / b.predicted_s - 1)))) +
                                       "% slower")
                                          .c_str()
                                    : "");
    }
    // The simulation of the answer: the run's flags on the same cluster (and calibration).
    const std::string command =
        "tandem simulate --cluster " + quoted(flags.cluster) +
        (flags.calibration.empty() ? "" : " --calibration " + quoted(flags.calibration)) +
        train_command(f, b).substr(std::string("tandem train").size());
    std::printf("\n  simulated on %s: predicted, not measured\n  %s\n", flags.cluster.c_str(),
                command.c_str());
    (void)argv;
    body["answer"] = {
        {"best", b.id()}, {"best_predicted_ms", b.predicted_s * 1e3}, {"command", command}};
  } else {
    std::printf("\nno configuration fits %s\n", cluster.describe().c_str());
    body["answer"] = {{"best", nullptr}};
  }
  std::fflush(stdout);
  if (out) write_outputs(*out, candidates, body);
  return 0;
}

// The baseline: the default's four scenarios, the calibration fitted from them (unless
// --calibration gives one) and what measuring costs here.
struct Baseline {
  Calibration calibration;
  std::string calibration_source;
  double memory_bytes = 0;
  double sequential_s = 0;  // the default's sequential scenario, median E2E
  double overlapped_s = 0;  // its overlapped one
  double overhead_s = 0;    // per measurement: what a run costs besides its steps
  double wall_s = 0;
  double sequential_j = kUndefinedScore;  // per step, the energy objective
  nlohmann::json to_json() const {
    return {{"calibration", calibration_json(calibration, memory_bytes, calibration_source)},
            {"sequential_ms", sequential_s * 1e3},
            {"overlapped_ms", overlapped_s * 1e3},
            {"overhead_s", overhead_s},
            {"sequential_j_per_step", number_or_null(sequential_j)},
            {"wall_s", wall_s}};
  }
};

Baseline baseline_from_json(const nlohmann::json& j, ResultsWriter& writer) {
  // The calibration is read back through its file format (so a damaged one is named).
  const fs::path file = writer.working_path() / "points" / "baseline" / kCalibrationFile;
  Baseline b;
  b.calibration =
      read_calibration(file.string(), "--resume", &b.memory_bytes, &b.calibration_source);
  b.sequential_s = j.at("sequential_ms").get<double>() / 1e3;
  b.overlapped_s = j.at("overlapped_ms").get<double>() / 1e3;
  b.overhead_s = j.at("overhead_s").get<double>();
  b.wall_s = j.at("wall_s").get<double>();
  const nlohmann::json& e = j.value("sequential_j_per_step", nlohmann::json());
  b.sequential_j = e.is_number() ? e.get<double>() : kUndefinedScore;
  return b;
}

int run_measured(TuneFlags flags, const CommandLine& argv) {
  const std::string backend = resolve_backend(flags.job.backend);
  flags.workload.ranks = job_ranks(backend, flags.workload.ranks, flags.ranks_given);
  const double budget_s =
      static_cast<double>(for_flag("--budget",
                                   [&] {
                                     const std::int64_t ns = parse_duration_ns(flags.budget);
                                     if (ns < 1'000'000'000 || ns > 30LL * 86400 * 1'000'000'000) {
                                       throw UsageError("must be 1s to 30 days, got '" +
                                                        flags.budget + "'");
                                     }
                                     return ns;
                                   })) /
      1e9;
  const TrainConfig base = base_config(flags, true);
  check_in_process_flags(flags.workload, backend);
  const TuneSpace space = make_space(flags, base, true);
  // --split auto measures unit times in this process: one process, one split.
  std::vector<TuneCandidate> candidates = tune_candidates(base, space, backend == "local", true);
  const auto default_it = std::find_if(candidates.begin(), candidates.end(),
                                       [](const TuneCandidate& c) { return c.is_default; });
  if (!default_it->refused.empty()) {
    throw UsageError("the default configuration (" + default_it->label() +
                     ") cannot run: " + default_it->refused);
  }
  std::optional<Calibration> given;
  double given_memory = 0;
  std::string given_source;
  if (!flags.calibration.empty()) {
    given = read_calibration((fs::path(flags.calibration) / kCalibrationFile).string(),
                             "--calibration", &given_memory, &given_source);
  }
  if (flags.settings.contains("--ranks")) flags.settings["--ranks"] = std::to_string(base.ranks);
  // The CPU's GEMM settings, process-wide, before the header names them (as characterize
  // does; every measurement applies its candidate's threads again). Asking the library what
  // it runs also sets it up here, once, before any rank's thread calls it.
  if (base.device == Device::kCpu) apply_cpu_gemm_flags(flags.workload);

  Job job(backend, job_options(flags.job, base.timeout_ns));
  expect_job_size(job, base.ranks);
  SharedOutputs outputs = open_shared_outputs(
      job, flags.out, ResultsCommand::kTune, argv,
      OutputPolicy{.resume = flags.resume, .force = flags.force, .settings = flags.settings});
  if (!outputs.refused.empty()) return 2;  // the leader said why (job_flags.h)
  ResultsWriter* writer = outputs.writer.get();
  // --objective energy: rank 0's host's power sources (RAPL; NVML's GPUs on cuda), as
  // train samples them; none is one line on every rank.
  const bool energy = flags.objective == "energy";
  std::optional<PowerSampler> power;
  if (energy) {
    std::string refused;
    if (job.leader()) {
      NvmlDiscovery found = discover_power(flags.power.powercap_root, base.device == Device::kCuda);
      if (found.sources.empty()) {
        refused = "--objective energy: no power source on this host (" + found.status +
                  "); energy cannot be measured here";
      } else {
        std::printf("  power: %s\n", found.status.c_str());
        power.emplace(std::move(found.sources), std::chrono::milliseconds(flags.power.interval_ms));
      }
    }
    refused = share_from_leader(job, refused);
    if (!refused.empty()) {
      if (job.leader()) throw UsageError(refused);
      return 2;
    }
  }
  const auto stored = [&](const std::string& id) -> std::optional<nlohmann::json> {
    if (writer == nullptr || !outputs.finished.contains(id)) return std::nullopt;
    return writer->load_points({id}).front();
  };
  const Clock::time_point start = Clock::now();
  try {
    const TuneCandidate& def = *default_it;
    if (job.leader()) {
      std::size_t refused = 0;
      for (const TuneCandidate& c : candidates) refused += c.refused.empty() ? 0 : 1;
      std::printf(
          "tandem tune: %s, %d ranks (%s), batch %d per rank, %d samples per step\n"
          "  %zu configurations (%zu refused: they do not fit this machine, or cannot run), "
          "budget %s%s\n",
          base.model.text.c_str(), base.ranks, describe_ranks(job).c_str(), base.batch,
          global_batch(base), candidates.size(), refused, duration_text(budget_s).c_str(),
          flags.exhaustive ? ", --exhaustive: every configuration measured" : "");
      if (base.device == Device::kCpu) print_cpu_gemm_lines();
      if (!outputs.finished.empty()) {
        // The default's characterization is a finished point too, not a measurement.
        const bool characterized = outputs.finished.contains("baseline");
        std::printf("  resuming %s: %zu measurements done%s\n", flags.out.c_str(),
                    outputs.finished.size() - (characterized ? 1 : 0),
                    characterized ? ", the default characterized" : "");
      }
      std::fflush(stdout);
    }
    // 1. The default's four scenarios (every rank runs them).
    Baseline baseline;
    const std::optional<nlohmann::json> stored_baseline = stored("baseline");
    if (share_from_leader(job, stored_baseline ? "stored" : "run") == "stored") {
      if (job.leader()) baseline = baseline_from_json(*stored_baseline, *writer);
    } else {
      if (job.leader()) {
        std::printf(
            "  characterizing the default (%s): 4 scenarios x %d steps, for the "
            "calibration and the sequential baseline\n",
            def.label().c_str(), flags.warmup + flags.baseline_iterations);
        std::fflush(stdout);
      }
      TrainConfig config = def.config;
      std::unique_ptr<Workload> workload = make_train_workload(config);
      const Clock::time_point t0 = Clock::now();
      const Characterization c = characterize(*workload, {.warmup = flags.warmup,
                                                          .iterations = flags.baseline_iterations,
                                                          .power = power ? &*power : nullptr,
                                                          .job = &job});
      // The same steps in the smallest micro-batches of the space, compute only: the
      // passes' FLOPs and bytes in another ratio, for the calibration's fit.
      // And in fp32 where the run is not: the calibration's memory bandwidth and first
      // GEMM rate are fitted on fp32 passes (simulate/calibration.h).
      std::vector<MeasuredRun> more;
      const auto compute_only = [&](TrainConfig variant, const std::string& what) {
        variant = scenario_config(variant, Scenario::kComputeOnly);
        variant.steps = flags.warmup + flags.baseline_iterations;
        Timeline t = make_train_workload(variant)->run(job, Scenario::kComputeOnly, variant.steps);
        if (!job.leader()) return;
        more.push_back(
            {.what = what, .config = variant, .timeline = std::move(t), .warmup = flags.warmup});
        more.back().step_s = median_e2e_s(more.back().timeline, flags.warmup);
      };
      const int finest = *std::max_element(space.micro_batches.begin(), space.micro_batches.end());
      if (!given && finest > 1 && config.batch % finest == 0) {
        TrainConfig variant = config;
        variant.pipeline.micro_batches = finest;
        compute_only(variant,
                     "the default in " + std::to_string(finest) + " micro-batches, compute-only");
      }
      if (!given && config.precision != Precision::kFp32) {
        TrainConfig variant = config;
        variant.precision = Precision::kFp32;
        compute_only(variant, "the default in fp32, compute-only");
      }
      baseline.wall_s = seconds_since(t0);
      if (job.leader()) {
        if (given) {
          baseline.calibration = *given;
          baseline.memory_bytes = given_memory;
          baseline.calibration_source = given_source;
        } else {
          try {
            baseline.calibration = calibrate_from(c, config, more);
          } catch (const UsageError& e) {
            throw UsageError(std::string("the calibration from the default's scenarios: ") +
                             e.what());
          }
          const AvailableMemory memory = available_memory();
          baseline.memory_bytes = memory.bytes > 0 ? static_cast<double>(memory.bytes) : 1e12;
          baseline.calibration_source = "fitted by tandem tune from the default's scenarios";
        }
        baseline.sequential_s = c.metrics.e2e_seq_ns.median / 1e9;
        if (energy) {
          const ScenarioRun& seq = c.run(Scenario::kSequential);
          baseline.sequential_j = 0;
          for (const PowerSummary& p : seq.power)
            baseline.sequential_j += seq.energy_per_iteration(p);
        }
        baseline.overlapped_s = c.metrics.e2e_ovl_ns.median / 1e9;
        // Each scenario ran warm-up + iterations steps of about its median; the rest is
        // what a run costs besides its steps (building the model, the data, the ranks).
        double steps_s = 0;
        for (const ScenarioRun& run : c.runs) {
          steps_s += median_e2e_s(run.timeline, c.warmup) * (c.warmup + c.iterations);
        }
        for (const MeasuredRun& run : more) {
          steps_s += run.step_s * (flags.warmup + flags.baseline_iterations);
        }
        baseline.overhead_s =
            std::max(0.0, (baseline.wall_s - steps_s) / static_cast<double>(4 + more.size()));
        if (writer != nullptr) {
          writer->write(fs::path("points") / "baseline" / kCalibrationFile,
                        calibration_json(baseline.calibration, baseline.memory_bytes,
                                         baseline.calibration_source)
                                .dump(2) +
                            "\n");
          writer->commit_point("baseline", baseline.to_json());
        }
      }
    }
    // 2. The space ranked by the calibrated simulator (rank 0 decides; the others follow).
    std::optional<TuneSearch> search;
    if (job.leader()) {
      const Cluster here = calibrated_cluster(baseline.calibration, base.ranks,
                                              baseline.memory_bytes, baseline.calibration_source);
      predict_candidates(candidates, here);
      // The simulator's step time, scaled to what the default measured.
      const double scale =
          def.predicted_s > 0 ? baseline.overlapped_s / default_it->predicted_s : 1;
      // Each round measures the first of these (its cost: plan_halving's cost_s).
      std::vector<double> ranked;
      for (const int i : measuring_order(candidates)) {
        ranked.push_back(candidates[static_cast<std::size_t>(i)].predicted_s);
      }
      const auto cost = [&](int rank, int steps) {
        const double step = ranked[static_cast<std::size_t>(
                                std::min<int>(rank, static_cast<int>(ranked.size()) - 1))] *
                            scale;
        return baseline.overhead_s + step * (flags.warmup + steps);
      };
      const int count = static_cast<int>(ranked.size());
      const int first = flags.candidates > 0 ? std::min(flags.candidates, count)
                                             : default_first_round(candidates);
      const int final_steps = flags.workload.steps;
      HalvingPlan plan;
      if (flags.exhaustive) {
        plan.candidates = {count};
        plan.steps = {final_steps};
        plan.cost_s = plan.grid_cost_s = grid_cost(count, final_steps, cost);
      } else {
        const int min_steps = std::min(final_steps, std::max(3, final_steps / 4));
        plan = flags.candidates > 0
                   ? plan_halving(first, budget_s - baseline.wall_s, final_steps, min_steps, cost)
                   : plan_search(first, least_first_round(candidates), count, baseline.wall_s,
                                 budget_s - baseline.wall_s, final_steps, min_steps, cost);
      }
      std::printf("  calibration: %s; predicted %s for the default, measured %s\n",
                  baseline.calibration_source.c_str(), ms_text(default_it->predicted_s).c_str(),
                  ms_text(baseline.overlapped_s).c_str());
      std::printf("  plan: %zu round%s (", plan.candidates.size(),
                  plan.candidates.size() == 1 ? "" : "s");
      for (std::size_t r = 0; r < plan.candidates.size(); ++r) {
        const int passes = plan.passes_of(static_cast<int>(r));
        std::printf("%s%d x %d steps", r ? ", " : "", plan.candidates[r], plan.steps[r]);
        if (passes > 1) std::printf(" in %d alternating passes", passes);
      }
      std::printf(", the default in every round), about %s of measuring\n",
                  duration_text(plan.cost_s).c_str());
      if (plan.cost_s > budget_s - baseline.wall_s && !flags.exhaustive) {
        std::printf("  note: the budget is short for even two candidates; measuring them anyway\n");
      } else if (!flags.exhaustive && plan.limit == PlanLimit::kBudget) {
        std::printf(
            "  note: the budget affords %d of the %d candidates the first round would "
            "measure (--budget)\n",
            plan.candidates.front(), first);
      } else if (!flags.exhaustive && plan.limit == PlanLimit::kGridShare) {
        const bool within = baseline.wall_s + plan.cost_s <= kGridShare * plan.grid_cost_s;
        std::printf(
            "  note: %d of the %d candidates the first round would measure, %s a quarter of "
            "measuring all %d (about %s; --candidates sets it)\n",
            plan.candidates.front(), first,
            within ? "so that the search costs at most"
                   : "the fewest it takes by itself, though the search costs more than",
            count, duration_text(plan.grid_cost_s).c_str());
      }
      std::fflush(stdout);
      search.emplace(candidates, plan, energy ? TuneObjective::kEnergy : TuneObjective::kTime);
      search->set_sequential(baseline.sequential_s, baseline.sequential_j);
    }
    // 3. Successive halving on real steps.
    int done = 0;
    const Clock::time_point measuring = Clock::now();
    for (;;) {
      std::string action = "done";
      if (job.leader()) {
        // Measurements a cut-off search already made are read back, in the same order.
        std::optional<TuneMeasurement> next;
        while ((next = search->next())) {
          const std::optional<nlohmann::json> old = stored(next->id());
          if (!old) break;
          std::vector<double> samples;
          for (const double v : old->at("samples_ms")) samples.push_back(v / 1e3);
          const nlohmann::json& e = old->value("energy_j_per_step", nlohmann::json());
          search->record(*next, samples, old->at("wall_s").get<double>(),
                         e.is_number() ? e.get<double>() : kUndefinedScore);
          ++done;
        }
        if (next) action = next->to_json().dump();
      }
      action = share_from_leader(job, action);
      if (action == "done") break;
      const TuneMeasurement m = TuneMeasurement::from_json(nlohmann::json::parse(action));
      const TuneCandidate& c = candidates[static_cast<std::size_t>(m.candidate)];
      if (job.leader()) {
        const int left = search->remaining();
        std::printf("  [%d/%d] round %d%s: %s%s, %d steps (predicted %s)", done + 1, done + left,
                    m.round + 1, m.pass > 0 ? (", pass " + std::to_string(m.pass + 1)).c_str() : "",
                    c.label().c_str(), c.is_default ? " (default)" : "", m.steps,
                    ms_text(search->candidates()[static_cast<std::size_t>(m.candidate)].predicted_s)
                        .c_str());
        std::fflush(stdout);
      }
      TrainConfig config = c.config;
      std::unique_ptr<Workload> workload = make_train_workload(config);
      const Clock::time_point t0 = Clock::now();
      if (power) power->start();
      const Timeline timeline = workload->run(job, Scenario::kOverlapped, flags.warmup + m.steps);
      if (power) power->stop();
      const double wall = seconds_since(t0);
      if (!job.leader()) continue;
      const std::vector<double> samples = step_periods(timeline, flags.warmup);
      const double joules =
          power ? energy_per_step(*power, timeline, flags.warmup, m.steps) : kUndefinedScore;
      search->record(m, samples, wall, joules);
      ++done;
      const Summary s = summarize(samples);
      const double elapsed = seconds_since(measuring);
      const int left = search->remaining();
      std::printf(": %s (p10 %s, p90 %s)", ms_text(s.median).c_str(), ms_text(s.p10).c_str(),
                  ms_text(s.p90).c_str());
      if (power) std::printf(", %.3g J per step", joules);
      if (left > 0) std::printf("; about %s left", duration_text(elapsed / done * left).c_str());
      std::printf("\n");
      std::fflush(stdout);
      if (writer != nullptr) {
        std::vector<double> samples_ms;
        for (const double v : samples) samples_ms.push_back(v * 1e3);
        nlohmann::json point = m.to_json();
        point["id"] = c.id();
        point["samples_ms"] = samples_ms;
        point["wall_s"] = wall;
        point["energy_j_per_step"] = number_or_null(joules);
        writer->commit_point(m.id(), point);
      }
    }
    if (!job.leader()) return 0;
    // 4. The answer.
    const std::vector<TuneCandidate>& measured = search->candidates();
    const TuneAnswer a = search->answer();
    print_table(measured, true, flags.top);
    const TuneCandidate& best = measured[static_cast<std::size_t>(a.best)];
    const Summary bs = summarize(best.samples_s);
    const double tuning_s = baseline.wall_s + search->measured_wall_s();
    std::printf("\nbest%s: %s, %s (p10 %s, p90 %s)", energy ? " for energy" : "",
                best.label().c_str(), ms_text(a.best_s).c_str(), ms_text(bs.p10).c_str(),
                ms_text(bs.p90).c_str());
    if (energy) std::printf(", %.3g J per step", a.best_j);
    std::printf("\n");
    // Power counters that never advanced measure 0 J everywhere: nothing to compare.
    const bool no_energy = energy && !(a.default_j > 0 && a.best_j > 0 && a.sequential_j > 0);
    if (no_energy) {
      std::printf(
          "  the power counters did not advance over the measurements: no energy to compare\n");
    } else {
      if (a.default_is_best) {
        std::printf("  nothing measured beat the default (bucketed, 25 MiB): keep it\n");
      } else if (energy) {
        std::printf("  %.2fx the default's energy per step (%.3g J; %s per step)\n",
                    a.best_j / a.default_j, a.default_j, ms_text(a.default_s).c_str());
      } else {
        std::printf("  %.2fx the default's speed (%s, measured in the same rounds)\n",
                    a.default_s / a.best_s, ms_text(a.default_s).c_str());
      }
      if (energy) {
        std::printf(
            "  %.2fx sequential's energy per step (the default's sequential scenario, %.3g J)\n",
            a.best_j / a.sequential_j, a.sequential_j);
      } else {
        std::printf("  %.2fx sequential's (the default's sequential scenario, %s)\n",
                    a.sequential_s / a.best_s, ms_text(a.sequential_s).c_str());
      }
      if (a.runner_up >= 0) {
        const TuneCandidate& r = measured[static_cast<std::size_t>(a.runner_up)];
        std::printf(
            "  %s: the runner-up (%s) is %.1f%% %s; the best's %s spread +-%.1f%% (p10-p90)\n",
            a.sure() ? "clear" : "within noise", r.label().c_str(), 100 * a.gap,
            energy ? "costlier" : "slower", energy ? "measurements" : "steps", 100 * a.spread);
      }
    }
    std::printf("  %s%s\n", train_command(flags, best).c_str(),
                job.in_process() ? "" : "  (under the same launcher)");
    std::printf("  tuning took %s (%s characterizing the default), %d measurements\n",
                duration_text(seconds_since(start)).c_str(), duration_text(baseline.wall_s).c_str(),
                done);
    std::fflush(stdout);
    if (writer != nullptr) {
      nlohmann::json body =
          tune_body(flags, flags.exhaustive ? "exhaustive" : "measured", measured, space);
      body["answer"] = to_json(a, measured);
      body["answer"]["command"] = train_command(flags, best);
      body["baseline"] = baseline.to_json();
      body["budget_s"] = budget_s;
      body["measurement_s"] = tuning_s;
      body["measurements"] = done;
      body["warmup"] = flags.warmup;
      body["plan"] = {{"candidates", search->plan().candidates},
                      {"steps", search->plan().steps},
                      {"passes", search->plan().passes},
                      {"predicted_cost_s", search->plan().cost_s},
                      {"predicted_grid_cost_s", search->plan().grid_cost_s > 0
                                                    ? nlohmann::json(search->plan().grid_cost_s)
                                                    : nlohmann::json(nullptr)}};
      write_outputs(*writer, measured, body);
    }
  } catch (const std::exception& e) {
    job.fail(e);  // in-process: rethrown
  }
  return 0;
}

}  // namespace

void add_tune_command(CLI::App& app, RunCommand& run) {
  auto flags = std::make_shared<TuneFlags>();
  flags->workload.steps = 20;  // the last round's measured steps per candidate
  CLI::App* cmd = app.add_subcommand(
      "tune",
      "Find the fastest configuration of a training run: the simulator, calibrated on the "
      "default's measured scenarios, ranks strategies, bucket sizes, prefetch, micro-batches, "
      "pipelines and threads; successive halving measures the most promising (docs/TUNE.md)");
  add_workload_flags(*cmd, flags->workload);
  add_job_flags(*cmd, flags->job);
  cmd->get_option("--steps")->description(
      "Measured steps per configuration in the last round (each earlier round a third as "
      "many, at least a quarter of them or 3)");
  cmd->add_option("--budget", flags->budget,
                  "Time for the search: the default's characterization and the measurements "
                  "(e.g. 90s, 10m); how many configurations are measured follows from it")
      ->capture_default_str();
  cmd->add_option(
      "--space", flags->space,
      "KEY=V1,V2 (repeatable): replaces one axis of the space; keys: strategy "
      "bucket-mb prefetch reshard (yes,no) micro-batches pipeline schedule threads tensor "
      "sequence-parallel (yes,no) tp-overlap (yes,no)");
  cmd->add_flag("--exhaustive", flags->exhaustive,
                "Measure every configuration for --steps steps (the grid tune's pick is judged "
                "against)");
  cmd->add_option("--warmup", flags->warmup, "Steps of every measurement left out")
      ->check(integer_in(0, 1000))
      ->capture_default_str();
  cmd->add_option("--baseline-iterations", flags->baseline_iterations,
                  "Measured steps of each of the default's four scenarios")
      ->check(integer_in(2, 100000))
      ->capture_default_str();
  cmd->add_option(
         "--candidates", flags->candidates,
         "Configurations the first round measures (default: the best predicted of "
         "each strategy and pipeline schedule, at least 8, and no more than keep the search "
         "within a quarter of measuring every configuration); fewer if the budget is "
         "short")
      ->check(integer_in(2, 100000));
  cmd->add_option("--objective", flags->objective,
                  "What the search minimizes: time (the median step) or energy (joules per "
                  "step over every power source of rank 0's host: RAPL, and NVML's GPUs with "
                  "--device cuda; refused where there is none)")
      ->check(CLI::IsMember({"time", "energy"}))
      ->capture_default_str();
  add_power_flags(*cmd, flags->power);
  cmd->add_option("--top", flags->top, "Rows of the table printed at the end")
      ->check(integer_in(1, 100000))
      ->capture_default_str();
  cmd->add_flag("--simulate", flags->simulate,
                "Search with the simulator alone on --cluster: nothing is measured");
  cmd->add_option("--cluster", flags->cluster,
                  "With --simulate: NODESxDEVICESxPROFILE, a JSON file, or here with "
                  "--calibration (docs/SIMULATE.md)");
  cmd->add_option("--calibration", flags->calibration,
                  "A directory tandem simulate --calibrate wrote: rank with it instead of "
                  "fitting one from the default's scenarios (with --simulate: for --cluster here)");
  cmd->add_option("--out", flags->out,
                  "Results directory: summary.json (every configuration, predicted and "
                  "measured), candidates.csv, report.html, points/ (each measurement, for "
                  "--resume)");
  cmd->add_flag("--resume", flags->resume,
                "Continue a search cut off in --out (or the OUT.partial it left): measurements "
                "made are read back; its settings must be the same");
  add_force_flag(*cmd, flags->force);
  cmd->callback([flags, cmd, &run] {
    flags->batch_given = cmd->count("--batch") > 0;
    flags->ranks_given = cmd->count("--ranks") > 0;
    flags->workload.given = given_options(*cmd);
    flags->settings = settings_of(*cmd, {"--out", "--resume", "--force", "--top"});
    // The run's own flags, for the recommended `tandem train` line.
    static const std::set<std::string> tune_only = {
        "--out",          "--resume",     "--force",      "--budget",
        "--space",        "--exhaustive", "--warmup",     "--baseline-iterations",
        "--top",          "--simulate",   "--candidates", "--cluster",
        "--calibration",  "--steps",      "--objective",  "--power-interval-ms",
        "--powercap-root"};
    flags->train_args.clear();
    for (const CLI::Option* opt : cmd->get_options()) {
      const std::string name = opt->get_name();
      if (opt->count() == 0 || tune_only.contains(name) || name.rfind("--", 0) != 0) continue;
      if (opt->get_expected_max() == 0) {  // a switch: its name alone, where it is on
        if (opt->as<bool>()) flags->train_args.emplace_back(name, std::vector<std::string>{});
        continue;
      }
      flags->train_args.emplace_back(name, opt->results());
    }
    run = [flags](const CommandLine& argv) {
      if (flags->resume && flags->out.empty()) {
        throw UsageError("--resume: continues the search cut off in --out DIR; give --out");
      }
      if (flags->simulate) return run_simulated(*flags, argv);
      if (!flags->cluster.empty()) {
        throw UsageError("--cluster: a simulated search's cluster; add --simulate");
      }
      return run_measured(*flags, argv);
    };
  });
}

}  // namespace tandem::cli
