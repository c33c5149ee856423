// TokenData (token_data.h).
#include "model/token_data.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

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
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("--data " + path + ": cannot read (" + std::strerror(errno) + ")");
  const std::int64_t window = static_cast<std::int64_t>(seq) + 1;
  const std::int64_t held_out = std::max(size / kHeldOutDivisor, window);
  const std::int64_t shard = (size - held_out) / ranks;
  TokenData d;
  d.vocab_ = 256;
  d.seq_ = seq;
  d.rows_ = rows;
  d.stream_ = detail::mix64(detail::mix64(seed ^ 0x6279746573ULL) + static_cast<std::uint64_t>(rank));
  d.shard_begin_ = shard * rank;
  auto read = [&](std::int64_t offset, std::int64_t count, std::vector<std::uint8_t>& out) {
    out.resize(static_cast<std::size_t>(count));
    in.seekg(offset);
    errno = 0;
    if (!in.read(reinterpret_cast<char*>(out.data()), count)) {
      // A short read is no errno: the file shrank while it was read, or (sysfs, procfs)
      // its size was never what it holds.
      if (errno != 0 && !in.eof()) {
        throw UsageError("--data " + path + ": read failed (" + std::strerror(errno) + ")");
      }
      throw UsageError("--data " + path + ": could not be read whole: " +
                       std::to_string(in.gcount()) + " of " + std::to_string(count) +
                       " bytes at offset " + std::to_string(offset) + " (its size is " +
                       std::to_string(size) +
                       "; the file changed while it was read, or is not a file of data)");
    }
  };
  read(d.shard_begin_, shard, d.shard_);
  read(size - held_out, held_out, d.held_out_);
  const std::int64_t windows = (held_out - 1) / seq;  // non-overlapping starts
  d.validation_batches_ =
      static_cast<int>(std::clamp<std::int64_t>(windows / rows, 1, kMaxValidationBatches));
  return d;
}

void TokenData::batch(std::int64_t index, std::span<std::int32_t> out) const {
  const std::size_t window = static_cast<std::size_t>(seq_) + 1;
  TANDEM_CHECK(out.size() >= window * static_cast<std::size_t>(rows_));
  detail::SplitMix64 rng(batch_seed(stream_, index));
  for (int r = 0; r < rows_; ++r) {
    std::int32_t* row = out.data() + static_cast<std::size_t>(r) * window;
    if (successors_.empty()) {
      const std::uint64_t starts = shard_.size() - window + 1;
      const std::uint8_t* src = shard_.data() + rng.next() % starts;
      for (std::size_t t = 0; t < window; ++t) row[t] = src[t];
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
  const std::size_t windows = (held_out_.size() - 1) / static_cast<std::size_t>(seq_);
  for (int r = 0; r < rows_; ++r) {
    const std::size_t w = (static_cast<std::size_t>(index) * rows_ + r) % windows;
    const std::uint8_t* src = held_out_.data() + w * seq_;
    std::int32_t* row = out.data() + static_cast<std::size_t>(r) * window;
    for (std::size_t t = 0; t < window; ++t) row[t] = src[t];
  }
}

}  // namespace tandem
