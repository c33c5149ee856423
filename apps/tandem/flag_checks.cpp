#include "flag_checks.h"

#include <algorithm>
#include <limits>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace tandem::cli {

namespace {

// A CLI11 validator from a parser that throws UsageError; the message is what CLI11 prints
// after the flag's name.
template <typename Parse>
CLI::Validator from_parser(std::string description, Parse parse) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        try {
          parse(text);
          return {};
        } catch (const UsageError& e) {
          return e.what();
        }
      },
      std::move(description));
}

// An option that takes exactly one value (not a flag, not a list).
bool single_value(const CLI::Option& opt) {
  return opt.get_type_size_max() > 0 && opt.get_items_expected_max() == 1;
}

std::string display_name(const CLI::Option& opt) {
  return opt.get_positional() ? opt.get_name() : opt.get_name(false, true);
}

// Edits from `a` to `b` (insert, delete, substitute, or swap two neighbours: "trian" is one
// edit from "train").
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1] ? 1u : 0u)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

CLI::Validator number_in(const Bounds& bounds) {
  return from_parser("NUMBER " + describe(bounds),
                     [bounds](const std::string& text) { parse_double_in(text, "", bounds); });
}

CLI::Validator integer_in(long long min, long long max) {
  return from_parser("INT " + std::to_string(min) + ".." + std::to_string(max),
                     [min, max](const std::string& text) { parse_int_in(text, "", min, max); });
}

CLI::Validator unsigned_integer() {
  return from_parser("UINT64", [](const std::string& text) { parse_uint64(text, ""); });
}

void keep_repeated_values(CLI::App& app) {
  for (CLI::App* command : app.get_subcommands({})) {
    for (CLI::Option* opt : command->get_options()) {
      if (single_value(*opt)) opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
  }
}

void check_given_values(const CLI::App& command) {
  for (const CLI::Option* opt : command.get_options()) {
    const std::vector<std::string>& given = opt->results();
    if (single_value(*opt) && given.size() > 1) {
      // Neither the first nor the last wins silently: a script that sets a flag twice has
      // a mistake in it.
      std::string values;
      for (const std::string& v : given) values += (values.empty() ? "'" : ", '") + v + "'";
      throw UsageError(display_name(*opt) + ": given " + std::to_string(given.size()) + " times (" +
                       values + "); give it once");
    }
    if (opt->get_type_size_max() > 0 &&
        std::any_of(given.begin(), given.end(), [](const std::string& v) { return v.empty(); })) {
      throw UsageError(display_name(*opt) + ": empty value");
    }
  }
}

nlohmann::json settings_of(const CLI::App& command, const std::set<std::string>& ignored) {
  nlohmann::json settings = nlohmann::json::object();
  for (const CLI::Option* opt : command.get_options()) {
    const std::string name = display_name(*opt);
    if (name.empty() || name == "--help" || ignored.count(name)) continue;
    const std::vector<std::string>& given = opt->results();
    if (opt->get_type_size_max() == 0) {
      if (!given.empty()) settings[name] = true;
    } else if (!single_value(*opt)) {
      if (!given.empty()) settings[name] = given;
    } else if (!given.empty()) {
      settings[name] = given.back();
    } else if (!opt->get_default_str().empty()) {
      settings[name] = opt->get_default_str();
    }
  }
  return settings;
}

void check_subcommand(const CLI::App& app, int argc, const char* const* argv) {
  if (argc < 2 || argv[1][0] == '-') return;  // a flag (--help, --version) or nothing
  const std::string word = argv[1];
  std::string nearest;
  std::size_t best = std::numeric_limits<std::size_t>::max();
  std::string names;
  for (const CLI::App* command : app.get_subcommands({})) {
    const std::string& name = command->get_name();
    if (name == word) return;
    names += (names.empty() ? "" : ", ") + name;
    const std::size_t d = edit_distance(word, name);
    if (d < best) {
      best = d;
      nearest = name;
    }
  }
  // A suggestion only when it is plausibly a typo: at most a third of the word wrong.
  if (best <= std::max<std::size_t>(1, word.size() / 3)) {
    throw UsageError("unknown subcommand '" + word + "' (did you mean '" + nearest + "'?)");
  }
  throw UsageError("unknown subcommand '" + word + "' (expected one of: " + names + ")");
}

void add_force_flag(CLI::App& command, bool& force) {
  command.add_flag("--force", force,
                   "Replace the results --out holds (kept until this run's results are whole)");
}

}  // namespace tandem::cli
