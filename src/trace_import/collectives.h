// Which collective an imported communication span ran and how many bytes it moved, and
// the per-collective table of `tandem analyze` (docs/ANALYZE.md, "Collectives").
//
// The collective comes from PyTorch's "Collective name" argument when the trace has it
// (NCCL kernels and record_param_comms CPU ops carry it since PyTorch 2.2), else from the
// kernel's name (ncclDevKernel_AllGather_RING_LL -> AllGather). The size follows
// nccl-tests (doc/PERFORMANCE.md of nccl-tests): the larger of the input and output
// element counts times the element size, which is the all-reduce's count, the
// all-gather's gathered output, the reduce-scatter's input, the all-to-all's send buffer.
// algbw = size / time; busbw = algbw * factor, the factor by collective and group size n:
//   AllReduce 2(n-1)/n;  AllGather, ReduceScatter, AllToAll (n-1)/n;  Broadcast, Reduce,
//   SendRecv, Send, Recv 1.
#pragma once

#include <cstdint>
#include <climits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "timeline/recorder.h"

namespace tandem {

enum class CollectiveType : std::uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAllToAll,
  kSendRecv,
  kSend,
  kRecv,
  kBarrier,
  kUnknown,
};

std::string_view to_string(CollectiveType type);

// From PyTorch's "Collective name" ("allreduce", "_allgather_base",
// "reduce_scatter_tensor_coalesced", "all_to_all", ...) or from a kernel or op name
// ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "gloo:all_gather"); kUnknown if neither
// says.
CollectiveType collective_type(std::string_view name);

// The SpanKind a collective's span gets (all-to-all and send/recv pairs have none: kOther).
SpanKind span_kind(CollectiveType type);

// Bytes of one element of a PyTorch dtype as the profiler writes it ("Float", "BFloat16",
// "c10::Half", "float32", ...); nullopt if unknown.
std::optional<int> dtype_bytes(std::string_view dtype);

// nccl-tests' bus-bandwidth factor; NaN when the group size is unknown (< 1).
double bus_factor(CollectiveType type, int group_size);

// a + b, held at the int64 bounds instead of wrapping: sums of durations a hostile trace
// can make (each up to 1e15 ns) stay meaningful numbers.
inline std::int64_t add_saturating(std::int64_t a, std::int64_t b) {
  std::int64_t sum = 0;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? INT64_MAX : INT64_MIN;
}

// What is known about one imported communication span.
struct CommInfo {
  std::size_t span = 0;  // index into the timeline's spans
  std::int64_t bytes = -1;       // nccl-tests size; -1: unknown
  std::int32_t group_size = -1;  // -1: unknown
  CollectiveType type = CollectiveType::kUnknown;
  NameId dtype = kNoName;        // as written, in the timeline's names; kNoName: unknown
  NameId process_group = kNoName;  // "Process Group Name", as written; kNoName: unknown
};

// One row of the collectives table: the spans of one collective type, size and group size.
struct CollectiveRow {
  CollectiveType type = CollectiveType::kUnknown;
  std::int64_t bytes = -1;
  std::int32_t group_size = -1;
  std::string dtype;
  std::size_t count = 0;
  std::int64_t time_ns = 0;     // Σ durations
  std::int64_t hidden_ns = 0;   // Σ time overlapped by compute on the span's rank
  double hidden_share() const;  // hidden / time
  double algbw_gbps() const;    // Σ bytes / Σ time, GB/s (1e9); NaN when bytes unknown
  double busbw_gbps() const;
};

// Rows over the comm spans whose step is in `steps` (all steps when empty), sorted by
// time, longest first.
std::vector<CollectiveRow> collective_table(const Timeline& timeline,
                                            const std::vector<CommInfo>& comm,
                                            const std::vector<std::int32_t>& steps);

}  // namespace tandem
