// JSON text with its sizes bounded, as a std::streambuf between a trace's bytes and the
// parser, so that what the parser holds at once stays small whatever the file says.
//
// nlohmann's lexer collects every string and number whole before the reader sees it, it
// keeps every byte it read since the last string or number for its error messages
// (whitespace, brackets, literals), and the reader keeps one byte per open array or
// object: a trace whose args hold a 2 GiB string took 6.5-8.6 GB to skip. This stream
// passes the text through unchanged except:
//   - a string longer than kMaxJsonStringBytes (as written, escapes included) is cut at
//     the first character boundary past that length; the rest is read, checked (no
//     control characters, valid escapes, valid UTF-8) and dropped. The reader learns
//     which strings were cut by their ordinal (was_cut), so a kept name can say so;
//   - whitespace beyond kMaxJsonSpaceRun in a row is dropped (it means nothing);
//   - a number longer than kMaxJsonNumberChars, or more than kMaxJsonBareBytes of
//     brackets, commas and literals with no string or number among them (`[[],[],...]`),
//     is an error.
// The reader bounds the nesting (kMaxJsonDepth), which costs it a byte a level.
// Errors are UsageError("<source>: <what> at byte <offset>"), the offset in the input (the
// decompressed data for .gz, then with " (decompressed)"), like the reader's own.
// Offsets the parser reports count what it was given; original_offset() adds back what
// was dropped before them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <streambuf>
#include <string>
#include <vector>

namespace tandem {

inline constexpr std::size_t kMaxJsonStringBytes = 64 << 10;  // 64 KiB
inline constexpr std::size_t kMaxJsonNumberChars = 4096;
inline constexpr int kMaxJsonDepth = 1000;
inline constexpr std::size_t kMaxJsonSpaceRun = 1024;
inline constexpr std::size_t kMaxJsonBareBytes = 1 << 20;

class BoundedJson : public std::streambuf {
 public:
  // Reads `raw` (which must outlive this object); `source` and `compressed` are for
  // messages only.
  BoundedJson(std::streambuf& raw, std::string source, bool compressed);

  // Where the parser is (the next byte it reads), as an offset in the input.
  std::uint64_t position() const { return original_offset(passed_before_ + offset_in_buffer()); }
  // An offset in what was passed on -> the offset of that byte in the input.
  std::uint64_t original_offset(std::uint64_t passed) const;
  // True if the string with this ordinal (0 for the document's first string, keys
  // included) was cut. Ask in increasing order: earlier ordinals are forgotten.
  bool was_cut(std::uint64_t ordinal);
  // " (decompressed)" for .gz input, else "".
  const char* where_suffix() const { return compressed_ ? " (decompressed)" : ""; }

 protected:
  int_type underflow() override;

 private:
  // Cuts so far (strings, whitespace), where: from `passed_at` on (the cut string's closing
  // quote, the byte after the whitespace) the input is `dropped` bytes ahead of what was
  // passed on.
  struct Cut {
    std::uint64_t passed_at = 0;
    std::uint64_t dropped = 0;  // in all, up to and including this cut
  };

  std::uint64_t offset_in_buffer() const { return static_cast<std::uint64_t>(gptr() - eback()); }
  // Appends what passes of in[0, n) to out_ (out_size_ bytes); updates the state below.
  void filter(const char* in, std::size_t n);
  std::size_t between_strings(const char* in, std::size_t n, std::size_t i, char* out,
                              std::size_t& o);
  void begin_string();
  bool string_byte(unsigned char c, std::uint64_t passed_at, std::uint64_t at);
  // A byte of a cut string's dropped rest, at input offset `at`.
  void check_dropped(unsigned char c, std::uint64_t at);
  // What follows is dropped; the next byte passed on goes to `passed_at`.
  void begin_cut(std::uint64_t passed_at);
  [[noreturn]] void fail(std::uint64_t at, const std::string& what) const;

  std::streambuf& raw_;
  std::string source_;
  bool compressed_ = false;
  std::vector<char> in_, out_;
  std::size_t out_size_ = 0;
  std::uint64_t passed_before_ = 0;  // bytes passed on in earlier buffers
  std::uint64_t read_ = 0;           // input bytes filtered so far
  std::deque<Cut> cuts_;             // the recent ones; older ones folded into base_dropped_
  std::uint64_t base_dropped_ = 0;
  std::deque<std::uint64_t> cut_ordinals_;

  // Lexical state.
  bool in_string_ = false;
  bool escape_ = false;      // after a backslash
  int hex_left_ = 0;         // \u digits still to come
  unsigned hex_ = 0;         // their value so far
  bool after_high_ = false;  // the last escape was a high surrogate (\uD800-\uDBFF)
  bool dropping_ = false;    // past the cut of this string
  int utf8_left_ = 0;        // continuation bytes still to come (dropping only)
  unsigned char utf8_lo_ = 0x80, utf8_hi_ = 0xBF;  // range of the next one
  std::size_t string_bytes_ = 0;                   // of this string, passed on
  std::size_t number_chars_ = 0;                   // of the number being read
  std::size_t space_run_ = 0;                      // whitespace in a row, outside strings
  std::size_t bare_bytes_ = 0;                     // passed since the last string or number began
  std::uint64_t strings_ = 0;                      // strings begun (the next one's ordinal)
};

}  // namespace tandem
