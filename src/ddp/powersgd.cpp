#include "ddp/powersgd.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <string>

#include "compute/cpu/blas.h"
#include "core/error.h"

namespace tandem {

namespace {

// PyTorch's: a column that all-reduced to zeros (vanishing gradients) divides by this
// instead of by zero.
constexpr double kOrthogonalizeEpsilon = 1e-8;

// Standard-normal values by Box-Muller over mt19937_64, written out because
// std::normal_distribution's algorithm is left to each standard library: ranks of one run
// built by different compilers (MPI across machines) must still start from the same Q.
class NormalGenerator {
 public:
  explicit NormalGenerator(std::uint64_t seed) : engine_(seed) {}

  float next() {
    if (has_spare_) {
      has_spare_ = false;
      return static_cast<float>(spare_);
    }
    // u1 in (0, 1] keeps the logarithm finite; u2 in [0, 1).
    const double u1 = 1.0 - unit_interval();
    const double u2 = unit_interval();
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * std::numbers::pi * u2;
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return static_cast<float>(radius * std::cos(angle));
  }

 private:
  // The top 53 bits of one draw, as a double in [0, 1).
  double unit_interval() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  std::mt19937_64 engine_;
  double spare_ = 0;
  bool has_spare_ = false;
};

// The matrix a parameter is viewed as: rows = shape[0], cols = the rest.
struct MatrixShape {
  std::size_t rows = 0;
  std::size_t cols = 0;
};

MatrixShape matrix_shape(const std::vector<int>& shape, std::size_t numel) {
  if (shape.size() < 2 || shape[0] <= 0) return {};
  const auto rows = static_cast<std::size_t>(shape[0]);
  return {rows, numel / rows};
}

// Modified Gram-Schmidt over the columns of `p` (rows x columns, row-major), in place:
// each column is normalized, then removed from the columns after it. Sums run in double
// so that a nearly rank-deficient P loses less; the result only has to be the same on
// every rank, which it is, since every rank runs it on the same all-reduced P.
void orthogonalize_columns(float* p, int rows, int columns) {
  for (int i = 0; i < columns; ++i) {
    double norm_squared = 0;
    for (int r = 0; r < rows; ++r) {
      const double v = p[r * columns + i];
      norm_squared += v * v;
    }
    const double scale = 1.0 / (std::sqrt(norm_squared) + kOrthogonalizeEpsilon);
    for (int r = 0; r < rows; ++r) {
      p[r * columns + i] = static_cast<float>(p[r * columns + i] * scale);
    }
    for (int j = i + 1; j < columns; ++j) {
      double dot = 0;
      for (int r = 0; r < rows; ++r) {
        dot += static_cast<double>(p[r * columns + i]) * p[r * columns + j];
      }
      for (int r = 0; r < rows; ++r) {
        p[r * columns + j] = static_cast<float>(p[r * columns + j] - dot * p[r * columns + i]);
      }
    }
  }
}

}  // namespace

bool powersgd_compresses(const std::vector<int>& shape, std::size_t numel, int rank) {
  const MatrixShape matrix = matrix_shape(shape, numel);
  if (matrix.rows == 0 || matrix.cols == 0 || rank < 1) return false;
  return static_cast<std::size_t>(rank) * (matrix.rows + matrix.cols) < matrix.rows * matrix.cols;
}

PowerSgdSize powersgd_size(const std::vector<PowerSgdParam>& params, std::size_t numel, int rank) {
  PowerSgdSize size;
  const auto r = static_cast<double>(rank);
  std::size_t compressed = 0;
  for (const PowerSgdParam& param : params) {
    if (!powersgd_compresses(param.shape, param.numel, rank)) continue;
    const MatrixShape shape = matrix_shape(param.shape, param.numel);
    size.p_numel += shape.rows * static_cast<std::size_t>(rank);
    size.q_numel += shape.cols * static_cast<std::size_t>(rank);
    compressed += param.numel;
    const auto rows = static_cast<double>(shape.rows), cols = static_cast<double>(shape.cols);
    // P = M Q, Q = M^T P, M ~ P Q^T, and Gram-Schmidt over P's R columns.
    size.flops += 3 * 2 * rows * cols * r + 4 * rows * r * r;
  }
  size.p_numel += numel - compressed;
  size.state_numel = 2 * compressed + size.q_numel;
  // Per compressed element: M = grad + error (read 2, write 1), the three products read M or
  // write the approximation (3), the error = M - approximation (read 2, write 1); per
  // other element: into the P buffer and back (read and write twice).
  size.bytes = 4.0 * (10.0 * static_cast<double>(compressed) +
                      4.0 * static_cast<double>(numel - compressed));
  return size;
}

PowerSgdBucket::PowerSgdBucket(std::vector<PowerSgdParam> params, std::size_t begin,
                               std::size_t end, int rank, std::uint64_t seed)
    : numel_(end - begin), rank_(rank) {
  if (rank < 1) {
    throw UsageError("PowerSGD rank must be at least 1 (got " + std::to_string(rank) + ")");
  }
  TANDEM_CHECK(begin <= end);
  // Ascending offset: the wire layout and the Q draws then depend only on the layout, not
  // on the order the caller listed the parameters in.
  std::sort(params.begin(), params.end(),
            [](const PowerSgdParam& a, const PowerSgdParam& b) { return a.offset < b.offset; });

  const auto r = static_cast<std::size_t>(rank);
  std::size_t covered = 0;  // the range before this is split into matrices and segments
  std::size_t state_numel = 0;
  for (const PowerSgdParam& param : params) {
    TANDEM_CHECK(param.offset >= begin && param.offset + param.numel <= end);
    const std::size_t offset = param.offset - begin;
    TANDEM_CHECK(offset >= covered);  // parameters do not overlap
    if (!powersgd_compresses(param.shape, param.numel, rank)) continue;
    const MatrixShape shape = matrix_shape(param.shape, param.numel);
    TANDEM_CHECK_EQ(shape.rows * shape.cols, param.numel);
    // sgemm takes int dimensions.
    TANDEM_CHECK(shape.rows <= static_cast<std::size_t>(std::numeric_limits<int>::max()));
    TANDEM_CHECK(shape.cols <= static_cast<std::size_t>(std::numeric_limits<int>::max()));
    if (offset > covered) uncompressed_.push_back({covered, offset});
    matrices_.push_back({.offset = offset,
                         .rows = static_cast<int>(shape.rows),
                         .cols = static_cast<int>(shape.cols),
                         .p_offset = p_numel_,
                         .q_offset = q_numel_,
                         .state_offset = state_numel});
    p_numel_ += shape.rows * r;
    q_numel_ += shape.cols * r;
    state_numel += param.numel;
    covered = offset + param.numel;
  }
  if (covered < numel_) uncompressed_.push_back({covered, numel_});
  uncompressed_p_offset_ = p_numel_;
  for (const Segment& segment : uncompressed_) p_numel_ += segment.end - segment.begin;

  const PowerSgdSize size = powersgd_size(params, numel_, rank);
  TANDEM_CHECK(size.p_numel == p_numel_ && size.q_numel == q_numel_ &&
               size.state_numel == 2 * state_numel + q_numel_);
  m_.assign(state_numel, 0.0f);
  error_.assign(state_numel, 0.0f);
  warm_q_.resize(q_numel_);
  NormalGenerator normal(seed);
  for (float& value : warm_q_) value = normal.next();
}

std::int64_t PowerSgdBucket::wire_bytes() const {
  return static_cast<std::int64_t>((p_numel_ + q_numel_) * sizeof(float));
}

std::int64_t PowerSgdBucket::state_bytes() const {
  return static_cast<std::int64_t>((m_.size() + error_.size() + warm_q_.size()) * sizeof(float));
}

void PowerSgdBucket::compute_p(std::span<const float> bucket_grads, std::span<float> p_buffer,
                               int world_size) {
  TANDEM_CHECK_EQ(bucket_grads.size(), numel_);
  TANDEM_CHECK_EQ(p_buffer.size(), p_numel_);
  TANDEM_CHECK(world_size >= 1);
  for (const Matrix& matrix : matrices_) {
    const std::size_t numel = static_cast<std::size_t>(matrix.rows) * matrix.cols;
    const float* grad = bucket_grads.data() + matrix.offset;
    float* m = m_.data() + matrix.state_offset;
    const float* error = error_.data() + matrix.state_offset;
    for (std::size_t i = 0; i < numel; ++i) m[i] = grad[i] + error[i];
    // P[rows, R] = M[rows, cols] Q[cols, R]
    sgemm(false, false, matrix.rows, rank_, matrix.cols, 1.0f, m, matrix.cols,
          warm_q_.data() + matrix.q_offset, rank_, 0.0f, p_buffer.data() + matrix.p_offset, rank_);
  }
  const auto n = static_cast<float>(world_size);
  float* out = p_buffer.data() + uncompressed_p_offset_;
  for (const Segment& segment : uncompressed_) {
    for (std::size_t i = segment.begin; i < segment.end; ++i) *out++ = bucket_grads[i] / n;
  }
}

void PowerSgdBucket::compute_q(std::span<float> p_buffer, std::span<float> q_buffer) {
  TANDEM_CHECK_EQ(p_buffer.size(), p_numel_);
  TANDEM_CHECK_EQ(q_buffer.size(), q_numel_);
  for (const Matrix& matrix : matrices_) {
    float* p = p_buffer.data() + matrix.p_offset;
    orthogonalize_columns(p, matrix.rows, rank_);
    // Q[cols, R] = M^T[cols, rows] P[rows, R]
    sgemm(true, false, matrix.cols, rank_, matrix.rows, 1.0f, m_.data() + matrix.state_offset,
          matrix.cols, p, rank_, 0.0f, q_buffer.data() + matrix.q_offset, rank_);
  }
}

void PowerSgdBucket::decompress(std::span<const float> p_buffer, std::span<float> q_buffer,
                                std::span<float> bucket_grads, int world_size) {
  TANDEM_CHECK_EQ(p_buffer.size(), p_numel_);
  TANDEM_CHECK_EQ(q_buffer.size(), q_numel_);
  TANDEM_CHECK_EQ(bucket_grads.size(), numel_);
  TANDEM_CHECK(world_size >= 1);
  const auto n = static_cast<float>(world_size);
  for (float& value : q_buffer) value /= n;
  for (const Matrix& matrix : matrices_) {
    float* approximation = bucket_grads.data() + matrix.offset;
    // approximation[rows, cols] = P[rows, R] Q^T[R, cols]
    sgemm(false, true, matrix.rows, matrix.cols, rank_, 1.0f, p_buffer.data() + matrix.p_offset,
          rank_, q_buffer.data() + matrix.q_offset, rank_, 0.0f, approximation, matrix.cols);
    const std::size_t numel = static_cast<std::size_t>(matrix.rows) * matrix.cols;
    const float* m = m_.data() + matrix.state_offset;
    float* error = error_.data() + matrix.state_offset;
    for (std::size_t i = 0; i < numel; ++i) error[i] = m[i] - approximation[i];
  }
  std::copy(q_buffer.begin(), q_buffer.end(), warm_q_.begin());
  const float* averaged = p_buffer.data() + uncompressed_p_offset_;
  for (const Segment& segment : uncompressed_) {
    for (std::size_t i = segment.begin; i < segment.end; ++i) bucket_grads[i] = *averaged++;
  }
}

}  // namespace tandem
