#include "trace_import/fast_trace_reader.h"

#include <simdjson.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "trace_import/bounded_json.h"
#include "trace_import/trace_semantics.h"

namespace tandem {
namespace {

using namespace std::string_view_literals;

// Thrown inside the fast reader when it gives up; never leaves this file.
struct GiveUp {};

constexpr std::size_t kBlock = 64;
// Events parsed at once: simdjson's buffers for a batch (about 20 bytes per byte of
// JSON) stay in the caches.
constexpr std::size_t kBatchBytes = 256 << 10;
// An event (or top-level value) longer than this may hold a number longer than
// kMaxJsonNumberChars, which the reference reader refuses: such ones are checked.
constexpr std::size_t kLongNumberPossible = kMaxJsonNumberChars;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Which bytes of a stream are inside strings, 64 bytes at a time, carried across blocks.
// A quote is a string's delimiter unless a backslash escapes it; a backslash escapes the
// byte after it unless it is itself escaped. Backslashes are rare in traces, so they are
// walked one by one; quotes become string regions with a prefix XOR.
class StringMask {
 public:
  // Brackets ({}[]) outside strings in p[0, 64): `open` and `close`.
  void brackets(const char* p, std::uint64_t& open, std::uint64_t& close) {
    std::uint64_t quote = 0, backslash = 0, opens = 0, closes = 0;
#if defined(__SSE2__)
    // '[' and ']' differ from '{' and '}' in bit 0x20 alone: one compare each for opens
    // and closes.
    const __m128i quotes = _mm_set1_epi8('"'), backslashes = _mm_set1_epi8('\\');
    const __m128i fold = _mm_set1_epi8(0x20);
    const __m128i o = _mm_set1_epi8('{'), c = _mm_set1_epi8('}');
    for (int k = 0; k < 4; ++k) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
      const __m128i folded = _mm_or_si128(x, fold);
      const auto bits = [](__m128i m) {
        return static_cast<std::uint64_t>(static_cast<std::uint16_t>(_mm_movemask_epi8(m)));
      };
      quote |= bits(_mm_cmpeq_epi8(x, quotes)) << (16 * k);
      backslash |= bits(_mm_cmpeq_epi8(x, backslashes)) << (16 * k);
      opens |= bits(_mm_cmpeq_epi8(folded, o)) << (16 * k);
      closes |= bits(_mm_cmpeq_epi8(folded, c)) << (16 * k);
    }
#else
    for (int i = 0; i < 64; ++i) {
      const char c = p[i];
      const char folded = static_cast<char>(c | 0x20);  // '[' -> '{', ']' -> '}'
      quote |= static_cast<std::uint64_t>(c == '"') << i;
      backslash |= static_cast<std::uint64_t>(c == '\\') << i;
      opens |= static_cast<std::uint64_t>(folded == '{') << i;
      closes |= static_cast<std::uint64_t>(folded == '}') << i;
    }
#endif
    std::uint64_t escaped = 0;
    if (backslash != 0 || escape_next_) {
      std::uint64_t b = backslash;
      if (escape_next_) {
        escaped |= 1;
        b &= ~std::uint64_t{1};
      }
      escape_next_ = false;
      while (b != 0) {
        const int i = std::countr_zero(b);
        if (i == 63) {
          escape_next_ = true;
          break;
        }
        escaped |= std::uint64_t{2} << i;
        b &= ~(std::uint64_t{3} << i);
      }
    }
    // inside: bit i set when an odd number of delimiting quotes are at or before i, from
    // the block's start, then flipped if the block began inside a string.
    std::uint64_t inside = quote & ~escaped;
    inside ^= inside << 1;
    inside ^= inside << 2;
    inside ^= inside << 4;
    inside ^= inside << 8;
    inside ^= inside << 16;
    inside ^= inside << 32;
    inside ^= in_string_;
    in_string_ = static_cast<std::uint64_t>(static_cast<std::int64_t>(inside) >> 63);
    open = opens & ~inside;
    close = closes & ~inside;
  }
  void reset() {
    in_string_ = 0;
    escape_next_ = false;
  }

