#include "trace_import/bounded_json.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/error.h"

namespace tandem {
namespace {

constexpr std::size_t kChunkBytes = 1 << 20;

bool is_hex(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

unsigned hex_value(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return 0;  // not a digit: the parser reports the escape
}

}  // namespace

BoundedJson::BoundedJson(std::streambuf& raw, std::string source, bool compressed)
    : raw_(raw), source_(std::move(source)), compressed_(compressed) {
  in_.resize(kChunkBytes);
  out_.resize(kChunkBytes);
  setg(out_.data(), out_.data(), out_.data());
}

std::uint64_t BoundedJson::original_offset(std::uint64_t passed) const {
  for (auto it = cuts_.rbegin(); it != cuts_.rend(); ++it) {
    if (it->passed_at <= passed) return passed + it->dropped;
  }
  return passed + base_dropped_;
}

bool BoundedJson::was_cut(std::uint64_t ordinal) {
  while (!cut_ordinals_.empty() && cut_ordinals_.front() < ordinal) cut_ordinals_.pop_front();
  if (cut_ordinals_.empty() || cut_ordinals_.front() != ordinal) return false;
  cut_ordinals_.pop_front();
  return true;
}

BoundedJson::int_type BoundedJson::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  passed_before_ += static_cast<std::uint64_t>(egptr() - eback());
  // The parser asks about offsets in the buffer it reads (or the byte before it): a cut
  // superseded by a later one before that is no longer needed.
  while (cuts_.size() >= 2 && cuts_[1].passed_at + 1 <= passed_before_) {
    base_dropped_ = cuts_.front().dropped;
    cuts_.pop_front();
  }
  for (;;) {
    const std::streamsize n = raw_.sgetn(in_.data(), static_cast<std::streamsize>(in_.size()));
    if (n <= 0) {
      setg(out_.data(), out_.data(), out_.data());
      return traits_type::eof();
    }
    out_size_ = 0;
    filter(in_.data(), static_cast<std::size_t>(n));
    if (out_size_ > 0) {
      setg(out_.data(), out_.data(), out_.data() + out_size_);
      return traits_type::to_int_type(*gptr());
    }
  }
}

void BoundedJson::fail(std::uint64_t at, const std::string& what) const {
  throw UsageError(source_ + ": " + what + " at byte " + std::to_string(at) + where_suffix());
}

// The hot loops keep their state in locals: `out` is a char*, and the compiler must assume
// a store through it may change any member, so members would be reloaded every byte.
void BoundedJson::filter(const char* in, std::size_t n) {
  char* const out = out_.data();
  std::size_t o = out_size_;
  std::size_t i = 0;
  while (i < n) {
    if (!in_string_) {
      i = between_strings(in, n, i, out, o);
      continue;
    }
    if (dropping_) {
      // The common case in one tight loop: plain ASCII that is neither quote nor escape.
      if (!escape_ && hex_left_ == 0 && utf8_left_ == 0) {
        std::size_t j = i;
        while (j < n) {
          const auto d = static_cast<unsigned char>(in[j]);
          if (d < 0x20 || d >= 0x80 || d == '"' || d == '\\') break;
          ++j;
        }
        cuts_.back().dropped += j - i;
        i = j;
        if (i == n) break;
      }
      const auto d = static_cast<unsigned char>(in[i]);
      if (d == '"' && !escape_ && hex_left_ == 0 && utf8_left_ == 0) {
        in_string_ = dropping_ = false;
        out[o++] = in[i++];
        continue;
      }
      check_dropped(d, read_ + i);
      ++cuts_.back().dropped;
      ++i;
      continue;
    }
    // A string, passed on: the common case in one tight loop, up to the length bound and
    // through the closing quote (most strings are short keys: no calls on this path).
    if (!escape_ && hex_left_ == 0 && string_bytes_ < kMaxJsonStringBytes) {
      const std::size_t last = std::min(n, i + (kMaxJsonStringBytes - string_bytes_));
      std::size_t j = i;
      for (; j < last; ++j) {
        const char d = in[j];
        if (d == '"' || d == '\\') break;
        out[o + (j - i)] = d;
      }
      o += j - i;
      string_bytes_ += j - i;
      if (j > i) after_high_ = false;
      i = j;
      if (i < n && in[i] == '"') {
        out[o++] = '"';
        in_string_ = false;
        ++i;
        continue;
      }
      if (i == n || (in[i] != '\\' && string_bytes_ < kMaxJsonStringBytes)) continue;
    }
    if (string_byte(static_cast<unsigned char>(in[i]), passed_before_ + o, read_ + i)) {
      out[o++] = in[i];
    }
    ++i;
  }
  out_size_ = o;
  read_ += n;
}

// What a byte between strings is, as bits: the loop below reads one table entry per byte
// and takes one predictable branch unless something rare happens.
constexpr std::uint8_t kSpace = 1;   // whitespace
constexpr std::uint8_t kNumber = 2;  // may be part of a number (or a literal's 'e')
constexpr std::uint8_t kReset = 4;   // begins a string or is a number's: the lexer forgets
constexpr std::uint8_t kQuote = 8;

constexpr std::array<std::uint8_t, 256> kByteClass = [] {
  std::array<std::uint8_t, 256> t{};
  for (const char c : {' ', '\t', '\n', '\r'}) t[static_cast<unsigned char>(c)] = kSpace;
  for (const char c : {'.', '+', 'e', 'E'}) t[static_cast<unsigned char>(c)] = kNumber;
  for (const char c : {'0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '-'}) {
    t[static_cast<unsigned char>(c)] = kNumber | kReset;  // outside strings, always a number's
  }
  t['"'] = kReset | kQuote;
  return t;
}();

// Between strings every byte passes, but whitespace past kMaxJsonSpaceRun in a row; the
// length of a number and the bytes since the lexer last forgot (a string or a number
// began) are bounded. Returns where it stopped: just past an opening quote (then in a
// string), or n.
std::size_t BoundedJson::between_strings(const char* in, std::size_t n, std::size_t i, char* out,
                                         std::size_t& o) {
  std::size_t space_run = space_run_, number_chars = number_chars_, bare = bare_bytes_;
  // Fast path: the next quote is near enough that no counter can reach its bound before
  // it (each grows by at most one a byte), and at the quote all drop to zero.
  const std::size_t last =
      i + std::min(n - i, std::min({kMaxJsonSpaceRun - space_run,
                                    kMaxJsonNumberChars - number_chars, kMaxJsonBareBytes - bare}));
  char* const to = out + o;  // `o` is a reference: a store through `out` could change it
  for (std::size_t j = i; j < last; ++j) {
    to[j - i] = in[j];
    if (in[j] == '"') {
      o += j + 1 - i;
      space_run_ = number_chars_ = bare_bytes_ = 0;
      begin_string();
      return j + 1;
    }
  }
  std::size_t passed = o;
  bool quote = false;
  for (; i < n; ++i) {
    const auto c = static_cast<unsigned char>(in[i]);
    const std::uint8_t k = kByteClass[c];
    // Each counter grows while its kind of byte repeats and drops to 0 otherwise.
    space_run = (space_run + 1) & -static_cast<std::size_t>((k & kSpace) != 0);
    number_chars = (number_chars + 1) & -static_cast<std::size_t>((k & kNumber) != 0);
    bare = (bare + 1) & -static_cast<std::size_t>((k & kReset) == 0);
    if (space_run > kMaxJsonSpaceRun) {
      if (space_run == kMaxJsonSpaceRun + 1) begin_cut(passed_before_ + passed);
      ++cuts_.back().dropped;
      --bare;  // dropped: the lexer never sees it
      continue;
    }
    if (number_chars > kMaxJsonNumberChars) fail(read_ + i, "a number longer than 4096 characters");
    if (bare > kMaxJsonBareBytes) {
      fail(read_ + i, "more than 1 MiB of brackets, commas and literals with no string or number");
    }
    out[passed++] = in[i];
    if ((k & kQuote) != 0) {
      quote = true;
      ++i;
      break;
    }
  }
  o = passed;
  space_run_ = space_run;
  number_chars_ = number_chars;
  bare_bytes_ = bare;
  if (quote) begin_string();
  return i;
}

void BoundedJson::begin_string() {
  in_string_ = true;
  escape_ = dropping_ = after_high_ = false;
  hex_left_ = 0;
  string_bytes_ = 0;
  ++strings_;
}

// One byte of a string being passed on, outside the tight loop: escapes, the closing
// quote, and the cut (`passed_at`: where the byte would go, `at`: where it is in the
// input). Returns whether it is passed on.
bool BoundedJson::string_byte(unsigned char c, std::uint64_t passed_at, std::uint64_t at) {
  if (escape_) {
    escape_ = false;
    if (c == 'u') {
      hex_left_ = 4;
      hex_ = 0;
    } else {
      after_high_ = false;
    }
  } else if (hex_left_ > 0) {
    hex_ = hex_ * 16 + hex_value(c);
    if (--hex_left_ == 0) after_high_ = hex_ >= 0xD800 && hex_ <= 0xDBFF;
  } else if (c == '"') {
    in_string_ = false;
  } else if (string_bytes_ >= kMaxJsonStringBytes && (c & 0xC0) != 0x80 &&
             !(after_high_ && c == '\\')) {
    // A character starts here (not a UTF-8 continuation, not the low half of a
    // surrogate pair): cut.
    dropping_ = true;
    utf8_left_ = 0;
    cut_ordinals_.push_back(strings_ - 1);
    begin_cut(passed_at);
    ++cuts_.back().dropped;
    check_dropped(c, at);
    return false;
  } else if (c == '\\') {
    escape_ = true;
  } else {
    after_high_ = false;
  }
  ++string_bytes_;
  return true;
}

void BoundedJson::begin_cut(std::uint64_t passed_at) {
  const std::uint64_t before = cuts_.empty() ? base_dropped_ : cuts_.back().dropped;
  cuts_.push_back({.passed_at = passed_at, .dropped = before});
}

// The dropped rest of a cut string is checked as the parser would have: it is still part
// of the file, and a file that is not JSON is refused whether or not a string was long.
void BoundedJson::check_dropped(unsigned char c, std::uint64_t at) {
  if (escape_) {
    escape_ = false;
    if (c == 'u') {
      hex_left_ = 4;
    } else if (std::strchr("\"\\/bfnrt", c) == nullptr || c == 0) {
      fail(at, "not valid JSON: invalid escape in a string");
    }
    return;
  }
  if (hex_left_ > 0) {
    if (!is_hex(c)) fail(at, "not valid JSON: invalid \\u escape in a string");
    --hex_left_;
    return;
  }
  if (utf8_left_ > 0) {
    if (c < utf8_lo_ || c > utf8_hi_) fail(at, "not valid JSON: invalid UTF-8 in a string");
    utf8_lo_ = 0x80;
    utf8_hi_ = 0xBF;
    --utf8_left_;
    return;
  }
  if (c == '\\') {
    escape_ = true;
    return;
  }
  if (c < 0x20) fail(at, "not valid JSON: control character in a string");
  if (c < 0x80) return;
  // A UTF-8 lead byte (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF).
  if (c >= 0xC2 && c <= 0xDF) {
    utf8_left_ = 1;
  } else if (c == 0xE0) {
    utf8_left_ = 2;
    utf8_lo_ = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    utf8_left_ = 2;
  } else if (c == 0xED) {
    utf8_left_ = 2;
    utf8_hi_ = 0x9F;
  } else if (c == 0xF0) {
    utf8_left_ = 3;
    utf8_lo_ = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    utf8_left_ = 3;
  } else if (c == 0xF4) {
    utf8_left_ = 3;
    utf8_hi_ = 0x8F;
  } else {
    fail(at, "not valid JSON: invalid UTF-8 in a string");
  }
}

}  // namespace tandem
