// PowerSGD gradient compression for one bucket of the flat gradient, the math only
// (Vogels et al. 2019, "PowerSGD: Practical Low-Rank Gradient Compression for Distributed
// Optimization"; the same steps as PyTorch's powerSGD_hook). The Reducer owns the
// communication: it calls the three phases around two SUM all-reduces of its own.
//
// Per step, for every parameter that goes low-rank (a matrix M, rows x cols, of rank R):
//   compute_p   M := grad + error (error feedback), P := M Q      (rows x R)
//   <caller>    SUM all-reduce of the P buffer
//   compute_q   P := orthogonalize(P), Q := M^T P                 (cols x R)
//   <caller>    SUM all-reduce of the Q buffer
//   decompress  Q /= world size, grad := P Q^T, error := M - grad; Q is the next step's
//               warm start
// Everything else in the bucket's range (biases, 1-D and small tensors, padding) travels
// uncompressed inside the P buffer, divided by the world size before the all-reduce so
// that the one SUM gives the average. Given all-reduces whose results are the same on
// every rank, every rank ends with the same gradient bits: everything after an all-reduce
// is computed from all-reduced values only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tandem {

// One parameter of the bucket: where its gradient lies and its shape.
struct PowerSgdParam {
  std::size_t offset = 0;  // into the flat gradient
  std::size_t numel = 0;
  std::vector<int> shape;  // row-major; a tensor of 2 dims or more is a [shape[0], rest] matrix
};

// Whether a parameter of `shape` and `numel` elements goes low-rank at rank `rank`: it is a
// matrix (2 dims or more) and its factors, rank * (rows + cols) values, are fewer than
// its rows * cols.
bool powersgd_compresses(const std::vector<int>& shape, std::size_t numel, int rank);

// What a bucket's compression costs, without its state (the simulator prices buckets of
// models too large to hold): the two wire buffers, the products' FLOPs and the bytes the
// elementwise work streams. `numel`: the bucket's range; params inside it.
struct PowerSgdSize {
  std::size_t p_numel = 0;
  std::size_t q_numel = 0;
  double flops = 0;
  double bytes = 0;
  std::size_t state_numel = 0;  // kept between steps: M and error per compressed element, Q
};
PowerSgdSize powersgd_size(const std::vector<PowerSgdParam>& params, std::size_t numel, int rank);

class PowerSgdBucket {
 public:
  // `params`: the bucket's parameters, each wholly inside [begin, end) of the flat
  // gradient, none overlapping another (any order). `rank` >= 1 (UsageError otherwise).
  // `seed` fills the first step's Q with standard-normal values; it must be the same on
  // every rank (and differ between buckets, where their Q should not be alike).
  PowerSgdBucket(std::vector<PowerSgdParam> params, std::size_t begin, std::size_t end, int rank,
                 std::uint64_t seed);

  // The wire buffers the caller allocates and all-reduces. P buffer: every compressed
  // parameter's P (rows x R, row-major) in ascending offset, then every other element of
  // the range in ascending offset. Q buffer: every compressed parameter's Q (cols x R).
  std::size_t p_numel() const { return p_numel_; }
  std::size_t q_numel() const { return q_numel_; }
  // What one step sends through the two all-reduces: (p_numel + q_numel) * 4.
  std::int64_t wire_bytes() const;
  // How many parameters go low-rank.
  std::size_t compressed_params() const { return matrices_.size(); }
  // Memory the compression keeps between calls: error and M per compressed element, and
  // the Q warm start.
  std::int64_t state_bytes() const;

  // Phase 1. `bucket_grads`: this rank's gradients of [begin, end); `p_buffer`: p_numel
  // floats, overwritten.
  void compute_p(std::span<const float> bucket_grads, std::span<float> p_buffer, int world_size);
  // Phase 2, after the P all-reduce: orthogonalizes each P in `p_buffer` in place (the
  // decompression uses it) and writes q_numel floats to `q_buffer`. Nothing to do, and
  // nothing to all-reduce, when no parameter is compressed.
  void compute_q(std::span<float> p_buffer, std::span<float> q_buffer);
  // Phase 3, after the Q all-reduce: divides `q_buffer` by the world size in place and
  // overwrites every element of `bucket_grads` with its averaged (compressed or exact)
  // value.
  void decompress(std::span<const float> p_buffer, std::span<float> q_buffer,
                  std::span<float> bucket_grads, int world_size);

 private:
  // One compressed parameter, its offsets relative to the bucket's begin.
  struct Matrix {
    std::size_t offset = 0;  // into the bucket's range
    int rows = 0;
    int cols = 0;
    std::size_t p_offset = 0;      // into the P buffer
    std::size_t q_offset = 0;      // into the Q buffer and warm_q_
    std::size_t state_offset = 0;  // into m_ and error_
  };
  // A run of uncompressed elements: [begin, end) of the bucket's range.
  struct Segment {
    std::size_t begin = 0;
    std::size_t end = 0;
  };

  std::size_t numel_ = 0;  // end - begin
  int rank_ = 1;
  std::vector<Matrix> matrices_;
  std::vector<Segment> uncompressed_;
  std::size_t uncompressed_p_offset_ = 0;  // where the uncompressed elements start in P
  std::size_t p_numel_ = 0;
  std::size_t q_numel_ = 0;
  std::vector<float> m_;       // this step's grad + error, per compressed element
  std::vector<float> error_;   // what the last approximation missed, per compressed element
  std::vector<float> warm_q_;  // the last step's averaged Q, the next step's start
};

}  // namespace tandem
