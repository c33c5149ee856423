// tandem: the command-line entry point. Each subcommand lives in its own file and
// registers itself here; every user error ends as one line on stderr and exit code 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>

#include "commands.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/version.h"
#include "flag_checks.h"

namespace {

// One error line stays readable whatever it quotes (a 90 KB --model value, say): a long
// one keeps its start, which names the flag, and its end, and says how much it cut.
std::string readable(std::string message) {
  constexpr std::size_t kHead = 300, kTail = 120;
  if (message.size() <= kHead + kTail + 64) return message;
  const std::size_t cut = message.size() - kHead - kTail;
  return message.substr(0, kHead) + " ... (" + std::to_string(cut) + " characters cut) ... " +
         message.substr(message.size() - kTail);
}

void print_error(const char* kind, const std::string& message) {
  std::fprintf(stderr, "tandem: %s: %s\n", kind, readable(message).c_str());
}

}  // namespace

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
  tandem::cli::add_simulate_command(app, run);
  tandem::cli::add_tune_command(app, run);
  tandem::cli::keep_repeated_values(app);

  try {
    tandem::cli::check_subcommand(app, argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    print_error("error", e.what());
    return 2;
  } catch (const tandem::UsageError& e) {
    print_error("error", e.what());
    return 2;
  }
  try {
    for (const CLI::App* command : app.get_subcommands()) tandem::cli::check_given_values(*command);
    return run(command_line);
  } catch (const tandem::UsageError& e) {
    print_error("error", e.what());
    return 2;
  } catch (const std::exception& e) {
    print_error("failed", e.what());
    return 1;
  }
}
