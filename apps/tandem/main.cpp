// tandem: the command-line entry point. Each subcommand lives in its own file and
// registers itself here; every user error ends as one line on stderr and exit code 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <functional>

#include "commands.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/version.h"
#include "flag_checks.h"

int main(int argc, char** argv) {
  tandem::install_interrupt_handling();
  CLI::App app{
      "tandem: run, measure and explain compute-communication overlap in data-parallel "
      "training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tandem " + std::string(tandem::tandem_version()));

  const tandem::cli::CommandLine command_line(argv, argv + argc);
  tandem::cli::RunCommand run;
  tandem::cli::add_train_command(app, run);
  tandem::cli::add_characterize_command(app, run);
  tandem::cli::add_analyze_command(app, run);
  tandem::cli::add_report_command(app, run);
  tandem::cli::keep_repeated_values(app);

  try {
    tandem::cli::check_subcommand(app, argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::string message = e.what();
    std::fprintf(stderr, "tandem: error: %s\n", message.c_str());
    return 2;
  } catch (const tandem::UsageError& e) {
    std::fprintf(stderr, "tandem: error: %s\n", e.what());
    return 2;
  }
  try {
    for (const CLI::App* command : app.get_subcommands()) tandem::cli::check_given_values(*command);
    return run(command_line);
  } catch (const tandem::UsageError& e) {
    std::fprintf(stderr, "tandem: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: failed: %s\n", e.what());
    return 1;
  }
}
