#include "trace_import/collectives.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "analysis/intervals.h"

namespace tandem {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Lower case without separators: "AllReduce", "all_reduce", "_allreduce_base" -> "allreduce"..
std::string squash(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  return out;
}


}  // namespace

std::string_view to_string(CollectiveType type) {
  switch (type) {
    case CollectiveType::kAllReduce:
      return "AllReduce";
    case CollectiveType::kAllGather:
      return "AllGather";
    case CollectiveType::kReduceScatter:
      return "ReduceScatter";
    case CollectiveType::kBroadcast:
      return "Broadcast";
    case CollectiveType::kReduce:
      return "Reduce";
    case CollectiveType::kAllToAll:
      return "AllToAll";
    case CollectiveType::kSendRecv:
      return "SendRecv";
    case CollectiveType::kSend:
      return "Send";
    case CollectiveType::kRecv:
      return "Recv";
    case CollectiveType::kBarrier:
      return "Barrier";
    case CollectiveType::kUnknown:
      break;
  }
  return "unknown";
}

CollectiveType collective_type(std::string_view name) {
  const std::string s = squash(name);
  // Longer needles first: "reducescatter" holds "reduce", "sendrecv" both halves,
  // "alltoall" is not "all" + "reduce".
  static const std::pair<const char*, CollectiveType> kRules[] = {
      {"reducescatter", CollectiveType::kReduceScatter},
      {"allreduce", CollectiveType::kAllReduce},
      {"allgather", CollectiveType::kAllGather},
      {"alltoall", CollectiveType::kAllToAll},
      {"broadcast", CollectiveType::kBroadcast},
      {"barrier", CollectiveType::kBarrier},
      {"sendrecv", CollectiveType::kSendRecv},
      {"send", CollectiveType::kSend},
      {"recv", CollectiveType::kRecv},
      {"reduce", CollectiveType::kReduce},
  };
  for (const auto& [needle, type] : kRules) {
    if (s.find(needle) != std::string::npos) return type;
  }
  return CollectiveType::kUnknown;
}

SpanKind span_kind(CollectiveType type) {
  switch (type) {
    case CollectiveType::kAllReduce:
      return SpanKind::kAllreduce;
    case CollectiveType::kAllGather:
      return SpanKind::kAllgather;
    case CollectiveType::kReduceScatter:
      return SpanKind::kReduceScatter;
    case CollectiveType::kBroadcast:
      return SpanKind::kBroadcast;
    case CollectiveType::kBarrier:
      return SpanKind::kBarrier;
    case CollectiveType::kSend:
      return SpanKind::kSend;
    case CollectiveType::kRecv:
      return SpanKind::kRecv;
    default:
      return SpanKind::kOther;
  }
}

std::optional<int> dtype_bytes(std::string_view dtype) {
  std::string s = squash(dtype);
  if (s.starts_with("c10")) s = s.substr(3);
  if (s.starts_with("torch")) s = s.substr(5);
  static const std::pair<const char*, int> kSizes[] = {
      {"float", 4},      {"float32", 4},     {"double", 8},      {"float64", 8},
      {"half", 2},       {"float16", 2},     {"bfloat16", 2},    {"int", 4},
      {"int32", 4},      {"long", 8},        {"int64", 8},       {"short", 2},
      {"int16", 2},      {"char", 1},        {"int8", 1},        {"byte", 1},
      {"uint8", 1},      {"bool", 1},        {"complexfloat", 8}, {"complex64", 8},
      {"complexdouble", 16}, {"complex128", 16}, {"complexhalf", 4},
  };
  for (const auto& [name, bytes] : kSizes) {
    if (s == name) return bytes;
  }
  if (s.starts_with("float8")) return 1;  // Float8_e4m3fn, Float8_e5m2, ...
  return std::nullopt;
}

double bus_factor(CollectiveType type, int group_size) {
  if (group_size < 1) return kNaN;
  const double n = group_size;
  switch (type) {
    case CollectiveType::kAllReduce:
      return 2 * (n - 1) / n;
    case CollectiveType::kAllGather:
    case CollectiveType::kReduceScatter:
    case CollectiveType::kAllToAll:
      return (n - 1) / n;
    case CollectiveType::kBroadcast:
    case CollectiveType::kReduce:
    case CollectiveType::kSendRecv:
    case CollectiveType::kSend:
    case CollectiveType::kRecv:
      return 1;
    case CollectiveType::kBarrier:
    case CollectiveType::kUnknown:
      break;
  }
  return kNaN;
}

double CollectiveRow::hidden_share() const {
  return time_ns > 0 ? static_cast<double>(hidden_ns) / static_cast<double>(time_ns) : kNaN;
}

double CollectiveRow::algbw_gbps() const {
  if (bytes < 0 || time_ns <= 0) return kNaN;
  return static_cast<double>(bytes) * static_cast<double>(count) / static_cast<double>(time_ns);
}

double CollectiveRow::busbw_gbps() const { return algbw_gbps() * bus_factor(type, group_size); }

std::vector<CollectiveRow> collective_table(const Timeline& timeline,
                                            const std::vector<CommInfo>& comm,
                                            const std::vector<std::int32_t>& steps) {
  std::map<std::int32_t, std::vector<Interval>> compute_by_rank;
  for (const Span& s : timeline.spans) {
    if (s.lane == Lane::kCompute) compute_by_rank[s.rank].push_back({s.start_ns, s.end_ns});
  }
  std::map<std::int32_t, IntervalSet> compute;
  for (auto& [rank, intervals] : compute_by_rank) compute[rank] = union_of(std::move(intervals));

  using Key = std::tuple<CollectiveType, std::int64_t, std::int32_t, std::string>;
  std::map<Key, CollectiveRow> rows;
  for (const CommInfo& c : comm) {
    const Span& s = timeline.spans.at(c.span);
    if (!steps.empty() && !std::binary_search(steps.begin(), steps.end(), s.step)) continue;
    const std::string dtype = timeline.names->name(c.dtype);
    CollectiveRow& row = rows[Key{c.type, c.bytes, c.group_size, dtype}];
    row.type = c.type;
    row.bytes = c.bytes;
    row.group_size = c.group_size;
    row.dtype = dtype;
    ++row.count;
    row.time_ns = add_saturating(row.time_ns, s.duration_ns());
    if (auto it = compute.find(s.rank); it != compute.end()) {
      row.hidden_ns = add_saturating(row.hidden_ns, covered_length(it->second, {s.start_ns, s.end_ns}));
    }
  }
  std::vector<CollectiveRow> out;
  out.reserve(rows.size());
  for (auto& [key, row] : rows) out.push_back(std::move(row));
  std::stable_sort(out.begin(), out.end(), [](const CollectiveRow& a, const CollectiveRow& b) {
    return a.time_ns > b.time_ns;
  });
  return out;
}

}  // namespace tandem
