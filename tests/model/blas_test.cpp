#include "compute/cpu/blas.h"

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "compute/cpu/dispatch.h"
#include "core/error.h"

namespace tandem {
namespace {

// Each library (and bf16 where the CPU runs it) set for one test, then put back.
class GemmSettings {
 public:
  GemmSettings(GemmLibrary library, Precision precision)
      : library_(gemm_library()), precision_(gemm_precision()) {
    set_gemm_library(library);
    set_gemm_precision(precision);
  }
  ~GemmSettings() {
    set_gemm_precision(Precision::kFp32);
    set_gemm_library(library_);
    set_gemm_precision(precision_);
  }

 private:
  GemmLibrary library_;
  Precision precision_;
};

std::vector<std::pair<GemmLibrary, Precision>> runnable_settings() {
  std::vector<std::pair<GemmLibrary, Precision>> out;
  for (GemmLibrary library : {GemmLibrary::kOneDnn, GemmLibrary::kOpenBlas}) {
    if (!gemm_library_built(library)) continue;
    for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
      if (cpu_precision_error(precision, library).empty()) out.emplace_back(library, precision);
    }
  }
  return out;
}

// C = alpha op(A) op(B) + beta C with every transpose combination and padded leading
// dimensions, against loops, in every library and precision this machine runs (small
// integers are exact in bf16 too, and so are their sums in fp32).
TEST(BlasTest, SgemmMatchesLoopsForAllTransposes) {
  for (const auto& [library, precision] : runnable_settings()) {
    const GemmSettings settings(library, precision);
    for (float beta : {0.0f, 0.5f, 1.0f}) {
      const int m = 3, n = 4, k = 5, pad = 2;
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          // Stored shapes: A is [m, k] or, transposed, [k, m]; likewise B.
          const int a_rows = ta ? k : m, a_cols = ta ? m : k;
          const int b_rows = tb ? n : k, b_cols = tb ? k : n;
          const int lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
          std::vector<float> a(a_rows * lda), b(b_rows * ldb), c(m * ldc);
          for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(i % 7) - 3;
          for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(i % 5) - 2;
          for (std::size_t i = 0; i < c.size(); ++i) c[i] = float(i % 3);
          std::vector<float> expect = c;
          for (int i = 0; i < m; ++i) {
            for (int j = 0; j < n; ++j) {
              float acc = 0;
              for (int p = 0; p < k; ++p) {
                acc +=
                    (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
              }
              expect[i * ldc + j] = 2.0f * acc + beta * c[i * ldc + j];
            }
          }
          sgemm(ta, tb, m, n, k, 2.0f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
          EXPECT_EQ(c, expect) << to_string(library) << " " << to_string(precision) << " trans_a "
                               << ta << " trans_b " << tb << " beta " << beta;
        }
      }
    }
  }
}

// The products oneDNN's sgemm driver runs slower than its matmul primitive go there
// (onednn_fp32_uses_matmul): tall, narrow ones with a transposed operand and a long
// reduction; a short left operand times a transposed right one (a small batch's input
// gradient); a short reduction into a small result (its weight gradient). The same product
// either way, and the report names the kernel that ran.
TEST(BlasTest, ProductsRoutedToTheMatmulPrimitiveMatchLoops) {
  if (!gemm_library_built(GemmLibrary::kOneDnn)) GTEST_SKIP() << "built without oneDNN";
  const GemmSettings settings(GemmLibrary::kOneDnn, Precision::kFp32);
  struct Shape {
    bool ta, tb;
    int m, n, k;
  };
  for (const Shape s : {Shape{true, false, 64, 16, 1024}, Shape{false, true, 64, 16, 1024},
                        Shape{false, true, 16, 96, 80}, Shape{true, false, 96, 80, 16}}) {
    const auto [ta, tb, m, n, k] = s;
    EXPECT_TRUE(onednn_fp32_uses_matmul(ta, tb, m, n, k)) << m << "x" << n << "x" << k;
    const int lda = ta ? m : k, ldb = tb ? k : n;
    std::vector<float> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(k) * n);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(i % 7) - 3;
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(i % 5) - 2;
    std::vector<float> c(m * n, 1.0f), expect(m * n);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        float acc = 0;
        for (int p = 0; p < k; ++p) {
          acc += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
        }
        expect[i * n + j] = 0.5f * acc + 1.0f;  // beta 1 over ones
      }
    }
    sgemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 1.0f, c.data(), n);
    EXPECT_EQ(c, expect) << "trans_a " << ta << " trans_b " << tb << " " << m << "x" << n << "x"
                         << k;
  }
  EXPECT_NE(gemm_report().kernel.find(", matmul "), std::string::npos) << gemm_report().kernel;
  // The shapes the driver runs at least as fast stay there: a small batch's forward, and a
  // transformer's input and weight gradients.
  EXPECT_FALSE(onednn_fp32_uses_matmul(false, false, 16, 1024, 1024));
  EXPECT_FALSE(onednn_fp32_uses_matmul(false, true, 1024, 1024, 256));
  EXPECT_FALSE(onednn_fp32_uses_matmul(true, false, 256, 1024, 1024));
}

