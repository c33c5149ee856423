#include "experiment/spec_parse.h"

#include "core/error.h"
#include "core/parse.h"

namespace tandem {

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
      throw UsageError(std::string(what) + ": unknown key '" + key + "' (expected one of: " +
                       std::string(allowed) + ")");
    }
    if (!out.emplace(key, trim(item.substr(eq + 1))).second) {
      throw UsageError(std::string(what) + ": '" + key + "' given twice");
    }
  }
  return out;
}

}  // namespace tandem
