// `tandem analyze`: the overlap metrics of PyTorch profiler (Kineto) traces, or of
// tandem's own trace.json; a row per rank per iteration and a summary, and with --out
// summary.json, iterations.csv and a merged trace.json (docs/ANALYZE.md).
#include <cstdio>
#include <optional>

#include "analysis/metric_catalogue.h"
#include "commands.h"
#include "flag_checks.h"
#include "report/analyze_summary.h"
#include "report/results_dir.h"
#include "trace_import/analyze_report.h"
#include "trace_import/trace_import.h"

namespace tandem::cli {

namespace {

struct AnalyzeFlags {
  std::vector<std::string> inputs;
  std::vector<std::string> baseline;
  std::string out;
  bool force = false;
  ClassificationRules rules;
  int warmup = 0;
  int kernels = 10;
  bool quiet = false;
};

void print_inputs(const ImportResult& imported, const char* what) {
  for (const TraceFileInfo& f : imported.files) {
    std::printf("%s %s: %s", what, f.path.c_str(), f.format.c_str());
    if (f.rank >= 0) std::printf(", rank %d (from %s)", f.rank, f.rank_source.c_str());
    std::printf(", %zu compute / %zu comm / %zu memory spans, %zu ProfilerStep windows\n",
                f.compute, f.comm, f.memory, f.step_windows);
    if (f.ignored > 0) std::printf("  %zu GPU events matched no rule (ignored)\n", f.ignored);
    if (f.outside_steps > 0) {
      std::printf("  %zu spans outside every ProfilerStep window (not in any iteration)\n",
                  f.outside_steps);
    }
    if (f.hta_file) {
      const HtaOverlap& h = imported.hta(*f.hta_file, false);
      std::printf("  %zu GPUs, a rank each; HTA's number for the whole file (devices merged): ",
                  f.devices);
      if (h.defined) {
        std::printf("%.2f%%\n", h.hidden_pct);
      } else {
        std::printf("n/a\n");
      }
    }
    if (f.names_cut > 0) {
      std::printf("  %zu event name%s longer than 64 KiB, cut to the first 64 KiB\n", f.names_cut,
                  f.names_cut == 1 ? "" : "s");
    }
    if (f.odd_devices > 0) {
      std::printf(
          "  %zu event%s with an args.device that is no device (kept on the file's "
          "device)\n",
          f.odd_devices, f.odd_devices == 1 ? "" : "s");
    }
    if (f.odd_nelems > 0) {
      std::printf(
          "  %zu nelems that %s no count (negative, fractional or beyond 2^63): those "
          "collectives' sizes are unknown\n",
          f.odd_nelems, f.odd_nelems == 1 ? "is" : "are");
    }
  }
}

int run_analyze(const AnalyzeFlags& flags, const CommandLine& argv) {
  const std::vector<std::string> inputs = expand_trace_inputs(flags.inputs, "");
  const std::vector<std::string> baseline_inputs =
      flags.baseline.empty() ? std::vector<std::string>{}
                             : expand_trace_inputs(flags.baseline, "--baseline");
  std::optional<ResultsWriter> out;
  if (!flags.out.empty()) {
    out.emplace(flags.out, ResultsCommand::kAnalyze, argv, OutputPolicy{.force = flags.force});
  }

  const ImportResult run = import_traces(inputs, flags.rules);
  print_inputs(run, "trace");
  std::optional<ImportResult> baseline;
  if (!baseline_inputs.empty()) {
    baseline = import_traces(baseline_inputs, flags.rules);
    print_inputs(*baseline, "baseline");
  }

  const AnalyzeResult result =
      analyze_imports(run, baseline ? &*baseline : nullptr, static_cast<std::size_t>(flags.warmup));
  if (!flags.quiet) std::fputs(format_iteration_table(result).c_str(), stdout);
  std::fputs(format_analyze_summary(result).c_str(), stdout);
  std::fputs(format_rank_table(result).c_str(), stdout);
  std::fputs(format_collective_table(result, flags.quiet ? 8 : 20).c_str(), stdout);
  std::fputs(format_kernel_table(result, static_cast<std::size_t>(flags.kernels)).c_str(), stdout);
  // The same table `tandem characterize` prints; rows of scenarios a profile cannot
  // contain (comm-only, sequential) read n/a.
  std::printf("\nmetrics (as tandem characterize; the baseline is the compute-only scenario)\n");
  std::fputs(format_metrics_table(result.scenario).c_str(), stdout);

  if (out) {
    out->write_summary(
        analyze_summary_body(result, run, baseline ? &*baseline : nullptr, flags.rules));
    out->write("iterations.csv", iterations_csv(result));
    out->write("collectives.csv", collectives_csv(result));
    if (result.kernels) out->write("kernels.csv", kernels_csv(result));
    out->write_trace(
        "trace.json", run.timeline,
        {.other_data = {{"source", "tandem analyze"}, {"inputs", inputs}}, .counters = {}});
    out->write_report();
    out->commit();
    std::printf("wrote %s/{summary.json,iterations.csv,collectives.csv,%strace.json,report.html}\n",
                out->path().c_str(), result.kernels ? "kernels.csv," : "");
  }
  return 0;
}

}  // namespace

void add_analyze_command(CLI::App& app, RunCommand& run) {
  auto flags = std::make_shared<AnalyzeFlags>();
  CLI::App* cmd =
      app.add_subcommand("analyze",
                         "Overlap metrics of PyTorch profiler (Kineto) traces, one file per rank "
                         "(.json or .json.gz, or directories of them), or of a tandem trace.json");
  cmd->add_option("traces", flags->inputs, "Trace files or directories (*.json, *.json.gz)")
      ->required();
  cmd->add_option("--baseline", flags->baseline,
                  "Traces of the same job with communication off (compute-only): adds "
                  "compute slowdown (eq. 1) and ideal iteration time (eq. 4)");
  cmd->add_option("--out", flags->out,
                  "Directory for summary.json, iterations.csv (a row per rank per iteration), "
                  "collectives.csv, kernels.csv (with --baseline), "
                  "trace.json (all ranks merged, Chrome/Perfetto) and report.html; it appears "
                  "when the analysis is done, and one that holds results is refused without "
                  "--force");
  add_force_flag(*cmd, flags->force);
  cmd->add_option("--comm-regex", flags->rules.comm,
                  "Kernel names that are communication (case-insensitive search)")
      ->capture_default_str();
  cmd->add_option("--memory-regex", flags->rules.memory,
                  "Kernel names that are memory copies/fills (neither compute nor comm)")
      ->capture_default_str();
  cmd->add_option("--compute-regex", flags->rules.compute,
                  "Kernel names that are compute (default: all others); unmatched kernels "
                  "are ignored");
  cmd->add_option("--warmup", flags->warmup, "Iterations left out at the start")
      ->check(integer_in(0, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--kernels", flags->kernels,
                  "With --baseline: rows of the table of kernels slowed by overlap (all of them "
                  "in summary.json and kernels.csv)")
      ->check(integer_in(0, 1'000'000))
      ->capture_default_str();
  cmd->add_flag("--quiet", flags->quiet,
                "No row per rank per iteration and at most 8 collective rows, only the summary");
  cmd->callback([flags, &run] {
    run = [flags](const CommandLine& argv) { return run_analyze(*flags, argv); };
  });
}

}  // namespace tandem::cli
