// Registration of tandem's subcommands. Each adds its CLI11 subcommand and, when it is
// the one selected, sets `run` to the function that carries it out (given the command
// line as typed, for the header of summary.json; returning the exit code).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace tandem::cli {

using CommandLine = std::vector<std::string>;
using RunCommand = std::function<int(const CommandLine& argv)>;

void add_train_command(CLI::App& app, RunCommand& run);
void add_characterize_command(CLI::App& app, RunCommand& run);
void add_analyze_command(CLI::App& app, RunCommand& run);
void add_report_command(CLI::App& app, RunCommand& run);
void add_simulate_command(CLI::App& app, RunCommand& run);
void add_tune_command(CLI::App& app, RunCommand& run);

}  // namespace tandem::cli
