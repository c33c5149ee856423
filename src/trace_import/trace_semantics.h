// What a Chrome trace's JSON means to the reader: which keys matter, which events are
// kept and how (the list is in trace_reader.h). It knows nothing of bytes: a tokenizer
// drives it with SAX-like calls in document order, so the fast reader (simdjson, over
// framed batches of events) and the reference reader (nlohmann's SAX parser over
// BoundedJson) give the same RawTrace and the same errors by construction. A new field
// is added here once (field_of, event_field or arg_field, finish_event) and both readers
// have it.
//
// Contract for a tokenizer: start_object/start_array, key, scalar, end_object/end_array
// exactly as the document nests. After key(), a value the semantics do not use may be
// skipped unseen (key() returns false); after start_*, a container with skipping() true
// may be closed at once without its contents. A tokenizer that skips must bound the
// nesting itself (kMaxJsonDepth), since only what it passes on is counted here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "trace_import/trace_reader.h"

namespace tandem {

// One scalar as a tokenizer delivers it, typed the way nlohmann's lexer types JSON
// numbers: an integer literal that fits int64 is kInt; one that fits only uint64 is
// kFloat with text "1e99" (no field can be that large); any other number is kFloat with
// its lexeme (decimal_us_to_ns reads timestamps from it). true/false/null are kOther.
struct JsonScalar {
  enum Type : std::uint8_t { kInt, kFloat, kString, kOther } type = kOther;
  std::int64_t i = 0;
  double d = 0;
  std::string_view text;  // the string, or a number's lexeme
  bool cut = false;       // a string cut to kMaxJsonStringBytes (bounded_json.h)
  bool is_number() const { return type == kInt || type == kFloat; }
};

class TraceSemantics {
 public:
  // `where` says where the tokenizer is, for errors: " at byte N[ (decompressed)]".
  TraceSemantics(std::string_view source, NameTable& names, RawTrace& out,
                 std::function<std::string()> where);
  ~TraceSemantics();
  TraceSemantics(const TraceSemantics&) = delete;
  TraceSemantics& operator=(const TraceSemantics&) = delete;

  void start_object();
  void end_object();
  void start_array();
  void end_array();
  // Returns whether the key's value matters; if not, it may be skipped unseen.
  bool key(std::string_view k);
  void scalar(const JsonScalar& v);
  // The innermost open container is one the semantics ignore, contents included.
  bool skipping() const;
  // Open containers (the document's own included).
  std::size_t depth() const;

  bool saw_events() const;    // a traceEvents array (or the bare array form) was opened
  bool saw_anything() const;  // any value at all
  // UsageError("<source>: <what><where>").
  [[noreturn]] void fail(const std::string& what) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
