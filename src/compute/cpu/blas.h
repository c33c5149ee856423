// The CPU BLAS (OpenBLAS through CBLAS) and control of its thread pool.
#pragma once

#include <string>

namespace tandem {

// Bounds the threads one BLAS call may use in this process (OpenBLAS keeps a pool of
// its own sized by the core count unless told). Call before computing.
void set_blas_threads(int threads);
int blas_threads();
// "OpenBLAS 0.3.21 (pthreads, 2 threads, Haswell)": what is in use, for reports.
std::string blas_description();

// C[m,n] = alpha * op(A) op(B) + beta * C, row-major; thin wrapper over cblas_sgemm.
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
           int lda, const float* b, int ldb, float beta, float* c, int ldc);

// The same product for kernels written once for float and double (double is what the
// gradient checks run in): gemm<float> is sgemm, gemm<double> is cblas_dgemm.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);
void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a,
          int lda, const double* b, int ldb, double beta, double* c, int ldc);

}  // namespace tandem
