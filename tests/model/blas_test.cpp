#include "compute/cpu/blas.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"

namespace tandem {
namespace {

// C = alpha op(A) op(B) + beta C with every transpose combination and padded leading
// dimensions, against loops.
TEST(BlasTest, SgemmMatchesLoopsForAllTransposes) {
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
            acc += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
          }
          expect[i * ldc + j] = 2.0f * acc + 0.5f * c[i * ldc + j];
        }
      }
      sgemm(ta, tb, m, n, k, 2.0f, a.data(), lda, b.data(), ldb, 0.5f, c.data(), ldc);
      EXPECT_EQ(c, expect) << "trans_a " << ta << " trans_b " << tb;  // small integers: exact
    }
  }
}

TEST(BlasTest, ThreadsAndDescription) {
  const int before = blas_threads();
  set_blas_threads(1);
  EXPECT_EQ(blas_threads(), 1);
  const std::string text = blas_description();
  EXPECT_NE(text.find("OpenBLAS"), std::string::npos) << text;
  EXPECT_NE(text.find("1 thread"), std::string::npos) << text;
  EXPECT_THROW(set_blas_threads(0), UsageError);
  set_blas_threads(before);
}

}  // namespace
}  // namespace tandem
