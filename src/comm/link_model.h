// Link emulation: alpha-beta wire time added after the real data movement, to mimic a
// slower interconnect than shared memory (the local backend). Always reported as
// emulated.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "timeline/span.h"

namespace tandem {

struct LinkModel {
  double bandwidth_Bps = 0;     // beta^-1
  std::int64_t latency_ns = 0;  // alpha
  bool enabled() const { return bandwidth_Bps > 0; }

  // Parses "25GB/s,5us" (either part may come first); throws UsageError.
  static LinkModel parse(std::string_view text);
  std::string describe() const;  // "25.0 GB/s, 5 us (emulated)"
  // Wire time of one operation on n ranks, as a ring algorithm would spend it:
  // allreduce 2(n-1) steps of bytes/n, reduce_scatter/allgather n-1 steps of bytes/n
  // (bytes = the whole array), broadcast and send/recv one message, barrier 2(n-1) alphas.
  std::int64_t wire_time_ns(SpanKind kind, std::int64_t bytes, int n) const;
};

}  // namespace tandem
