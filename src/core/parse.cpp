// Parsers for user-typed quantities. Strict: the whole text must be consumed, and every
// error names what was expected and quotes what was typed.
#include "core/parse.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <system_error>

#include "core/error.h"

namespace tandem {
namespace {

constexpr std::string_view kSpace = " \t\n\r\f\v";

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

// Splits "1.5GiB" into 1.5 and "GiB" (suffix trimmed). Returns false if no number leads.
bool split_number(std::string_view text, double* value, std::string_view* suffix) {
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, *value);
  if (ec != std::errc() || !std::isfinite(*value)) return false;
  std::string_view rest(ptr, static_cast<std::size_t>(last - ptr));
  const auto begin = rest.find_first_not_of(kSpace);
  *suffix = begin == std::string_view::npos ? std::string_view() : rest.substr(begin);
  return true;
}

struct Unit {
  std::string_view name;
  double scale;
};

// Decimal (KB = 1e3) and binary (KiB = 1024) byte multiples.
constexpr Unit kByteUnits[] = {
    {"", 1},
    {"B", 1},
    {"KB", 1e3},
    {"MB", 1e6},
    {"GB", 1e9},
    {"TB", 1e12},
    {"KiB", 1024.0},
    {"MiB", 1048576.0},
    {"GiB", 1073741824.0},
    {"TiB", 1099511627776.0},
};

constexpr Unit kDurationUnits[] = {{"ns", 1},   {"us", 1e3},   {"ms", 1e6},  {"s", 1e9},
                                   {"m", 60e9}, {"min", 60e9}, {"h", 3600e9}};

// Per-second rates; a lowercase b counts bits.
constexpr Unit kBandwidthUnits[] = {
    {"B/s", 1},         {"KB/s", 1e3},     {"MB/s", 1e6},        {"GB/s", 1e9},
    {"TB/s", 1e12},     {"KiB/s", 1024.0}, {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0},
    {"b/s", 1.0 / 8},   {"Kb/s", 1e3 / 8}, {"Mb/s", 1e6 / 8},    {"Gb/s", 1e9 / 8},
    {"Tb/s", 1e12 / 8},
};

template <std::size_t N>
const Unit* find_unit(const Unit (&units)[N], std::string_view suffix) {
  for (const Unit& unit : units) {
    if (unit.name == suffix) return &unit;
  }
  return nullptr;
}

// Parses "<number><unit>" where the unit is one of `units`; `kind` and `example` make the
// error message ("expected a size like 256MiB, got '12XB'").
template <std::size_t N>
double parse_quantity(std::string_view text, const Unit (&units)[N], std::string_view kind,
                      std::string_view example) {
  const std::string t = trim(text);
  double value = 0;
  std::string_view suffix;
  const Unit* unit = nullptr;
  if (split_number(t, &value, &suffix)) unit = find_unit(units, suffix);
  if (unit == nullptr) {
    throw UsageError("expected " + std::string(kind) + " like " + std::string(example) + ", got " +
                     quoted(text));
  }
  if (value < 0) throw UsageError(std::string(kind) + " must not be negative, got " + quoted(text));
  return value * unit->scale;
}

// Converts a parsed quantity to a whole count; rejects fractions and overflow.
std::int64_t to_whole(double value, std::string_view text, std::string_view unit_name) {
  const double rounded = std::nearbyint(value);
  if (std::fabs(value - rounded) > 1e-6 * std::max(1.0, std::fabs(value))) {
    throw UsageError(quoted(text) + " is not a whole number of " + std::string(unit_name));
  }
  if (rounded >= 9.2e18) throw UsageError(quoted(text) + " is too large");
  return static_cast<std::int64_t>(rounded);
}

// "12.3" with trailing zeros and a trailing dot removed: 3 significant digits.
std::string three_digits(double value) {
  char buf[32];
  const double magnitude = std::fabs(value);
  const int decimals = magnitude >= 100 ? 0 : magnitude >= 10 ? 1 : 2;
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

}  // namespace

std::int64_t parse_bytes(std::string_view text) {
  const double bytes = parse_quantity(text, kByteUnits, "a size", "4096, 64KiB, 25MB or 1.5GiB");
  return to_whole(bytes, text, "bytes");
}

std::int64_t parse_duration_ns(std::string_view text) {
  const double ns =
      parse_quantity(text, kDurationUnits, "a duration", "200ns, 5us, 350ms, 1.5s or 10m");
  return to_whole(ns, text, "nanoseconds");
}

double parse_bandwidth_Bps(std::string_view text) {
  const double bps =
      parse_quantity(text, kBandwidthUnits, "a bandwidth", "25GB/s, 100Gb/s or 800MB/s");
  if (bps <= 0) throw UsageError("bandwidth must be positive, got " + quoted(text));
  return bps;
}

long long parse_int(std::string_view text, std::string_view what) {
  long long value = 0;
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), last, value);
  if (ec == std::errc::result_out_of_range) {
    throw UsageError(std::string(what) + ": " + quoted(text) + " is out of range");
  }
  if (text.empty() || ec != std::errc() || ptr != last) {
    throw UsageError(std::string(what) + ": expected an integer, got " + quoted(text));
  }
  return value;
}

double parse_double(std::string_view text, std::string_view what) {
  double value = 0;
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), last, value);
  if (ec == std::errc::result_out_of_range) {
    throw UsageError(std::string(what) + ": " + quoted(text) + " is out of range");
  }
  if (text.empty() || ec != std::errc() || ptr != last || !std::isfinite(value)) {
    throw UsageError(std::string(what) + ": expected a number, got " + quoted(text));
  }
  return value;
}

