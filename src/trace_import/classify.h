// Which role an imported GPU event plays in the metrics: compute, communication, memory
// traffic, or none. The rules (docs/ANALYZE.md, "Classification"), first match wins:
//   1. name matches the comm regex                         -> communication
//   2. category gpu_memcpy/gpu_memset, or the memory regex -> memory
//   3. name matches the compute regex (default: any name)  -> compute
//   4. otherwise                                           -> ignored (counted)
// Regexes are RE2's syntax (Perl-like, without backreferences or lookaround),
// case-insensitive, and match anywhere in the name (search), in time linear in its length:
// a 100 KB name is matched like any other.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "timeline/span.h"

namespace re2 {
class RE2;
}

namespace tandem {

struct ClassificationRules {
  // NCCL's ncclKernel_* / ncclDevKernel_* (RCCL keeps those names), HCCL, MSCCL.
  static constexpr const char* kDefaultComm = "nccl|rccl|hccl|hcom_|msccl";
  // Kineto names copies "Memcpy HtoD (Pageable -> Device)" and fills "Memset (Device)".
  static constexpr const char* kDefaultMemory = "^(memcpy|memset)";

  std::string comm = kDefaultComm;
  std::string memory = kDefaultMemory;
  std::string compute;  // empty: every name that is not comm or memory
};

enum class EventRole : std::uint8_t { kCompute, kComm, kMemory, kIgnored };

std::string_view to_string(EventRole role);

// The collective a communication kernel runs, guessed from its name
// ("ncclDevKernel_AllReduce_Sum_f32_RING_LL" -> kAllreduce; "gloo:all_gather" ->
// kAllgather); kOther when the name does not say.
SpanKind guess_comm_kind(std::string_view name);

// Applies ClassificationRules. Matching a regex is slow and kernel names repeat a lot, so
// the verdict is cached per interned name.
class EventClassifier {
 public:
  // Throws UsageError("--comm-regex: invalid regular expression ...") and likewise.
  explicit EventClassifier(const ClassificationRules& rules);
  ~EventClassifier();
  EventClassifier(EventClassifier&&) noexcept;
  EventClassifier& operator=(EventClassifier&&) noexcept;

  // `id` names the event in `names`; the name is only looked up on a cache miss.
  EventRole classify(NameId id, bool memory_category, const NameTable& names);

 private:
  EventRole classify_uncached(std::string_view name, bool memory_category) const;

  std::unique_ptr<re2::RE2> comm_, memory_, compute_;
  bool any_compute_ = true;
  // Indexed by NameId, two entries per name (memory category or not); kUnknown: not yet.
  std::vector<std::uint8_t> cache_;
};

}  // namespace tandem