// On an AVX2 CPU whose OpenBLAS knows the model, the fp32 products oneDNN's AVX2 kernels
// run slower go to OpenBLAS (avx2_fp32_uses_openblas): some weight gradients and forward
// passes, never an input gradient. Where the machine routes them, such a product is
// OpenBLAS's, bit for bit, and the report says so; elsewhere the report never names it.
TEST(BlasTest, ShapesRoutedToOpenBlasAreOpenBlasProductsAndReported) {
  // The rule, on the shapes it was measured on (blas.cpp).
  EXPECT_TRUE(avx2_fp32_uses_openblas(true, false, 1024, 256, 1024));    // down projection dW
  EXPECT_TRUE(avx2_fp32_uses_openblas(true, false, 512, 512, 128));      // width 512, batch 128
  EXPECT_TRUE(avx2_fp32_uses_openblas(false, false, 16, 1024, 1024));    // 16 rows forward
  EXPECT_TRUE(avx2_fp32_uses_openblas(false, false, 256, 1024, 1024));   // wide forward
  EXPECT_TRUE(avx2_fp32_uses_openblas(false, false, 64, 1024, 1024));    // aligned weights
  EXPECT_TRUE(avx2_fp32_uses_openblas(false, false, 256, 512, 512));     // width 512
  EXPECT_FALSE(avx2_fp32_uses_openblas(false, false, 128, 64, 128));     // attention P.V
  EXPECT_FALSE(avx2_fp32_uses_openblas(true, false, 128, 64, 128));      // attention dV
  EXPECT_FALSE(avx2_fp32_uses_openblas(true, false, 1024, 1024, 64));    // width 1024 dW
  EXPECT_FALSE(avx2_fp32_uses_openblas(true, false, 512, 512, 32));      // short reduction
  EXPECT_FALSE(avx2_fp32_uses_openblas(false, false, 1024, 1024, 256));  // transformer up
  EXPECT_FALSE(avx2_fp32_uses_openblas(false, false, 1024, 768, 256));   // transformer qkv
  EXPECT_FALSE(avx2_fp32_uses_openblas(false, false, 128, 768, 768));    // width 768
  EXPECT_FALSE(avx2_fp32_uses_openblas(false, true, 256, 1024, 1024));   // input gradients
  if (!gemm_library_built(GemmLibrary::kOneDnn)) GTEST_SKIP() << "built without oneDNN";
  const GemmSettings settings(GemmLibrary::kOneDnn, Precision::kFp32);
  const int m = 512, n = 128, k = 96;  // a weight gradient: A^T [k x m]^T . B [k x n]
  ASSERT_TRUE(avx2_fp32_uses_openblas(true, false, m, n, k));
  std::vector<float> a(static_cast<std::size_t>(k) * m), b(static_cast<std::size_t>(k) * n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37f * static_cast<float>(i));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.11f * static_cast<float>(i));
  std::vector<float> c(static_cast<std::size_t>(m) * n, 0.25f), openblas = c;
  sgemm(true, false, m, n, k, 0.5f, a.data(), m, b.data(), n, 1.0f, c.data(), n);
  const std::string kernel = gemm_report().kernel;
  if (!fp32_routes_to_openblas()) {
    EXPECT_EQ(kernel.find("OpenBLAS"), std::string::npos) << kernel;
    GTEST_SKIP() << "this machine keeps every fp32 product on oneDNN (" << kernel << ")";
  }
  const GemmSettings reference(GemmLibrary::kOpenBlas, Precision::kFp32);
  sgemm(true, false, m, n, k, 0.5f, a.data(), m, b.data(), n, 1.0f, openblas.data(), n);
  EXPECT_EQ(c, openblas);
  EXPECT_NE(kernel.find(", OpenBLAS "), std::string::npos) << kernel;
}

