#include "compute/cpu/blas.h"

#include <cblas.h>

#include <sstream>
#include <string>

#include "core/error.h"

namespace tandem {

void set_blas_threads(int threads) {
  if (threads < 1) {
    throw UsageError("BLAS threads must be >= 1 (got " + std::to_string(threads) + ")");
  }
  openblas_set_num_threads(threads);
}

int blas_threads() { return openblas_get_num_threads(); }

std::string blas_description() {
  // openblas_get_config() reads like "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell
  // MAX_THREADS=64"; reports only need the name and version from it.
  std::istringstream config(openblas_get_config() ? openblas_get_config() : "OpenBLAS");
  std::string name, version;
  config >> name >> version;
  std::string out = name.empty() ? "OpenBLAS" : name;
  if (!version.empty()) out += " " + version;

  const char* parallel = "unknown threading";
  switch (openblas_get_parallel()) {
    case 0:
      parallel = "sequential";
      break;
    case 1:
      parallel = "pthreads";
      break;
    case 2:
      parallel = "OpenMP";
      break;
    default:
      break;
  }
  const int threads = blas_threads();
  out += std::string(" (") + parallel + ", " + std::to_string(threads) +
         (threads == 1 ? " thread" : " threads");
  if (const char* core = openblas_get_corename(); core != nullptr && *core != '\0') {
    out += std::string(", ") + core;
  }
  out += ")";
  return out;
}

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a,
          int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace tandem
