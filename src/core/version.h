// tandem's version, as CMake's project() declares it: one place for --version and for the
// header of every summary.json.
#pragma once

#include <string_view>

namespace tandem {

std::string_view tandem_version();  // "0.1.0"

}  // namespace tandem
