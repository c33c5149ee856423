#include "core/memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

namespace tandem {

namespace fs = std::filesystem;

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

// A cgroup v1 limit this large is "no limit" (the kernel's page-rounded LLONG_MAX).
constexpr std::int64_t kNoLimit = std::int64_t{1} << 60;

// Up the hierarchy from `dir` to `top` (both included): the least any level still allows
// (its limit less its usage), -1 where no level has a limit.
std::int64_t tightest(const fs::path& top, fs::path dir, const char* limit_file,
                      const char* usage_file) {
  std::int64_t best = -1;
  for (;;) {
    const std::int64_t limit = read_number((dir / limit_file).c_str());
    const std::int64_t used = read_number((dir / usage_file).c_str());
    if (limit >= 0 && limit < kNoLimit && used >= 0) {
      const std::int64_t left = limit > used ? limit - used : 0;
      if (best < 0 || left < best) best = left;
    }
    if (dir == top || !dir.has_parent_path() || dir.parent_path() == dir) break;
    dir = dir.parent_path();
    if (dir.string().size() < top.string().size()) break;  // never above the mount
  }
  return best;
}

}  // namespace

CgroupHeadroom cgroup_headroom(std::string_view proc_self_cgroup, const fs::path& root) {
  CgroupHeadroom out;
  std::istringstream lines{std::string(proc_self_cgroup)};
  for (std::string line; std::getline(lines, line);) {
    // "ID:controllers:path"; v2's line is "0::path".
    const std::size_t a = line.find(':');
    const std::size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const fs::path path = fs::path(line.substr(b + 1)).relative_path();
    std::int64_t left = -1;
    const char* source = nullptr;
    if (controllers.empty() && line.starts_with("0:")) {
      left = tightest(root, path.empty() ? root : (root / path).lexically_normal(), "memory.max",
                      "memory.current");
      source = "cgroup v2 memory.max";
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      const fs::path top = root / "memory";
      left = tightest(top, path.empty() ? top : (top / path).lexically_normal(),
                      "memory.limit_in_bytes", "memory.usage_in_bytes");
      source = "cgroup v1 memory.limit_in_bytes";
    }
    if (left >= 0 && (out.bytes < 0 || left < out.bytes)) out = {left, source};
  }
  return out;
}

AvailableMemory available_memory() {
  AvailableMemory out;
  if (const std::int64_t bytes = mem_available(); bytes >= 0) {
    out = {bytes, "MemAvailable"};
  } else {
    const long pages = ::sysconf(_SC_AVPHYS_PAGES);
    const long page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) out = {static_cast<std::int64_t>(pages) * page, "sysconf"};
  }
  std::ifstream in("/proc/self/cgroup");
  std::stringstream cgroups;
  cgroups << in.rdbuf();
  const CgroupHeadroom headroom = cgroup_headroom(cgroups.str(), "/sys/fs/cgroup");
  if (headroom.bytes >= 0 && (out.bytes < 0 || headroom.bytes < out.bytes)) {
    out = {headroom.bytes, headroom.source};
  }
  return out;
}

std::int64_t peak_rss_bytes() { return proc_kib("/proc/self/status", "VmHWM:"); }

std::int64_t address_space_headroom() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return -1;
  const std::int64_t mapped = proc_kib("/proc/self/status", "VmSize:");
  if (mapped < 0) return -1;
  return std::max<std::int64_t>(0, static_cast<std::int64_t>(limit.rlim_cur) - mapped);
}

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace tandem