 private:
  std::uint64_t in_string_ = 0;  // all ones when the next block begins inside a string
  bool escape_next_ = false;     // the next block's first byte is escaped
};

// A run of more than kMaxJsonNumberChars bytes that may be part of a number (strings
// included: a false alarm only sends the file to the reference reader).
bool has_long_number(std::string_view text) {
  std::size_t run = 0;
  for (const char c : text) {
    const bool number = (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' ||
                        c == 'E';
    run = number ? run + 1 : 0;
    if (run > kMaxJsonNumberChars) return true;
  }
  return false;
}

// The text of the values inside one container of validated JSON, found by position
// (member or element index, increasing), scanning forward only and only as far as asked:
// simdjson's DOM keeps numbers as binary, and timestamps are read from their decimal
// text. A container inside is found through its parent when first asked.
class RawText {
 public:
  explicit RawText(const char* open) { start(open); }
  RawText(RawText& parent, std::size_t index) : parent_(&parent), index_(index) {}

  // The text of member (element) `index`'s value.
  std::string_view value(std::size_t index) {
    const char* begin = value_start(index);
    p_ = skip_value(begin);
    pending_ = false;
    return {begin, static_cast<std::size_t>(p_ - begin)};
  }

 private:
  void start(const char* open) {
    object_ = *open == '{';
    p_ = open + 1;
  }
  const char* value_start(std::size_t index) {
    if (p_ == nullptr) start(parent_->value_start(index_));
    if (index < next_) throw GiveUp{};  // not reached: the walk goes forward
    for (;;) {
      if (pending_) p_ = skip_value(p_);
      p_ = skip_space(p_);
      if (*p_ == ',') p_ = skip_space(p_ + 1);
      if (object_) p_ = skip_space(skip_space(skip_string(p_)) + 1);  // "key" :
      pending_ = true;
      if (next_++ == index) return p_;
    }
  }
  static const char* skip_space(const char* p) {
    while (is_space(*p)) ++p;
    return p;
  }
  static const char* skip_string(const char* p) {  // p at the opening quote
    for (++p;; ++p) {
      if (*p == '\\') {
        ++p;
      } else if (*p == '"') {
        return p + 1;
      }
    }
  }
  static const char* skip_value(const char* p) {
    if (*p == '"') return skip_string(p);
    if (*p == '{' || *p == '[') {
      std::size_t depth = 0;
      for (;;) {
        const char c = *p;
        if (c == '"') {
          p = skip_string(p);
          continue;
        }
        if (c == '{' || c == '[') ++depth;
        if ((c == '}' || c == ']') && --depth == 0) return p + 1;
        ++p;
      }
    }
    while (!is_space(*p) && *p != ',' && *p != '}' && *p != ']') ++p;
    return p;
  }

  RawText* parent_ = nullptr;
  std::size_t index_ = 0;
  const char* p_ = nullptr;  // before member next_, or at its value when pending_
  std::size_t next_ = 0;
  bool object_ = false;
  bool pending_ = false;
};

class FastReader {
 public:
  FastReader(TraceBytes& bytes, std::string_view source, NameTable& names, RawTrace& out)
      : bytes_(bytes),
        semantics_(source, names, out, [] { return std::string(" at byte ?"); }) {
    window_.resize(kWindowBytes + simdjson::SIMDJSON_PADDING);
    batch_.resize(kWindowBytes + 2 + simdjson::SIMDJSON_PADDING);
  }

  void read() {
    char c = next_token();
    if (c == '[') {
      semantics_.start_array();
      events(1);
      semantics_.end_array();
    } else if (c == '{') {
      semantics_.start_object();
      members();
      semantics_.end_object();
    } else {
      throw GiveUp{};  // empty, a scalar document, not JSON: the reference says which
    }
    skip_space();
    if (!at_end()) throw GiveUp{};
    if (!semantics_.saw_events()) throw GiveUp{};
  }

 private:
  // --- the window ---

  // Makes at least one byte available at pos_; false at the end of the input. Moves the
  // window's content so that keep_ is at 0 (pos_ and the marks move with it).
  bool more() {
    if (pos_ < end_) return true;
    refill();
    return pos_ < end_;
  }
  void refill() {
    if (eof_) return;
    if (keep_ > 0) {
      std::memmove(window_.data(), window_.data() + keep_, end_ - keep_);
      end_ -= keep_;
      pos_ -= keep_;
      batch_start_ -= std::min(batch_start_, keep_);
      last_end_ -= std::min(last_end_, keep_);
      event_start_ -= std::min(event_start_, keep_);
      for (std::size_t& start : event_starts_) start -= keep_;
      keep_ = 0;
    }
    // What must be kept fills the window: more than any bound here allows.
    if (end_ == kWindowBytes) throw GiveUp{};
    while (end_ < kWindowBytes && !eof_) {
      const std::streamsize n = bytes_.sgetn(window_.data() + end_,
                                             static_cast<std::streamsize>(kWindowBytes - end_));
      if (n <= 0) {
        eof_ = true;
      } else {
        end_ += static_cast<std::size_t>(n);
      }
    }
  }
  bool at_end() { return !more(); }
  void skip_space() {
    for (;; ++pos_) {
      keep_ = pos_;  // whitespace is not kept, however long the run
      if (!more() || !is_space(window_[pos_])) return;
    }
  }
  // The next byte that is not whitespace, consumed; GiveUp at the end of the input.
  char next_token() {
    skip_space();
    if (!more()) throw GiveUp{};
    return window_[pos_++];
  }

  // --- the top level ---

  void members() {
    char c = next_token();
    if (c == '}') return;
    for (;;) {
      if (c != '"') throw GiveUp{};
      keep_ = pos_ - 1;  // the key and its value are kept together from here
      // Keys with escapes are rare: the reference reader decodes them.
      while (more() && window_[pos_] != '"') {
        if (window_[pos_] == '\\' || pos_ - keep_ > kMaxFastEventBytes) throw GiveUp{};
        ++pos_;
      }
      if (!more()) throw GiveUp{};
      ++pos_;
      const std::size_t key_bytes = pos_ - keep_;
      skip_space_keeping();
      if (!more() || window_[pos_] != ':') throw GiveUp{};
      ++pos_;
      skip_space_keeping();
      if (!more()) throw GiveUp{};
      const std::size_t key_at = keep_;  // may have moved with the window
      if (std::string_view(window_.data() + key_at, key_bytes) == "\"traceEvents\""sv) {
        if (window_[pos_] != '[') throw GiveUp{};  // the reference says what it is instead
        ++pos_;
        semantics_.key("traceEvents");
        semantics_.start_array();
        events(2);
        semantics_.end_array();
      } else {
        member();
      }
      c = next_token();
      if (c == '}') return;
      if (c != ',') throw GiveUp{};
      c = next_token();
    }
  }

  void skip_space_keeping() {
    while (more() && is_space(window_[pos_])) ++pos_;
  }

  // A top-level member other than traceEvents: keep_ is its key's opening quote, pos_ its
  // value's first byte. Parsed as {"key": value}, validated whole.
  void member() {
    const char first = window_[pos_];
    if (first == '{' || first == '[') {
      strings_.reset();
      depth_ = semantics_.depth();
      scan_value();
    } else if (first == '"') {
      ++pos_;
      bool escape = false;
      for (;; ++pos_) {
        if (!more() || pos_ - keep_ > kMaxFastEventBytes) throw GiveUp{};
        const char c = window_[pos_];
        if (escape) {
          escape = false;
        } else if (c == '\\') {
          escape = true;
        } else if (c == '"') {
          break;
        }
      }
      ++pos_;
    } else {
      while (more() && !is_space(window_[pos_]) && window_[pos_] != ',' && window_[pos_] != '}') {
        if (pos_ - keep_ > kMaxFastEventBytes) throw GiveUp{};
        ++pos_;
      }
    }
    // window_[keep_, pos_): "key" ws : ws value
    const std::string_view text(window_.data() + keep_, pos_ - keep_);
    if (text.size() > kLongNumberPossible && has_long_number(text)) throw GiveUp{};
    std::size_t n = 0;
    batch_[n++] = '{';
    std::memcpy(batch_.data() + n, text.data(), text.size());
    n += text.size();
    batch_[n++] = '}';
    // The wrapper is not the document's: its one member is walked as the top level's.
    RawText raw(batch_.data());
    walk_members(parse(n), raw);
    keep_ = pos_;
  }

  // Scans a container from its opening bracket at pos_ to its end (pos_ just past it),
  // bounding its size and nesting.
  void scan_value() {
    const std::size_t base = depth_;
    for (;;) {
      std::uint64_t open = 0, close = 0;
      const char* block = next_block();
      strings_.brackets(block, open, close);
      std::uint64_t bits = open | close;
      while (bits != 0) {
        const int i = std::countr_zero(bits);
        bits &= bits - 1;
        if ((open >> i) & 1) {
          if (++depth_ > static_cast<std::size_t>(kMaxJsonDepth)) throw GiveUp{};
        } else if (--depth_ == base) {
          pos_ += static_cast<std::size_t>(i) + 1;
          return;
        }
      }
      pos_ += kBlock;
      if (pos_ - keep_ > kMaxFastEventBytes) throw GiveUp{};
    }
  }

  // The 64 bytes at pos_: in the window, or at the end of the input, the rest padded with
  // spaces (whose masks are then final). GiveUp when nothing is left.
  const char* next_block() {
    if (pos_ + kBlock > end_) refill();
    if (pos_ + kBlock <= end_) return window_.data() + pos_;
    if (pos_ >= end_) throw GiveUp{};  // truncated
    std::memset(tail_, ' ', sizeof tail_);
    std::memcpy(tail_, window_.data() + pos_, end_ - pos_);
    return tail_;
  }

  // --- traceEvents ---

  // The traceEvents array, from just past its '[' (depth `array_depth` counts it) to just
  // past its ']'.
  void events(std::size_t array_depth) {
    strings_.reset();
    depth_ = array_depth;
    event_starts_.clear();
    batch_start_ = pos_;
    keep_ = pos_;
    last_end_ = 0;
    first_batch_ = true;
    bool have_end = false;  // an event ended since batch_start_
    for (;;) {
      if (pos_ + kBlock > end_ && !eof_) {
        // Before the window moves: the complete events so far go to the parser, and
        // what is left (the event being read) must be short.
        if (have_end) {
          parse_events(batch_start_, last_end_);
          batch_start_ = last_end_;
          have_end = false;
        }
        if (pos_ - batch_start_ > kMaxFastEventBytes) {
          // An event this long goes through the slow lane; anything else is not a trace.
          if (depth_ == array_depth) throw GiveUp{};
          slow_event(array_depth);
          have_end = false;
          continue;
        }
        keep_ = batch_start_;
        refill();
        continue;
      }
      std::uint64_t open = 0, close = 0;
      const char* block = next_block();
      strings_.brackets(block, open, close);
      std::uint64_t bits = open | close;
      bool slow = false;
      while (bits != 0) {
        const int i = std::countr_zero(bits);
        bits &= bits - 1;
        const std::size_t at = pos_ + static_cast<std::size_t>(i);
        if ((open >> i) & 1) {
          if (++depth_ > static_cast<std::size_t>(kMaxJsonDepth)) throw GiveUp{};
          if (depth_ == array_depth + 1) {
            event_start_ = at;
            event_starts_.push_back(at);
          }
          continue;
        }
        if (--depth_ == array_depth) {
          const std::size_t size = at + 1 - event_start_;
          if (size > kMaxFastEventBytes ||
              (size > kLongNumberPossible &&
               has_long_number(std::string_view(window_.data() + event_start_, size)))) {
            if (have_end) {
              parse_events(batch_start_, last_end_);
              batch_start_ = last_end_;
              have_end = false;
            }
            slow_event(array_depth);
            slow = true;
            break;
          }
          last_end_ = at + 1;
          have_end = true;
          if (last_end_ - batch_start_ >= kBatchBytes) {
            parse_events(batch_start_, last_end_);
            batch_start_ = last_end_;
            have_end = false;
          }
        } else if (depth_ < array_depth) {
          // The array's ']': what is left since the last batch is the final one.
          parse_events(batch_start_, at);
          pos_ = at + 1;
          keep_ = pos_;
          return;
        }
      }
      if (!slow) pos_ += kBlock;
    }
  }

  // The slow lane: the event that begins at event_start_ (all events before it parsed,
  // batch_start_ just past the last of them) is longer than kMaxFastEventBytes, or may
  // hold a number longer than the reference reader's bound. It is read by the reference
  // reader's tokenizer (BoundedJson, nlohmann's SAX parser) streamed from the window, so
  // its size does not matter; the fast lane goes on after it.
  void slow_event(std::size_t array_depth) {
    // What separates it from the events before: whitespace, and a comma unless it is
    // the first.
    std::size_t i = batch_start_;
    while (i < event_start_ && is_space(window_[i])) ++i;
    if (!first_batch_) {
      if (i == event_start_ || window_[i] != ',') throw GiveUp{};
      ++i;
      while (i < event_start_ && is_space(window_[i])) ++i;
    }
    if (i != event_start_) throw GiveUp{};
    first_batch_ = false;
    event_starts_.clear();
    pos_ = event_start_;
    keep_ = pos_;
    EventStream stream(*this);
    read_value_with_reference(stream, semantics_);
    if (!stream.done()) throw GiveUp{};
    // Back to the fast lane, just past the event.
    strings_.reset();
    depth_ = array_depth;
    batch_start_ = last_end_ = keep_ = pos_;
  }

  // The bytes of one JSON value from the window, starting at pos_ and ending just past
  // its closing bracket (pos_ then there), refilling the window as they are consumed.
  class EventStream : public std::streambuf {
   public:
    explicit EventStream(FastReader& reader) : reader_(reader) {}
    bool done() const { return done_; }

   protected:
    int_type underflow() override {
      if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
      FastReader& r = reader_;
      if (done_) return traits_type::eof();
      if (r.pos_ >= r.end_) {
        r.keep_ = r.pos_;  // what was served is the parser's now
        r.refill();
        if (r.pos_ >= r.end_) return traits_type::eof();  // truncated: the parser says so
      }
      char* const begin = r.window_.data() + r.pos_;
      std::size_t i = r.pos_;
      for (; i < r.end_; ++i) {
        const char c = r.window_[i];
        if (in_string_) {
          if (escape_) {
            escape_ = false;
          } else if (c == '\\') {
            escape_ = true;
          } else if (c == '"') {
            in_string_ = false;
          }
        } else if (c == '"') {
          in_string_ = true;
        } else if (c == '{' || c == '[') {
          ++depth_;
        } else if ((c == '}' || c == ']') && --depth_ == 0) {
          ++i;
          done_ = true;
          break;
        }
      }
      setg(begin, begin, r.window_.data() + i);
      r.pos_ = i;
      return traits_type::to_int_type(*begin);
    }

   private:
    FastReader& reader_;
    std::size_t depth_ = 0;
    bool in_string_ = false, escape_ = false, done_ = false;
  };

  // Parses window_[from, to) as the next events of the array: the first batch starts
  // just past '[', later ones just past the previous event (so with a comma).
  void parse_events(std::size_t from, std::size_t to) {
    std::size_t i = from;
    while (i < to && is_space(window_[i])) ++i;
    if (!first_batch_) {
      if (i == to || window_[i] != ',') {
        if (i == to) return;  // nothing after the last event: the array ends
        throw GiveUp{};
      }
      ++i;
      while (i < to && is_space(window_[i])) ++i;
      if (i == to) throw GiveUp{};  // a comma before ']'
    } else if (i == to) {
      return;  // an empty array
    }
    first_batch_ = false;
    const std::string_view text(window_.data() + i, to - i);
    std::size_t n = 0;
    batch_[n++] = '[';
    std::memcpy(batch_.data() + n, text.data(), text.size());
    n += text.size();
    batch_[n++] = ']';
    const simdjson::dom::element root = parse(n);
    // The events' texts, by the framer's record of where each began: event k is the
    // array's element k, unless some element is no object (then the semantics refuse).
    std::size_t events = 0;
    while (events < event_starts_.size() && event_starts_[events] < to) ++events;
    std::size_t k = 0;
    const simdjson::dom::array array = root.get_array().value_unsafe();
    for (const simdjson::dom::element event : array) {
      if (k == events) throw GiveUp{};
      RawText raw(batch_.data() + (event_starts_[k++] - i + 1));
      walk_root(event, raw);
    }
    if (k != events) throw GiveUp{};
    event_starts_.erase(event_starts_.begin(), event_starts_.begin() + static_cast<std::ptrdiff_t>(events));
  }

  // simdjson's DOM parser checks that batch_[0, n) is JSON, all of it (grammar, numbers,
  // escapes, UTF-8), and gives its tree.
  simdjson::dom::element parse(std::size_t n) {
    simdjson::dom::element root;
    if (dom_.parse(reinterpret_cast<const std::uint8_t*>(batch_.data()), n, false).get(root) !=
        simdjson::SUCCESS) {
      throw GiveUp{};
    }
    return root;
  }

  // The tree as SAX-like calls to the semantics; what they ignore is skipped unseen.
  // `raw` is the text of the container being walked (for numbers' decimal text).
  void walk_root(simdjson::dom::element v, RawText& raw) {
    switch (v.type()) {
      case simdjson::dom::element_type::OBJECT:
        semantics_.start_object();
        if (!semantics_.skipping()) walk_members(v, raw);
        semantics_.end_object();
        return;
      case simdjson::dom::element_type::ARRAY:
        semantics_.start_array();
        if (!semantics_.skipping()) walk_members(v, raw);
        semantics_.end_array();
        return;
      default:
        semantics_.scalar({});  // an event that is no object: the semantics refuse it
        throw GiveUp{};
    }
  }
  void walk_members(simdjson::dom::element v, RawText& raw) {
    std::size_t index = 0;
    if (v.type() == simdjson::dom::element_type::OBJECT) {
      const simdjson::dom::object object = v.get_object().value_unsafe();
      for (const simdjson::dom::key_value_pair member : object) {
        if (semantics_.key(member.key)) walk_value(member.value, raw, index);
        ++index;
      }
    } else {
      const simdjson::dom::array array = v.get_array().value_unsafe();
      for (const simdjson::dom::element element : array) {
        walk_value(element, raw, index++);
      }
    }
  }
  void walk_value(simdjson::dom::element v, RawText& parent, std::size_t index) {
    switch (v.type()) {
      case simdjson::dom::element_type::OBJECT:
      case simdjson::dom::element_type::ARRAY: {
        const bool object = v.type() == simdjson::dom::element_type::OBJECT;
        object ? semantics_.start_object() : semantics_.start_array();
        if (!semantics_.skipping()) {
          RawText raw(parent, index);
          walk_members(v, raw);
        }
        object ? semantics_.end_object() : semantics_.end_array();
        return;
      }
      case simdjson::dom::element_type::INT64: {
        const std::int64_t i = v.get_int64().value_unsafe();
        semantics_.scalar({.type = JsonScalar::kInt, .i = i, .d = static_cast<double>(i)});
        return;
      }
      case simdjson::dom::element_type::UINT64:  // beyond int64 (simdjson's INT64 otherwise)
        semantics_.scalar({.type = JsonScalar::kFloat,
                           .d = static_cast<double>(v.get_uint64().value_unsafe()),
                           .text = "1e99"});
        return;
      case simdjson::dom::element_type::DOUBLE:
        semantics_.scalar({.type = JsonScalar::kFloat,
                           .d = v.get_double().value_unsafe(),
                           .text = parent.value(index)});
        return;
      case simdjson::dom::element_type::STRING:
        semantics_.scalar({.type = JsonScalar::kString, .text = v.get_string().value_unsafe()});
        return;
      default:  // true, false, null
        semantics_.scalar({});
        return;
    }
  }

  TraceBytes& bytes_;
  TraceSemantics semantics_;
  simdjson::dom::parser dom_;
  std::vector<std::size_t> event_starts_;  // window offsets of the events since batch_start_
  std::vector<char> window_, batch_;
  std::size_t pos_ = 0, end_ = 0;
  std::size_t keep_ = 0;         // the window keeps [keep_, end_) when it moves
  std::size_t batch_start_ = 0;  // traceEvents: where the next batch starts
  std::size_t last_end_ = 0;     // just past the last complete event
  std::size_t event_start_ = 0;  // the current event's '{'
  std::size_t depth_ = 0;        // open containers, the document's included
  bool first_batch_ = true;
  bool eof_ = false;
  StringMask strings_;
  char tail_[kBlock];
};

}  // namespace

bool read_raw_trace_fast(TraceBytes& bytes, std::string_view source, NameTable& names,
                         RawTrace& out) {
  try {
    FastReader reader(bytes, source, names, out);
    reader.read();
    out.bytes_read = bytes.position();
    return true;
  } catch (const GiveUp&) {
    return false;
  } catch (const UsageError&) {
    return false;  // the reference reader says it, with the offset
  }
}

}  // namespace tandem
