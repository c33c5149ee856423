// The CPU's matrix products: one row-major GEMM entry point over the library that runs
// this CPU at its peak, with control of its threads and precision, and a report of what
// really runs (library, version, kernel ISA) for run headers, summary.json and reports.
//
// Libraries (docs/PERFORMANCE.md "CPU GEMM" has the measurements behind the choice):
//   onednn   oneDNN's sgemm (jit kernels picked at run time from the CPU's features:
//            AVX-512, AVX2, AVX, SSE4.1) and its matmul primitive for bf16; the default
//            wherever tandem was built with it. It does not depend on knowing the CPU model.
//            On an AVX2 CPU whose OpenBLAS knows the model, the fp32 shapes where
//            oneDNN's AVX2 kernels were measured slower go to OpenBLAS (blas.cpp).
//   openblas the system's OpenBLAS, whose DYNAMIC_ARCH build picks kernels by CPU model
//            and falls back to generic ones on a model it does not know.
// Double precision (the gradient checks) always goes to OpenBLAS's dgemm.
#pragma once

#include <string>
#include <string_view>

#include "compute/precision.h"

namespace tandem {

enum class GemmLibrary : unsigned char { kOneDnn, kOpenBlas };

std::string_view to_string(GemmLibrary library);
// Throws UsageError on an unknown name or a library this build lacks (the caller
// prefixes the flag).
GemmLibrary parse_gemm_library(std::string_view text);
bool gemm_library_built(GemmLibrary library);
// oneDNN where built, else OpenBLAS.
GemmLibrary default_gemm_library();

// Process-wide settings, set before computing (train and characterize do, from --gemm,
// --precision and --threads); every GEMM issued afterwards, from any thread, follows them.
void set_gemm_library(GemmLibrary library);
GemmLibrary gemm_library();
// kFp32 or kBf16 (bf16 inputs, fp32 accumulation and output). Throws UsageError naming
// --precision when the CPU or the library cannot run it (cpu_precision_error says why).
void set_gemm_precision(Precision precision);
Precision gemm_precision();
// Empty when `precision` can run on this CPU with `library`, else the reason.
std::string cpu_precision_error(Precision precision, GemmLibrary library);

// Bounds the threads one GEMM may use: T threads for each calling thread (each rank), not
// the machine for each. Call before computing.
void set_blas_threads(int threads);
int blas_threads();

// What the GEMMs run on. Every field comes from the library's own answer at run time.
struct GemmReport {
  std::string library;    // "oneDNN 2.6.3", "OpenBLAS 0.3.21"
  std::string kernel;     // "jit sgemm avx512_core", "brg:avx512_core_bf16", "Prescott"
  std::string isa;        // the ISA of that kernel: "avx512_core", "avx2", "sse" ...
  std::string cpu_isa;    // the best this CPU offers: "avx512_core_amx", "avx512_core_bf16", ...
  std::string threading;  // "OpenMP", "pthreads"
  int threads = 1;
  Precision precision = Precision::kFp32;
  std::string warning;  // one line when the kernel is generic on a CPU with AVX2 or better
  std::string loops;    // the build of the elementwise loops this CPU runs (dispatch.h)
};
GemmReport gemm_report();
// "oneDNN 2.6.3 (OpenMP, 1 thread, fp32, kernel jit sgemm avx512_core; CPU avx512_core_bf16,
// loops x86-64-v4 (AVX-512))":
// one line for headers and summary.json.
std::string blas_description();

// Whether an fp32 product of this shape runs on oneDNN's matmul primitive rather than its
// sgemm driver (with --gemm onednn): the shapes where the driver was measured slower
// (blas.cpp). A fixed rule of the shape alone.
bool onednn_fp32_uses_matmul(bool trans_a, bool trans_b, int m, int n, int k);
// Whether an fp32 product of this shape runs on OpenBLAS (with --gemm onednn) on a machine
// that routes any there (fp32_routes_to_openblas): the shapes where oneDNN's AVX2 kernels
// were measured slower (blas.cpp). A fixed rule of the shape alone.
bool avx2_fp32_uses_openblas(bool trans_a, bool trans_b, int m, int n, int k);
// Whether this machine routes those products to OpenBLAS: oneDNN running its AVX2 kernels
// and an OpenBLAS that runs kernels of that tier (it knows the CPU model).
bool fp32_routes_to_openblas();

// C[m,n] = alpha * op(A) op(B) + beta * C, row-major, in the configured library and
// precision.
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

// The same product for kernels written once for float and double (double is what the
// gradient checks run in): gemm<float> is sgemm, gemm<double> is OpenBLAS's dgemm.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);
void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc);

// fp32 -> bf16 with round-to-nearest-even (NaN stays NaN), and back; what the bf16 path
// feeds its GEMMs, exposed for tests.
void to_bf16(unsigned short* out, const float* in, long n);
float bf16_to_float(unsigned short v);

}  // namespace tandem
