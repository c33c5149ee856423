#include "core/memory.h"

#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>
#include <string_view>

namespace tandem {

namespace {

// The leading decimal of a file's first line ("max" and unreadable files: -1).
std::int64_t read_number(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!std::getline(in, text)) return -1;
  std::int64_t value = -1;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && ptr != text.data() ? value : -1;
}

// A "Key:  123 kB" line of a /proc file, in bytes; -1 when absent.
std::int64_t proc_kib(const char* path, std::string_view key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(key)) continue;
    std::istringstream fields(line.substr(key.size()));
    std::int64_t kib = -1;
    if (fields >> kib) return kib * 1024;
  }
  return -1;
}

// MemAvailable is absent before Linux 3.14.
std::int64_t mem_available() { return proc_kib("/proc/meminfo", "MemAvailable:"); }

// What the cgroup (v2) this process runs in still allows; -1 without a limit. Only the
// process's own cgroup is read: a container sees its own as the root.
std::int64_t cgroup_headroom() {
  const std::int64_t limit = read_number("/sys/fs/cgroup/memory.max");
  const std::int64_t used = read_number("/sys/fs/cgroup/memory.current");
  if (limit < 0 || used < 0) return -1;
  return limit > used ? limit - used : 0;
}

}  // namespace

AvailableMemory available_memory() {
  AvailableMemory out;
  if (const std::int64_t bytes = mem_available(); bytes >= 0) {
    out = {bytes, "MemAvailable"};
  } else {
    const long pages = ::sysconf(_SC_AVPHYS_PAGES);
    const long page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) out = {static_cast<std::int64_t>(pages) * page, "sysconf"};
  }
  const std::int64_t headroom = cgroup_headroom();
  if (headroom >= 0 && (out.bytes < 0 || headroom < out.bytes)) {
    out = {headroom, "cgroup memory.max"};
  }
  return out;
}

std::int64_t peak_rss_bytes() { return proc_kib("/proc/self/status", "VmHWM:"); }

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace tandem
