// "key=value,key=value" option lists as used by --microbench and synthetic:... specs.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace tandem {

// Parses "a=1,b=2" into {a:1, b:2}; every key must be in `allowed` (a space-separated
// list) and appear once. `what` names the spec in errors. Throws UsageError.
std::map<std::string, std::string> parse_key_values(std::string_view text, std::string_view what,
                                                    std::string_view allowed);

}  // namespace tandem
