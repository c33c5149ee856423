#include "trace_import/classify.h"

#include <re2/re2.h>

#include <algorithm>

#include "core/error.h"
#include "trace_import/collectives.h"

namespace tandem {
namespace {

constexpr std::uint8_t kUnknown = 0xff;

std::unique_ptr<re2::RE2> compile(const std::string& pattern, const char* flag) {
  re2::RE2::Options options;
  options.set_case_sensitive(false);
  options.set_log_errors(false);  // the error is ours to print, once
  auto re = std::make_unique<re2::RE2>(pattern, options);
  if (!re->ok()) {
    throw UsageError(std::string(flag) + ": invalid regular expression '" + pattern +
                     "': " + re->error());
  }
  return re;
}

}  // namespace

std::string_view to_string(EventRole role) {
  switch (role) {
    case EventRole::kCompute:
      return "compute";
    case EventRole::kComm:
      return "comm";
    case EventRole::kMemory:
      return "memory";
    case EventRole::kIgnored:
      return "ignored";
  }
  return "unknown";
}

SpanKind guess_comm_kind(std::string_view name) { return span_kind(collective_type(name)); }

EventClassifier::EventClassifier(const ClassificationRules& rules)
    : comm_(compile(rules.comm, "--comm-regex")),
      memory_(compile(rules.memory, "--memory-regex")),
      compute_(compile(rules.compute, "--compute-regex")),
      any_compute_(rules.compute.empty()) {}

EventClassifier::~EventClassifier() = default;
EventClassifier::EventClassifier(EventClassifier&&) noexcept = default;
EventClassifier& EventClassifier::operator=(EventClassifier&&) noexcept = default;

EventRole EventClassifier::classify(NameId id, bool memory_category, const NameTable& names) {
  const std::size_t slot = 2 * static_cast<std::size_t>(id) + (memory_category ? 1 : 0);
  if (slot >= cache_.size()) cache_.resize(std::max(slot + 1, 2 * cache_.size()), kUnknown);
  if (cache_[slot] == kUnknown) {
    cache_[slot] = static_cast<std::uint8_t>(classify_uncached(names.name(id), memory_category));
  }
  return static_cast<EventRole>(cache_[slot]);
}

EventRole EventClassifier::classify_uncached(std::string_view name, bool memory_category) const {
  const auto matches = [&](const re2::RE2& re) {
    return re2::RE2::PartialMatch(re2::StringPiece(name.data(), name.size()), re);
  };
  if (matches(*comm_)) return EventRole::kComm;
  if (memory_category || matches(*memory_)) return EventRole::kMemory;
  if (any_compute_ || matches(*compute_)) return EventRole::kCompute;
  return EventRole::kIgnored;
}

}  // namespace tandem
