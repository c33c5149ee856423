// How much memory this process may still allocate, so that a run too large for the
// machine stops with one line before it allocates, instead of dying in std::bad_alloc (or
// at the hands of the OOM killer) halfway through.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tandem {

struct AvailableMemory {
  std::int64_t bytes = -1;  // -1: nothing could be read (unknown, not "none")
  std::string source;       // what said so: "MemAvailable", "cgroup memory.max", "sysconf"
};

// The smallest of: /proc/meminfo's MemAvailable (else sysconf's available pages) and what
// this process's memory cgroups still allow (cgroup_headroom).
AvailableMemory available_memory();

// What this process's memory cgroups still allow: from `proc_self_cgroup` (the text of
// /proc/self/cgroup) the cgroup v2 path ("0::/a/b": memory.max less memory.current) and
// the v1 memory controller's ("4:memory:/a/b": memory.limit_in_bytes less
// memory.usage_in_bytes, under ROOT/memory), each level up its hierarchy to the mount
// `root` (/sys/fs/cgroup) included: the tightest. bytes -1 where nothing limits.
struct CgroupHeadroom {
  std::int64_t bytes = -1;
  const char* source = "";
};
CgroupHeadroom cgroup_headroom(std::string_view proc_self_cgroup,
                               const std::filesystem::path& root);

// What this process's address-space limit (RLIMIT_AS, `ulimit -v`) still allows: the
// limit less the virtual memory mapped now; -1 where there is no limit.
std::int64_t address_space_headroom();

// The peak resident set of this process so far (VmHWM of /proc/self/status), in bytes;
// -1 where it cannot be read.
std::int64_t peak_rss_bytes();
// Resets that peak to the process's current resident set (Linux >= 4.0: "5" written to
// /proc/self/clear_refs), so that a later peak_rss_bytes() is the peak since now; false
// where it cannot.
bool reset_peak_rss();

}  // namespace tandem
