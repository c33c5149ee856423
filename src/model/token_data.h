// The token streams transformers train on: deterministic synthetic tokens by default, or
// the bytes of a text file (--data FILE, vocabulary 256).
//
// Synthetic: a fixed random Markov chain over the vocabulary (the same on every rank,
// from the seed): each token has kSuccessors equally likely successors, so a model can
// learn the chain and its loss falls from ln(vocab) towards ln(kSuccessors). Each rank
// draws its own sequences from (seed, rank, micro-batch index).
//
// File: the last tenth of the bytes (at least one sequence) is held out for the
// validation loss; the rest is cut into one contiguous shard per rank, disjoint, and a
// micro-batch draws its sequences at random offsets inside the rank's shard. The file
// stays open and each sequence is read from it when drawn (pread), so a rank's memory does
// not grow with the file (a 100 GB file costs what a 1 MB one does); a file that shrinks
// under a run fails that run's step with one line naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tandem {

class TokenData {
 public:
  static constexpr int kSuccessors = 4;

  // rows sequences of seq + 1 tokens per batch.
  static TokenData synthetic(int vocab, int seq, int rows, std::uint64_t seed, int rank);
  // Throws UsageError naming --data and the file when it is not a readable regular file
  // or is too small for `ranks` shards of one sequence each plus the held-out tail;
  // returns its size in bytes. Reads nothing: the trainer checks before it starts.
  static std::int64_t check_file(const std::string& path, int seq, int ranks);
  // check_file, then this rank's shard and the held-out tail, whose last bytes are read
  // once to check that the file holds what its size says (UsageError otherwise: a sysfs
  // file, one that shrank).
  static TokenData from_file(const std::string& path, int seq, int rows, std::uint64_t seed,
                             int rank, int ranks);

  int vocab() const { return vocab_; }
  // Fills out [rows, seq + 1] with micro-batch `index` (any integer; deterministic).
  // File data: RuntimeError naming --data when the file no longer holds the bytes.
  void batch(std::int64_t index, std::span<std::int32_t> out) const;
  // Held-out batches (file data only; 0 for synthetic data).
  int validation_batches() const { return validation_batches_; }
  void validation_batch(int index, std::span<std::int32_t> out) const;

  // The byte ranges this rank trains and validates on (file data), for tests.
  std::int64_t shard_begin() const { return shard_begin_; }
  std::int64_t shard_end() const { return shard_begin_ + shard_size_; }

 private:
  class File;  // the open --data file, shared by copies
  TokenData() = default;
  // out[t] := the file's byte at offset + t, t < out.size().
  void read_window(std::int64_t offset, std::span<std::int32_t> out) const;

  int vocab_ = 0;
  int seq_ = 0;
  int rows_ = 0;
  std::uint64_t stream_ = 0;  // seeds the batches of this rank
  // Synthetic: successors_[token * kSuccessors + k].
  std::vector<std::int32_t> successors_;
  // File: this rank's shard and the held-out tail, byte ranges of the file.
  std::shared_ptr<const File> file_;
  std::int64_t shard_begin_ = 0;
  std::int64_t shard_size_ = 0;
  std::int64_t held_out_begin_ = 0;
  std::int64_t held_out_size_ = 0;
  int validation_batches_ = 0;
};

}  // namespace tandem
