// Registration of tandem's subcommands. Each adds its CLI11 subcommand and, when it is
// the one selected, sets `run` to the function that carries it out (returning the exit
// code).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tandem::cli {

void add_train_command(CLI::App& app, std::function<int()>& run);
void add_characterize_command(CLI::App& app, std::function<int()>& run);
void add_analyze_command(CLI::App& app, std::function<int()>& run);
void add_report_command(CLI::App& app, std::function<int()>& run);

}  // namespace tandem::cli