// bf16 means the inputs are rounded to bf16 (nearest, ties to even) and the products
// summed in fp32: a GEMM of values that need more than 8 bits of mantissa must equal
// the fp32 GEMM of the rounded values, not of the originals.
TEST(BlasTest, Bf16RoundsTheInputsAndAccumulatesInFp32) {
  if (!cpu_precision_error(Precision::kBf16, GemmLibrary::kOneDnn).empty()) {
    GTEST_SKIP() << cpu_precision_error(Precision::kBf16, GemmLibrary::kOneDnn);
  }
  const int m = 8, n = 16, k = 64;
  std::vector<float> a(m * k), b(k * n);
  for (int i = 0; i < m * k; ++i) a[i] = 1.0f + float(i % 13) / 1024.0f;
  for (int i = 0; i < k * n; ++i) b[i] = 1.0f - float(i % 11) / 2048.0f;
  auto rounded = [](std::vector<float> v) {
    std::vector<unsigned short> h(v.size());
    to_bf16(h.data(), v.data(), static_cast<long>(v.size()));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_float(h[i]);
    return v;
  };
  std::vector<float> expect(m * n), got(m * n), exact(m * n);
  {
    const GemmSettings fp32(GemmLibrary::kOneDnn, Precision::kFp32);
    sgemm(false, false, m, n, k, 1.0f, rounded(a).data(), k, rounded(b).data(), n, 0.0f,
          expect.data(), n);
    sgemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, exact.data(), n);
  }
  {
    const GemmSettings bf16(GemmLibrary::kOneDnn, Precision::kBf16);
    sgemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, got.data(), n);
  }
  double worst_vs_rounded = 0, worst_vs_exact = 0;
  for (int i = 0; i < m * n; ++i) {
    worst_vs_rounded = std::max(worst_vs_rounded, std::abs(double(got[i]) - expect[i]) / expect[i]);
    worst_vs_exact = std::max(worst_vs_exact, std::abs(double(got[i]) - exact[i]) / exact[i]);
  }
  EXPECT_LT(worst_vs_rounded, 1e-6) << "fp32 sums of the bf16-rounded inputs";
  EXPECT_GT(worst_vs_exact, 1e-5) << "the inputs really were rounded to bf16";
}

TEST(BlasTest, Bf16ConversionRoundsToNearestEven) {
  const float in[] = {1.0f,
                      std::bit_cast<float>(0x3F808000u),  // halfway, even below: down
                      std::bit_cast<float>(0x3F818000u),  // halfway, odd below: up
                      std::bit_cast<float>(0x3F808001u),  // above halfway: up
                      -2.5f,
                      std::numeric_limits<float>::infinity(),
                      std::bit_cast<float>(0x7F800001u)};  // a NaN whose top bits are inf's
  unsigned short out[std::size(in)];
  to_bf16(out, in, static_cast<long>(std::size(in)));
  EXPECT_EQ(out[0], 0x3F80);
  EXPECT_EQ(out[1], 0x3F80);
  EXPECT_EQ(out[2], 0x3F82);
  EXPECT_EQ(out[3], 0x3F81);
  EXPECT_EQ(bf16_to_float(out[4]), -2.5f);
  EXPECT_EQ(out[5], 0x7F80);
  EXPECT_TRUE(std::isnan(bf16_to_float(out[6]))) << std::hex << out[6];
}

