#include "trace_import/trace_reader.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "trace_import/bounded_json.h"
#include "trace_import/fast_trace_reader.h"
#include "trace_import/trace_semantics.h"

namespace tandem {
namespace {

using nlohmann::json;

// The reference tokenizer: nlohmann's SAX parser over BoundedJson, driving the
// semantics. Every input goes through it the fast reader gives up on.
class SaxAdapter : public nlohmann::json_sax<json> {
 public:
  SaxAdapter(BoundedJson& text, std::string_view source, TraceSemantics& semantics)
      : json_(text), source_(source), semantics_(semantics) {}

  bool null() override { return scalar({}); }
  bool boolean(bool) override { return scalar({}); }
  bool number_integer(number_integer_t v) override {
    return scalar({.type = JsonScalar::kInt, .i = v, .d = static_cast<double>(v), .text = {}});
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (v > static_cast<number_unsigned_t>(std::numeric_limits<std::int64_t>::max())) {
      // Beyond int64: no field the reader uses can be that large.
      return scalar({.type = JsonScalar::kFloat, .i = 0, .d = static_cast<double>(v), .text = "1e99"});
    }
    return number_integer(static_cast<std::int64_t>(v));
  }
  bool number_float(number_float_t v, const string_t& text) override {
    return scalar({.type = JsonScalar::kFloat, .i = 0, .d = v, .text = text});
  }
  bool string(string_t& s) override {
    const bool cut = json_.was_cut(strings_++);
    return scalar({.type = JsonScalar::kString, .i = 0, .d = 0, .text = s, .cut = cut});
  }
  bool binary(binary_t&) override { return scalar({}); }

  bool key(string_t& k) override {
    (void)json_.was_cut(strings_++);  // a cut key matches no field: nothing to note
    semantics_.key(k);
    return true;
  }
  bool start_object(std::size_t) override {
    semantics_.start_object();
    return true;
  }
  bool end_object() override {
    semantics_.end_object();
    return true;
  }
  bool start_array(std::size_t) override {
    semantics_.start_array();
    return true;
  }
  bool end_array() override {
    semantics_.end_array();
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& error) override {
    std::string what = error.what();
    // The first token was the end of the input: nothing but whitespace.
    if (!semantics_.saw_anything() && what.find("unexpected end of input") != std::string::npos) {
      throw UsageError(std::string(source_) + ": empty file (not a trace)");
    }
    // nlohmann's message is "[json.exception...] parse error at line L, column C: what".
    if (const auto at = what.find(": ", what.find("column")); at != std::string::npos) {
      what = what.substr(at + 2);
    }
    // "...; last read: '<token>'" quotes the token whole: up to 64 KiB of a long string.
    constexpr std::size_t kQuoted = 40;
    constexpr std::string_view kLastRead = "; last read: '";
    if (const auto at = what.find(kLastRead); at != std::string::npos) {
      const std::size_t begin = at + kLastRead.size();
      const std::size_t length = what.size() - begin - 1;  // the closing quote
      if (what.ends_with('\'') && length > kQuoted) {
        std::size_t keep = kQuoted;  // not inside a UTF-8 sequence
        while (keep > 0 && (static_cast<unsigned char>(what[begin + keep]) & 0xC0) == 0x80) --keep;
        what = what.substr(0, begin + keep) + "...'";
      }
    }
    throw UsageError(std::string(source_) + ": not valid JSON at byte " +
                     std::to_string(json_.original_offset(position)) + json_.where_suffix() +
                     ": " + what);
  }

 private:
  bool scalar(const JsonScalar& v) {
    semantics_.scalar(v);
    return true;
  }

  BoundedJson& json_;
  std::string_view source_;
  TraceSemantics& semantics_;
  std::uint64_t strings_ = 0;  // strings seen, keys included: the next one's ordinal
};

}  // namespace

std::optional<std::int64_t> decimal_us_to_ns(std::string_view text) {
  std::size_t i = 0;
  const bool negative = i < text.size() && text[i] == '-';
  if (negative) ++i;
  std::int64_t us = 0;
  std::size_t int_digits = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++int_digits) {
    if (int_digits >= 17) return std::nullopt;  // > 1e17 us: beyond any bound we accept
    us = us * 10 + (text[i] - '0');
  }
  if (int_digits == 0) return std::nullopt;
  std::int64_t frac_ns = 0;
  bool round_up = false;
  if (i < text.size() && text[i] == '.') {
    ++i;
    std::size_t frac_digits = 0;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++frac_digits) {
      if (frac_digits < 3) frac_ns = frac_ns * 10 + (text[i] - '0');
      // The fourth decimal decides rounding to the nearest ns; later ones cannot change it.
      if (frac_digits == 3) round_up = text[i] >= '5';
    }
    for (; frac_digits < 3; ++frac_digits) frac_ns *= 10;
  }
  if (i != text.size()) return std::nullopt;  // an exponent
  if (us > kMaxAbsTsUs) return std::nullopt;
  const std::int64_t ns = us * 1000 + frac_ns + (round_up ? 1 : 0);
  return negative ? -ns : ns;
}

void read_value_with_reference(std::streambuf& bytes, TraceSemantics& semantics) {
  BoundedJson text(bytes, "", false);  // messages are the reference reader's, on a rereading
  SaxAdapter handler(text, "", semantics);
  std::istream in(&text);
  json::sax_parse(in, &handler, json::input_format_t::json, /*strict=*/true);
}

RawTrace read_raw_trace_reference(TraceBytes& bytes, std::string_view source, NameTable& names) {
  RawTrace out;
  BoundedJson text(bytes, std::string(source), bytes.compressed());
  TraceSemantics semantics(source, names, out, [&text] {
    return " at byte " + std::to_string(text.position()) + text.where_suffix();
  });
  SaxAdapter handler(text, source, semantics);
  std::istream in(&text);
  // strict: trailing content after the document is an error too.
  json::sax_parse(in, &handler, json::input_format_t::json, /*strict=*/true);
  if (!semantics.saw_events()) semantics.fail("not a Chrome trace: no \"traceEvents\" array");
  out.bytes_read = text.position();
  return out;
}

void remap_names(RawTrace& raw, const NameTable& from, NameTable& to) {
  std::vector<NameId> ids(from.size(), kNoName);  // from's id -> to's, filled on first use
  const auto map = [&](NameId& id) {
    if (id == kNoName) return;
    NameId& mapped = ids.at(static_cast<std::size_t>(id));
    if (mapped == kNoName) mapped = to.intern(from.name(id));
    id = mapped;
  };
  for (RawEvent& e : raw.events) map(e.name);
  for (CpuInterval& op : raw.collective_ops) map(op.name);
  for (CpuInterval& op : raw.cpu_ops) map(op.name);
  for (CollectiveArgs& a : raw.collective_args) {
    map(a.collective);
    map(a.dtype);
    map(a.process_group);
  }
  for (NameId& id : raw.step_mark_names) map(id);
}

RawTrace read_raw_trace(TraceBytes& bytes, std::string_view source, NameTable& names) {
  {
    RawTrace out;
    if (read_raw_trace_fast(bytes, source, names, out)) return out;
  }
  bytes.rewind();
  return read_raw_trace_reference(bytes, source, names);
}

}  // namespace tandem
