// The bytes of one trace file as a std::streambuf, for the trace readers (trace_reader.h).
//
// Plain and gzip files read the same way: zlib's gzread passes non-gzip files through
// unchanged, so callers never look at the extension. The buffer counts the bytes it has
// handed out, so errors can say where in the file (the decompressed stream for .gz)
// they happened. The in-memory form serves tests and the fuzz target.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

class TraceBytes : public std::streambuf {
 public:
  // Opens `path`; throws UsageError("cannot read <path>: <reason>").
  explicit TraceBytes(const std::string& path);
  // Views `data`, which must outlive this object.
  explicit TraceBytes(std::string_view data);
  ~TraceBytes() override;
  TraceBytes(const TraceBytes&) = delete;
  TraceBytes& operator=(const TraceBytes&) = delete;

  // Bytes handed to the reader so far.
  std::uint64_t position() const {
    return consumed_before_ + static_cast<std::uint64_t>(gptr() - eback());
  }
  // True when the file is gzip-compressed (positions are then in the decompressed data).
  bool compressed() const { return compressed_; }
  // Back to the first byte, for a second reading (the fast reader hands a file it cannot
  // take to the reference reader; trace_reader.h). Throws UsageError like a read.
  void rewind();

 protected:
  int_type underflow() override;

 private:
  std::string path_;
  gzFile file_ = nullptr;  // null for the in-memory form
  bool compressed_ = false;
  std::vector<char> buffer_;
  char* data_begin_ = nullptr;  // the in-memory form's bytes
  char* data_end_ = nullptr;
  std::uint64_t consumed_before_ = 0;  // bytes of the buffers before the current one
};

}  // namespace tandem
