// Memory queries (memory.h).
#include "core/memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace tandem {

std::optional<std::int64_t> available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<std::int64_t>(pages) * page;
  return std::nullopt;
}

std::int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace tandem
