// What this machine's memory allows: read before allocating a model, so that a run that
// cannot fit stops with one line instead of std::bad_alloc or the OOM killer.
#pragma once

#include <cstdint>
#include <optional>

namespace tandem {

// Bytes a new allocation can get without swapping: MemAvailable of /proc/meminfo, else
// the free physical pages; nullopt where neither can be read.
std::optional<std::int64_t> available_memory_bytes();

// This process's peak resident set size (getrusage), in bytes.
std::int64_t peak_rss_bytes();

}  // namespace tandem