namespace {

// A bound as people write it: whole numbers in full up to 1e15, others in %g.
std::string format_bound(double v) {
  char buf[32];
  if (v == std::nearbyint(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%g", v);
  }
  return buf;
}

}  // namespace

std::string describe(const Bounds& b) {
  if (b.min_open) return "> " + format_bound(b.min) + " and <= " + format_bound(b.max);
  return format_bound(b.min) + ".." + format_bound(b.max);
}

double parse_double_in(std::string_view text, std::string_view what, const Bounds& bounds) {
  const std::string prefix = what.empty() ? "" : std::string(what) + ": ";
  double value = 0;
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), last, value);
  const bool number =
      !text.empty() && ptr == last && (ec == std::errc() || ec == std::errc::result_out_of_range);
  // Out of double's range (1e999) or infinite is a number too large, not "not a number".
  if (!number || std::isnan(value)) {
    throw UsageError(prefix + "expected a number " + describe(bounds) + ", got " + quoted(text));
  }
  const bool below = bounds.min_open ? !(value > bounds.min) : value < bounds.min;
  if (ec == std::errc::result_out_of_range || below || !(value <= bounds.max)) {
    throw UsageError(prefix + "must be " + describe(bounds) + ", got " + quoted(text));
  }
  return value;
}

double parse_factor(std::string_view text, std::string_view what, const Bounds& bounds) {
  if (text.ends_with('x')) text.remove_suffix(1);
  return parse_double_in(text, what, bounds);
}

namespace {

// "010": octal to C (and to CLI11, which converts a flag's value with strtoll base 0),
// ten to most people; neither reading is taken.
bool leading_zero(std::string_view text) {
  const std::string_view digits = text.starts_with('-') ? text.substr(1) : text;
  return digits.size() > 1 && digits[0] == '0';
}

}  // namespace

long long parse_int_in(std::string_view text, std::string_view what, long long min, long long max) {
  const std::string prefix = what.empty() ? "" : std::string(what) + ": ";
  const std::string range = "an integer " + std::to_string(min) + ".." + std::to_string(max);
  long long value = 0;
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), last, value);
  if (text.empty() || ptr != last || leading_zero(text) ||
      (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    throw UsageError(prefix + "expected " + range + ", got " + quoted(text));
  }
  if (ec == std::errc::result_out_of_range || value < min || value > max) {
    throw UsageError(prefix + "must be " + range + ", got " + quoted(text));
  }
  return value;
}

std::uint64_t parse_uint64(std::string_view text, std::string_view what) {
  const std::string prefix = what.empty() ? "" : std::string(what) + ": ";
  const std::string range =
      "an integer 0.." + std::to_string(std::numeric_limits<std::uint64_t>::max());
  std::uint64_t value = 0;
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), last, value);
  if (text.empty() || ptr != last || leading_zero(text) || ec != std::errc()) {
    throw UsageError(prefix + "must be " + range + ", got " + quoted(text));
  }
  return value;
}

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t end = text.find(sep, begin);
    if (end == std::string_view::npos) {
      parts.emplace_back(text.substr(begin));
      return parts;
    }
    parts.emplace_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
}

std::string trim(std::string_view text) {
  const std::size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  const std::size_t end = text.find_last_not_of(kSpace);
  return std::string(text.substr(begin, end - begin + 1));
}

std::string format_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double value = bytes;
  while (std::fabs(value) >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char buf[48];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%.0f B", value);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", value, kUnits[unit]);
  }
  return buf;
}

std::string format_duration_ns(double ns) {
  static constexpr const char* kUnits[] = {"ns", "us", "ms", "s"};
  int unit = 0;
  double value = ns;
  // Move up while the 3-digit rounding would print 1000 or more.
  while (std::fabs(value) >= 999.5 && unit < 3) {
    value /= 1000;
    ++unit;
  }
  return three_digits(value) + " " + kUnits[unit];
}

void append_visible(std::string& out, char c, bool keep_whitespace) {
  const auto byte = static_cast<unsigned char>(c);
  const bool whitespace = c == '\t' || c == '\n';
  if ((byte < 0x20 && !(keep_whitespace && whitespace)) || byte == 0x7f) {
    static constexpr char kHex[] = "0123456789abcdef";
    out += "\\x";
    out += kHex[byte >> 4];
    out += kHex[byte & 0xf];
  } else {
    out += c;
  }
}

std::map<std::string, std::string> parse_key_values(std::string_view text, std::string_view what,
                                                    std::string_view allowed) {
  std::map<std::string, std::string> out;
  const std::string allowed_padded = " " + std::string(allowed) + " ";
  for (const std::string& item : split(text, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      throw UsageError(std::string(what) + ": expected key=value, got '" + item + "'");
    }
    const std::string key = trim(item.substr(0, eq));
    if (allowed_padded.find(" " + key + " ") == std::string::npos) {
      throw UsageError(std::string(what) + ": unknown key '" + key +
                       "' (expected one of: " + std::string(allowed) + ")");
    }
    if (!out.emplace(key, trim(item.substr(eq + 1))).second) {
      throw UsageError(std::string(what) + ": '" + key + "' given twice");
    }
  }
  return out;
}

}  // namespace tandem
