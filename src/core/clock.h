// One monotonic clock for every span of a process: nanoseconds since an arbitrary epoch.
#pragma once

#include <chrono>
#include <cstdint>

namespace tandem {

inline std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace tandem
