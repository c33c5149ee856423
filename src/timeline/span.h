// The unit of tandem's data model: one interval on one rank and one lane.
//
// Every producer (the CPU engine, a GPU engine, a PyTorch trace importer, the
// simulator) emits Spans, and every analysis and report consumes them. Names are ids
// into a NameTable so that recording a span never allocates.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tandem {

// Lanes: which resource a span occupies. The trace writer draws one thread per lane.
enum class Lane : std::uint8_t {
  kCompute,  // forward/backward/optimizer kernels
  kComm,     // a collective, from when this rank starts it until it completes here
  kWait,     // the training thread blocked on communication
  kIdle,
};
inline constexpr int kLaneCount = 4;

enum class SpanKind : std::uint8_t {
  kForward,
  kBackward,
  kOptimizer,
  kAllreduce,
  kReduceScatter,
  kAllgather,
  kBroadcast,
  kBarrier,
  kSend,
  kRecv,
  kWait,
  kKernel,  // an imported compute kernel
  kMemory,  // memcpy/memset
  kOther,
};

// All-reduce, reduce-scatter, all-gather, broadcast and barrier: the kinds every rank of
// a group runs together (not a send, a receive or anything else).
bool is_collective(SpanKind kind);

// A Span::group from the bytes that name a communicator (a split's parent group, split
// number and color; a profiler's process-group name): FNV-1a, never 0 (the world's).
std::uint32_t group_id(std::string_view key);

std::string_view to_string(Lane lane);
std::string_view to_string(SpanKind kind);
Lane parse_lane(std::string_view text);          // throws UsageError
SpanKind parse_span_kind(std::string_view text);  // throws UsageError

using NameId = std::uint32_t;
inline constexpr NameId kNoName = 0;

struct Span {
  std::int32_t rank = 0;
  Lane lane = Lane::kCompute;
  SpanKind kind = SpanKind::kOther;
  NameId name = kNoName;     // into the owning NameTable; kNoName: use the kind's name
  std::int32_t step = -1;    // training iteration (-1: none)
  std::int32_t tag = -1;     // layer index for compute, bucket index for comm (-1: none)
  std::int32_t micro = -1;   // compute and wait: the micro-batch within the step (-1: none)
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t bytes = 0;    // payload of a collective
  // Comm spans: when the collective was issued (its bucket became ready), on the same
  // clock; 0 = unknown. start_ns - issue_ns is how long it queued behind earlier work.
  std::int64_t issue_ns = 0;
  // Comm spans: which communicator ran it, the same number on every member and different
  // for two groups a split made (0: the world, or unknown). Matches a collective's spans
  // across ranks (analysis/waiting.h) where tensor, pipeline and data-parallel groups
  // run collectives with the same step, kind and tag at once.
  std::uint32_t group = 0;
  double flops = 0;          // useful floating-point operations of a compute span

  std::int64_t duration_ns() const { return end_ns - start_ns; }
};

// Interned strings. Interning takes a lock and may allocate, so do it at setup time.
// Lookups by id take the same lock (the id vector may grow under a concurrent intern);
// they are for reports and traces, not the hot path. Ids are stable and the returned
// reference stays valid for the table's lifetime (each string has its own allocation).
class NameTable {
 public:
  NameTable();
  NameId intern(std::string_view name);
  // Valid for ids returned by intern(); kNoName gives "".
  const std::string& name(NameId id) const;
  std::size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<std::string>> names_;
  std::unordered_map<std::string_view, NameId> ids_;
};

}  // namespace tandem