// The same inputs give the same bits on every call: the equality tests of the strategies
// rest on it.
TEST(BlasTest, RepeatedProductsAreBitwiseIdentical) {
  for (const auto& [library, precision] : runnable_settings()) {
    const GemmSettings settings(library, precision);
    const int m = 96, n = 80, k = 300;
    std::vector<float> a(m * k), b(k * n);
    for (int i = 0; i < m * k; ++i) a[i] = std::sin(0.37f * float(i));
    for (int i = 0; i < k * n; ++i) b[i] = std::cos(0.11f * float(i));
    std::vector<float> first(m * n), again(m * n);
    sgemm(true, false, m, n, k, 1.0f, a.data(), m, b.data(), n, 0.0f, first.data(), n);
    for (int r = 0; r < 3; ++r) {
      sgemm(true, false, m, n, k, 1.0f, a.data(), m, b.data(), n, 0.0f, again.data(), n);
      EXPECT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0)
          << to_string(library) << " " << to_string(precision);
    }
  }
}

TEST(BlasTest, ThreadsAndDescription) {
  const int before = blas_threads();
  set_blas_threads(1);
  EXPECT_EQ(blas_threads(), 1);
  const std::string text = blas_description();
  const GemmReport report = gemm_report();
  EXPECT_NE(text.find(report.library), std::string::npos) << text;
  EXPECT_NE(text.find("1 thread"), std::string::npos) << text;
  EXPECT_NE(text.find(report.kernel), std::string::npos) << text;
  EXPECT_NE(text.find("loops " + cpu_loops_isa()), std::string::npos) << text;
  EXPECT_FALSE(report.cpu_isa.empty());
  EXPECT_THROW(set_blas_threads(0), UsageError);
  set_blas_threads(before);
}

int threads_of_this_process() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++n;
  }
  return n;
}

// The threads of this process while two rank threads are alive, after each has run three
// 512^3 products (or none).
int threads_while_two_ranks_live(bool compute) {
  std::atomic<int> arrived{0};
  std::atomic<int> seen{0};
  auto rank = [&](bool measure) {
    if (compute) {
      const int n = 512;
      std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
      for (int r = 0; r < 3; ++r) {
        sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      }
    }
    arrived.fetch_add(1);
    while (arrived.load() < 2) std::this_thread::yield();  // both ranks are done computing
    if (measure) seen.store(threads_of_this_process());
    arrived.fetch_add(1);
    while (arrived.load() < 4) std::this_thread::yield();  // measured while both live
  };
  std::thread r0(rank, true), r1(rank, false);
  r0.join();
  r1.join();
  return seen.load();
}

// --threads 1 means one thread per rank: two ranks' threads running large products start
// no worker threads of the library (oneDNN would split a 512^3 product across the cores
// if allowed; each rank thread's OpenMP setting is its own). Compared with the same two
// threads computing nothing, so that helper threads of a runtime (a sanitizer's) count on
// both sides. With 2 threads per rank the count reads 2 more on a 2-core machine.
TEST(BlasTest, OneThreadPerCallerStartsNoWorkers) {
  const int before_threads = blas_threads();
  set_blas_threads(1);
  (void)threads_while_two_ranks_live(false);  // whatever starts with the first threads
  const int idle = threads_while_two_ranks_live(false);
  EXPECT_EQ(threads_while_two_ranks_live(true), idle) << "library worker threads started";
  set_blas_threads(before_threads);
}

TEST(BlasTest, UnknownLibraryAndUnsupportedPrecisionAreUsageErrors) {
  EXPECT_THROW(parse_gemm_library("mkl"), UsageError);
  EXPECT_EQ(parse_gemm_library("openblas"), GemmLibrary::kOpenBlas);
  EXPECT_FALSE(cpu_precision_error(Precision::kTf32, GemmLibrary::kOneDnn).empty());
  EXPECT_FALSE(cpu_precision_error(Precision::kBf16, GemmLibrary::kOpenBlas).empty());
  const GemmSettings openblas(GemmLibrary::kOpenBlas, Precision::kFp32);
  EXPECT_THROW(set_gemm_precision(Precision::kBf16), UsageError);
  EXPECT_EQ(gemm_precision(), Precision::kFp32);
}

}  // namespace
}  // namespace tandem
