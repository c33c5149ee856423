// TokenData (token_data.h).
#include "model/token_data.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "model/rng.h"

namespace tandem {
namespace {

// The held-out tail: a tenth of the file, and at least one sequence.
constexpr int kHeldOutDivisor = 10;
// Validation batches at most: enough for a stable mean, few enough to stay cheap.
constexpr int kMaxValidationBatches = 8;

std::uint64_t batch_seed(std::uint64_t stream, std::int64_t index) {
  return detail::mix64(stream + detail::mix64(static_cast<std::uint64_t>(index)));
}

}  // namespace

// The --data file, open read-only for as long as a TokenData (or a copy) uses it.
class TokenData::File {
 public:
  explicit File(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      throw UsageError("--data " + path_ + ": cannot read (" + std::strerror(errno) + ")");
    }
  }
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // Bytes [offset, offset + out.size()) into out; returns how many the file gave (fewer
  // at its end), or -1 with errno set.
  std::int64_t read(std::int64_t offset, std::span<std::uint8_t> out) const {
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done,
                                static_cast<off_t>(offset + static_cast<std::int64_t>(done)));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return -1;
      if (n == 0) break;
      done += static_cast<std::size_t>(n);
    }
    return static_cast<std::int64_t>(done);
  }
  // One line saying the file did not hold `count` bytes at `offset` (it said `size`).
  std::string short_read(std::int64_t got, std::int64_t count, std::int64_t offset,
                         std::int64_t size) const {
    if (got < 0) return "--data " + path_ + ": read failed (" + std::strerror(errno) + ")";
    return "--data " + path_ + ": could not be read whole: " + std::to_string(got) + " of " +
           std::to_string(count) + " bytes at offset " + std::to_string(offset) +
           (size >= 0 ? " (its size is " + std::to_string(size) + "; " : " (") +
           "the file changed while it was read, or is not a file of data)";
  }

 private:
  std::string path_;
  int fd_ = -1;
};

TokenData TokenData::synthetic(int vocab, int seq, int rows, std::uint64_t seed, int rank) {
  TANDEM_CHECK(vocab >= 1 && seq >= 1 && rows >= 1 && rank >= 0);
  TokenData d;
  d.vocab_ = vocab;
  d.seq_ = seq;
  d.rows_ = rows;
  d.stream_ = detail::mix64(detail::mix64(seed ^ 0x746f6b656e73ULL) + static_cast<std::uint64_t>(rank));
  detail::SplitMix64 chain(detail::mix64(seed ^ 0x636861696eULL));  // "chain": rank-free
  d.successors_.resize(static_cast<std::size_t>(vocab) * kSuccessors);
  for (std::int32_t& s : d.successors_) s = static_cast<std::int32_t>(chain.next() % static_cast<std::uint64_t>(vocab));
  return d;
}

