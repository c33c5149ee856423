// The checks of a flag's value as typed, shared by every subcommand. Each wraps a parser of
// core/parse.h, so that a flag and a --sweep value of the same quantity are held to the
// same rule and fail with the same words; CLI11 prefixes the flag's name. The policies
// that hold for every flag (one value per single-value flag, no empty value, a known
// subcommand) are applied here once, not flag by flag.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/parse.h"

namespace tandem::cli {

// The longest a collective may take (--timeout): about 11.6 days. Far below the ~292 years
// that nanoseconds in an int64 hold, so no deadline arithmetic can overflow.
inline constexpr double kMaxTimeoutS = 1e6;

// A finite number within `bounds` ("inf", "nan" and "1e999" are refused).
CLI::Validator number_in(const Bounds& bounds);
// A decimal integer in [min, max].
CLI::Validator integer_in(long long min, long long max);
// A decimal integer in [0, 2^64 - 1]: "-1" or a 20-digit overflow is an error, not 2^64 - 1.
CLI::Validator unsigned_integer();

// Before parsing: every option of `app`'s subcommands that takes a single value keeps all
// the values given, so that check_given_values can refuse a second one by name.
void keep_repeated_values(CLI::App& app);
// After parsing, on the selected subcommand: a single-value flag given more than once and
// an empty value ("--out ''") are UsageErrors naming the flag.
void check_given_values(const CLI::App& command);
// After parsing: what `command` was asked to do, as an object keyed by flag: each value as
// given (a list for repeatable flags), else its default; true for a flag without a value
// that was given. Flags in `ignored` (where results go, how progress is shown) are left
// out. A results directory stores it so that --resume can tell a different run apart.
nlohmann::json settings_of(const CLI::App& command, const std::set<std::string>& ignored);

// --force, the same for every command that writes a results directory (--out).
void add_force_flag(CLI::App& command, bool& force);

// Before parsing: a first word that is not a flag and not a subcommand is a UsageError
// that says so and suggests the nearest subcommand.
void check_subcommand(const CLI::App& app, int argc, const char* const* argv);

// Runs a parser and prefixes any UsageError with the flag it came from.
template <typename F>
auto for_flag(std::string_view flag, F&& parse) {
  try {
    return parse();
  } catch (const UsageError& e) {
    throw UsageError(std::string(flag) + ": " + e.what());
  }
}

}  // namespace tandem::cli
