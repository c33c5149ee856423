#include "trace_import/trace_bytes.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace tandem {
namespace {

// Large reads keep zlib and the kernel out of the profile; 1 MiB is past the knee.
constexpr unsigned kBufferBytes = 1u << 20;

}  // namespace

TraceBytes::TraceBytes(const std::string& path) : path_(path) {
  errno = 0;
  file_ = gzopen(path.c_str(), "rb");
  if (file_ == nullptr) {
    throw UsageError("cannot read " + path + ": " +
                     (errno != 0 ? std::strerror(errno) : "out of memory"));
  }
  gzbuffer(file_, kBufferBytes);
  buffer_.resize(kBufferBytes);
  setg(buffer_.data(), buffer_.data(), buffer_.data());
  // gzdirect is only reliable after the first read, so read the first buffer now.
  try {
    if (underflow() != traits_type::eof()) compressed_ = gzdirect(file_) == 0;
  } catch (...) {
    gzclose(file_);  // the destructor does not run for a throwing constructor
    throw;
  }
}

TraceBytes::TraceBytes(std::string_view data) {
  // std::streambuf wants mutable pointers but the reader never writes through them.
  data_begin_ = const_cast<char*>(data.data());
  data_end_ = data_begin_ + data.size();
  setg(data_begin_, data_begin_, data_end_);
}

void TraceBytes::rewind() {
  if (file_ == nullptr) {
    setg(data_begin_, data_begin_, data_end_);
    return;
  }
  if (gzrewind(file_) != 0) {
    throw UsageError(path_ + ": cannot read it again: " + std::strerror(errno));
  }
  consumed_before_ = 0;
  setg(buffer_.data(), buffer_.data(), buffer_.data());
}

TraceBytes::~TraceBytes() {
  if (file_ != nullptr) gzclose(file_);
}

TraceBytes::int_type TraceBytes::underflow() {
  if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
  if (file_ == nullptr) return traits_type::eof();
  consumed_before_ += static_cast<std::uint64_t>(egptr() - eback());
  const int n = gzread(file_, buffer_.data(), kBufferBytes);
  if (n < 0) {
    int code = 0;
    const char* message = gzerror(file_, &code);
    if (code == Z_ERRNO) message = std::strerror(errno);
    throw UsageError(path_ + ": cannot read at byte " + std::to_string(consumed_before_) + ": " +
                     message);
  }
  setg(buffer_.data(), buffer_.data(), buffer_.data() + n);
  if (n == 0) {
    // A gzip stream cut short reads as a clean end of data; zlib says so in gzerror.
    int code = 0;
    const char* message = gzerror(file_, &code);
    if (code != Z_OK) {
      throw UsageError(path_ + ": corrupt or truncated gzip data at byte " +
                       std::to_string(consumed_before_) + " (decompressed): " + message);
    }
    return traits_type::eof();
  }
  return traits_type::to_int_type(*gptr());
}

}  // namespace tandem