std::int64_t TokenData::check_file(const std::string& path, int seq, int ranks) {
  TANDEM_CHECK(seq >= 1 && ranks >= 1);
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (ec) throw UsageError("--data " + path + ": cannot read (" + ec.message() + ")");
  if (!std::filesystem::is_regular_file(status)) {
    throw UsageError("--data " + path + ": not a regular file");
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw UsageError("--data " + path + ": cannot read (" + std::strerror(errno) + ")");
  const std::int64_t size = in.tellg();
  const std::int64_t window = static_cast<std::int64_t>(seq) + 1;
  const std::int64_t held_out = std::max(size / kHeldOutDivisor, window);
  if (size <= 0 || (size - held_out) / ranks < window) {
    // The smallest size that leaves every rank one sequence besides the tail.
    const std::int64_t needed = std::max(window * (ranks + 1), (window * ranks * 10 + 8) / 9);
    throw UsageError("--data " + path + ": " + std::to_string(std::max<std::int64_t>(size, 0)) +
                     " bytes is too small for " + std::to_string(ranks) + " rank(s) of seq " +
                     std::to_string(seq) + " plus the held-out tail (needs at least " +
                     std::to_string(needed) + " bytes)");
  }
  return size;
}

TokenData TokenData::from_file(const std::string& path, int seq, int rows, std::uint64_t seed,
                               int rank, int ranks) {
  TANDEM_CHECK(seq >= 1 && rows >= 1 && rank >= 0 && rank < ranks);
  const std::int64_t size = check_file(path, seq, ranks);
  const std::int64_t window = static_cast<std::int64_t>(seq) + 1;
  const std::int64_t held_out = std::max(size / kHeldOutDivisor, window);
  const std::int64_t shard = (size - held_out) / ranks;
  TokenData d;
  d.vocab_ = 256;
  d.seq_ = seq;
  d.rows_ = rows;
  d.stream_ = detail::mix64(detail::mix64(seed ^ 0x6279746573ULL) + static_cast<std::uint64_t>(rank));
  d.file_ = std::make_shared<const File>(path);
  d.shard_begin_ = shard * rank;
  d.shard_size_ = shard;
  d.held_out_begin_ = size - held_out;
  d.held_out_size_ = held_out;
  // The last window of the shard and of the file: a file that does not hold what its size
  // says (sysfs, procfs, one that shrank) is refused now, not in the middle of training.
  std::vector<std::uint8_t> probe(static_cast<std::size_t>(window));
  for (const std::int64_t end : {d.shard_begin_ + shard, size}) {
    const std::int64_t got = d.file_->read(end - window, probe);
    if (got != window) throw UsageError(d.file_->short_read(got, window, end - window, size));
  }
  const std::int64_t windows = (held_out - 1) / seq;  // non-overlapping starts
  d.validation_batches_ =
      static_cast<int>(std::clamp<std::int64_t>(windows / rows, 1, kMaxValidationBatches));
  return d;
}

void TokenData::read_window(std::int64_t offset, std::span<std::int32_t> out) const {
  thread_local std::vector<std::uint8_t> bytes;
  bytes.resize(out.size());
  const std::int64_t got = file_->read(offset, bytes);
  if (got != static_cast<std::int64_t>(out.size())) {
    throw RuntimeError(
        file_->short_read(got, static_cast<std::int64_t>(out.size()), offset, /*size=*/-1));
  }
  for (std::size_t t = 0; t < out.size(); ++t) out[t] = bytes[t];
}

void TokenData::batch(std::int64_t index, std::span<std::int32_t> out) const {
  const std::size_t window = static_cast<std::size_t>(seq_) + 1;
  TANDEM_CHECK(out.size() >= window * static_cast<std::size_t>(rows_));
  detail::SplitMix64 rng(batch_seed(stream_, index));
  for (int r = 0; r < rows_; ++r) {
    std::int32_t* row = out.data() + static_cast<std::size_t>(r) * window;
    if (successors_.empty()) {
      const std::uint64_t starts = static_cast<std::uint64_t>(shard_size_) - window + 1;
      read_window(shard_begin_ + static_cast<std::int64_t>(rng.next() % starts), {row, window});
      continue;
    }
    row[0] = static_cast<std::int32_t>(rng.next() % static_cast<std::uint64_t>(vocab_));
    for (std::size_t t = 1; t < window; ++t) {
      const std::size_t k = rng.next() % kSuccessors;
      row[t] = successors_[static_cast<std::size_t>(row[t - 1]) * kSuccessors + k];
    }
  }
}

void TokenData::validation_batch(int index, std::span<std::int32_t> out) const {
  TANDEM_CHECK(index >= 0 && index < validation_batches_);
  const std::size_t window = static_cast<std::size_t>(seq_) + 1;
  TANDEM_CHECK(out.size() >= window * static_cast<std::size_t>(rows_));
  const std::size_t windows =
      static_cast<std::size_t>(held_out_size_ - 1) / static_cast<std::size_t>(seq_);
  for (int r = 0; r < rows_; ++r) {
    const std::size_t w = (static_cast<std::size_t>(index) * rows_ + r) % windows;
    read_window(held_out_begin_ + static_cast<std::int64_t>(w * seq_),
                {out.data() + static_cast<std::size_t>(r) * window, window});
  }
}

}  // namespace tandem
