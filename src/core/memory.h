// How much memory this process may still allocate, so that a run too large for the
// machine stops with one line before it allocates, instead of dying in std::bad_alloc (or
// at the hands of the OOM killer) halfway through.
#pragma once

#include <cstdint>
#include <string>

namespace tandem {

struct AvailableMemory {
  std::int64_t bytes = -1;  // -1: nothing could be read (unknown, not "none")
  std::string source;       // what said so: "MemAvailable", "cgroup memory.max", "sysconf"
};

// The smallest of: /proc/meminfo's MemAvailable (else sysconf's available pages) and what
// this process's cgroup (v2) still allows.
AvailableMemory available_memory();

// The peak resident set of this process so far (VmHWM of /proc/self/status), in bytes;
// -1 where it cannot be read.
std::int64_t peak_rss_bytes();
// Resets that peak to the process's current resident set (Linux >= 4.0: "5" written to
// /proc/self/clear_refs), so that a later peak_rss_bytes() is the peak since now; false
// where it cannot.
bool reset_peak_rss();

}  // namespace tandem
