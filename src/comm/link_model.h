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
  // What parse() accepts: 1 B/s to 1000 TB/s, latency 0 to 1000 s. A slower link than
  // 1 B/s is no test of anything; the latency bound keeps every product in range.
  static constexpr double kMinBandwidthBps = 1;
  static constexpr double kMaxBandwidthBps = 1e15;
  static constexpr std::int64_t kMaxLatencyNs = 1'000'000'000'000;
  // The longest wire time wire_time_ns() returns (about 146 years): a longer one is this,
  // so that adding it to a clock reading cannot overflow. --timeout (at most 1e6 s) ends
  // the wait long before.
  static constexpr std::int64_t kMaxWireNs = std::int64_t{1} << 62;

  double bandwidth_Bps = 0;     // beta^-1
  std::int64_t latency_ns = 0;  // alpha
  bool enabled() const { return bandwidth_Bps > 0; }

  // Parses "25GB/s,5us" (either part may come first); throws UsageError, also for a
  // bandwidth or latency outside the bounds above.
  static LinkModel parse(std::string_view text);
  std::string describe() const;  // "25.0 GB/s, 5 us (emulated)"
  // Wire time of one operation on n ranks, as a ring algorithm would spend it:
  // allreduce 2(n-1) steps of bytes/n, reduce_scatter/allgather n-1 steps of bytes/n
  // (bytes = the whole array), broadcast and send/recv one message, barrier 2(n-1) alphas.
  // Computed in double and rounded to the nearest ns; saturates at kMaxWireNs.
  std::int64_t wire_time_ns(SpanKind kind, std::int64_t bytes, int n) const;
};

}  // namespace tandem
