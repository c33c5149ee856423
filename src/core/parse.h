// Small parsers for the quantities users type: sizes, durations, bandwidths, links.
// Every parser throws UsageError with a message that names what was wrong; callers
// prefix the flag name.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

// "4096", "1KiB", "25MB", "256MiB", "1GiB", "1.5GB": bytes (KB = 1e3, KiB = 1024).
std::int64_t parse_bytes(std::string_view text);
// "5us", "350ms", "1.5s", "200ns", "10m" (or "10min"), "2h": nanoseconds.
std::int64_t parse_duration_ns(std::string_view text);
// "25GB/s", "100Gb/s", "800MB/s": bytes per second (b = bits).
double parse_bandwidth_Bps(std::string_view text);
// Integer with range check; `what` names the flag in the error.
long long parse_int(std::string_view text, std::string_view what);
// A finite number: "inf" and "nan" are refused like any other non-number.
double parse_double(std::string_view text, std::string_view what);

// The values a number the user types may take: [min, max], or (min, max] with min_open
// (for quantities that must be > min). Both bounds are finite: every quantity has a stated
// largest value, so that no later arithmetic on it (seconds to nanoseconds, MiB to bytes)
// can overflow.
struct Bounds {
  double min = 0;
  double max = 0;
  bool min_open = false;
};
// Readably, for messages and --help: "> 0 and <= 1000000", "0..1" (never a 300-digit
// double).
std::string describe(const Bounds& bounds);
// parse_double, then the bounds; throws UsageError "WHAT: must be BOUNDS, got 'TEXT'".
double parse_double_in(std::string_view text, std::string_view what, const Bounds& bounds);
// A factor, "2x", "0.5x" or "1.5" (the x optional), within bounds; throws UsageError
// "WHAT: must be BOUNDS, got 'TEXT'" like parse_double_in.
double parse_factor(std::string_view text, std::string_view what, const Bounds& bounds);
// A decimal integer in [min, max]: no sign on unsigned values, no octal or hex, no
// wrap-around; throws UsageError "WHAT: must be an integer MIN..MAX, got 'TEXT'".
long long parse_int_in(std::string_view text, std::string_view what, long long min, long long max);
// A decimal integer in [0, 2^64 - 1] ("-1" and 20-digit overflows are errors, not 2^64 - 1).
std::uint64_t parse_uint64(std::string_view text, std::string_view what);

std::vector<std::string> split(std::string_view text, char sep);
std::string trim(std::string_view text);

// Human-readable forms for printing.
// Appends `c` as text a reader can see: a control character (NUL, ESC, ...; tab and
// newline too unless `keep_whitespace`) and DEL as \xNN, the way C spells them, anything
// else as itself. Names from traces go through this on their way to reports and CSV.
void append_visible(std::string& out, char c, bool keep_whitespace);

std::string format_bytes(double bytes);     // "25.0 MiB"
std::string format_duration_ns(double ns);  // "1.23 ms"

// "key=value,key=value" option lists (--microbench, synthetic:..., --straggler): parses
// "a=1,b=2" into {a:1, b:2}; every key must be in `allowed` (a space-separated list) and
// appear once. `what` names the spec in errors. Throws UsageError.
std::map<std::string, std::string> parse_key_values(std::string_view text, std::string_view what,
                                                    std::string_view allowed);

}  // namespace tandem
