// The checks of a flag's value as typed, shared by every subcommand. Each wraps a parser of
// core/parse.h, so that a flag and a --sweep value of the same quantity are held to the
// same rule and fail with the same words; CLI11 prefixes the flag's name.
#pragma once

#include <CLI/CLI.hpp>

#include "core/parse.h"

namespace tandem::cli {

// The longest a collective may take (--timeout): about 11.6 days. Far below the ~292 years
// that nanoseconds in an int64 hold, so no deadline arithmetic can overflow.
inline constexpr double kMaxTimeoutS = 1e6;

// A finite number within `bounds` ("inf", "nan" and "1e999" are refused).
CLI::Validator number_in(const Bounds& bounds);

}  // namespace tandem::cli
