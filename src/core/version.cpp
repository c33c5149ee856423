#include "core/version.h"

namespace tandem {

// TANDEM_VERSION is set for this library by src/CMakeLists.txt from project(VERSION).
std::string_view tandem_version() { return TANDEM_VERSION; }

}  // namespace tandem
