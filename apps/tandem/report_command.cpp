// `tandem report DIR`: (re)builds the self-contained HTML report of a results directory
// written by `tandem train`, `characterize`, `analyze` or `tune --out`.
#include <cstdio>

#include "commands.h"
#include "flag_checks.h"
#include "report/html/report.h"

namespace tandem::cli {

namespace {

struct ReportFlags {
  std::string dir;
  std::string point;
  int iteration = -1;
  bool iteration_given = false;
  int max_ranks = 8;
  std::string out;
};

int run_report(const ReportFlags& flags) {
  html::ReportOptions options{.point = flags.point, .iteration = {}, .max_ranks = flags.max_ranks};
  if (flags.iteration_given) options.iteration = flags.iteration;
  const auto path = html::write_report(flags.dir, options, flags.out);
  std::printf("wrote %s\n", path.string().c_str());
  return 0;
}

}  // namespace

void add_report_command(CLI::App& app, RunCommand& run) {
  auto flags = std::make_shared<ReportFlags>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Build report.html (Gantt charts, E2E and breakdown bars, slowdown, scaling, "
      "power, metrics) from a results directory; works offline");
  cmd->add_option("dir", flags->dir,
                  "Results directory of tandem train/characterize/analyze/tune --out")
      ->required();
  cmd->add_option("--point", flags->point,
                  "Configuration drawn in detail (its id under points/; default: the first)");
  cmd->add_option("--iteration", flags->iteration,
                  "Iteration shown in the Gantt charts (default: the median measured one)")
      ->check(integer_in(0, 10'000'000));
  cmd->add_option("--max-ranks", flags->max_ranks, "Ranks drawn per Gantt chart")
      ->check(integer_in(1, 4096))
      ->capture_default_str();
  cmd->add_option("--out", flags->out, "Output file (default: DIR/report.html)");
  cmd->callback([flags, cmd, &run] {
    flags->iteration_given = cmd->count("--iteration") > 0;
    run = [flags](const CommandLine&) { return run_report(*flags); };
  });
}

}  // namespace tandem::cli
