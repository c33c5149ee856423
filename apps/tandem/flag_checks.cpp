#include "flag_checks.h"

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

}  // namespace

CLI::Validator number_in(const Bounds& bounds) {
  return from_parser("NUMBER " + describe(bounds),
                     [bounds](const std::string& text) { parse_double_in(text, "", bounds); });
}

}  // namespace tandem::cli
