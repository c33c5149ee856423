// Small parsers for the quantities users type: sizes, durations, bandwidths, links.
// Every parser throws UsageError with a message that names what was wrong; callers
// prefix the flag name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

// "4096", "1KiB", "25MB", "256MiB", "1GiB", "1.5GB": bytes (KB = 1e3, KiB = 1024).
std::int64_t parse_bytes(std::string_view text);
// "5us", "350ms", "1.5s", "200ns": nanoseconds.
std::int64_t parse_duration_ns(std::string_view text);
// "25GB/s", "100Gb/s", "800MB/s": bytes per second (b = bits).
double parse_bandwidth_Bps(std::string_view text);
// Integer with range check; `what` names the flag in the error.
long long parse_int(std::string_view text, std::string_view what);
double parse_double(std::string_view text, std::string_view what);

std::vector<std::string> split(std::string_view text, char sep);
std::string trim(std::string_view text);

// Human-readable forms for printing.
std::string format_bytes(double bytes);      // "25.0 MiB"
std::string format_duration_ns(double ns);   // "1.23 ms"

}  // namespace tandem
