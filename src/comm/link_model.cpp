// The alpha-beta link model used for wire-time emulation.
#include "comm/link_model.h"

#include <cmath>
#include <cstdio>
#include <iterator>

#include "core/error.h"
#include "core/parse.h"

namespace tandem {

LinkModel LinkModel::parse(std::string_view text) {
  const std::string usage =
      "expected BANDWIDTH,LATENCY like 25GB/s,5us, got '" + std::string(text) + "'";
  const std::vector<std::string> parts = split(text, ',');
  if (parts.size() != 2) throw UsageError(usage);
  LinkModel link;
  bool have_bandwidth = false;
  bool have_latency = false;
  for (const std::string& raw : parts) {
    const std::string part = trim(raw);
    // A rate ends in "/s"; anything else must be the latency.
    const bool is_rate = part.size() > 2 && part.ends_with("/s");
    try {
      if (is_rate && !have_bandwidth) {
        link.bandwidth_Bps = parse_bandwidth_Bps(part);
        have_bandwidth = true;
      } else if (!is_rate && !have_latency) {
        link.latency_ns = parse_duration_ns(part);
        have_latency = true;
      } else {
        throw UsageError("both parts are " + std::string(is_rate ? "bandwidths" : "latencies"));
      }
    } catch (const UsageError& e) {
      throw UsageError(usage + " (" + e.what() + ")");
    }
  }
  // Bounds are checked on the values, not the text: "0.000001B/s" and "8b/s" read alike.
  if (!(link.bandwidth_Bps >= kMinBandwidthBps && link.bandwidth_Bps <= kMaxBandwidthBps)) {
    throw UsageError("bandwidth must be >= 1 B/s and <= 1000 TB/s, got '" + std::string(text) +
                     "'");
  }
  if (link.latency_ns > kMaxLatencyNs) {
    throw UsageError("latency must be <= 1000 s, got '" + std::string(text) + "'");
  }
  return link;
}

std::string LinkModel::describe() const {
  if (!enabled()) return "none";
  // The largest unit that leaves a value of at least 1 (1 B/s is not "0.0 MB/s").
  static constexpr struct {
    double scale;
    const char* name;
  } kUnits[] = {{1e12, "TB/s"}, {1e9, "GB/s"}, {1e6, "MB/s"}, {1e3, "KB/s"}, {1, "B/s"}};
  std::size_t u = 0;
  while (u + 1 < std::size(kUnits) && bandwidth_Bps < kUnits[u].scale) ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f %s", bandwidth_Bps / kUnits[u].scale, kUnits[u].name);
  return std::string(buf) + ", " + format_duration_ns(static_cast<double>(latency_ns)) +
         " (emulated)";
}

std::int64_t LinkModel::wire_time_ns(SpanKind kind, std::int64_t bytes, int n) const {
  if (!enabled()) return 0;
  const double alpha = static_cast<double>(latency_ns);
  const double ns_per_byte = 1e9 / bandwidth_Bps;
  // One message of `message_bytes`, repeated `steps` times (ring schedule). In double:
  // 1 B/s and a large array give more nanoseconds than an int64 holds (llround of such a
  // value is undefined; it came back negative, and the wait was skipped).
  auto steps_of = [&](double steps, double message_bytes) {
    const double ns = steps * (alpha + message_bytes * ns_per_byte);
    if (!(ns < static_cast<double>(kMaxWireNs))) return kMaxWireNs;
    return static_cast<std::int64_t>(std::llround(ns));
  };
  const double chunk = n > 0 ? static_cast<double>(bytes) / n : 0;
  switch (kind) {
    case SpanKind::kSend:
    case SpanKind::kRecv:
      return steps_of(1, static_cast<double>(bytes));
    case SpanKind::kAllreduce:
      return n > 1 ? steps_of(2.0 * (n - 1), chunk) : 0;
    case SpanKind::kReduceScatter:
    case SpanKind::kAllgather:
      return n > 1 ? steps_of(n - 1, chunk) : 0;
    case SpanKind::kBroadcast:
      return n > 1 ? steps_of(1, static_cast<double>(bytes)) : 0;
    case SpanKind::kBarrier:
      return n > 1 ? steps_of(2.0 * (n - 1), 0) : 0;
    default:
      return steps_of(1, static_cast<double>(bytes));
  }
}

}  // namespace tandem
