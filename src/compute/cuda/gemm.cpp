#include "compute/cuda/gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include <string>

#include "core/error.h"

// cuBLAS's own status codes; the CUDA runtime's are checked by cuda/check.h.
#define TANDEM_CUBLAS_CHECK(call)                                                    \
  do {                                                                               \
    const cublasStatus_t tandem_status_ = (call);                                    \
    if (tandem_status_ != CUBLAS_STATUS_SUCCESS)                                     \
      ::tandem::cuda::throw_cublas_error(#call, tandem_status_, __FILE__, __LINE__); \
  } while (0)

namespace tandem::cuda {

[[noreturn]] void throw_cublas_error(const char* call, cublasStatus_t status, const char* file,
                                     int line) {
  throw RuntimeError(std::string(call) + " failed: " + cublasGetStatusName(status) + ": " +
                     cublasGetStatusString(status) + " (" + file + ":" + std::to_string(line) +
                     ")");
}

CublasHandle::CublasHandle() { TANDEM_CUBLAS_CHECK(cublasCreate(&handle_)); }

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

void CublasHandle::set_stream(cudaStream_t stream) {
  TANDEM_CUBLAS_CHECK(cublasSetStream(handle_, stream));
}

std::size_t gemm_input_bytes(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
    case Precision::kTf32:
      return sizeof(float);
    case Precision::kFp16:
      return sizeof(__half);
    case Precision::kBf16:
      return sizeof(__nv_bfloat16);
  }
  return sizeof(float);
}

namespace {

cudaDataType_t input_type(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
    case Precision::kTf32:
      return CUDA_R_32F;
    case Precision::kFp16:
      return CUDA_R_16F;
    case Precision::kBf16:
      return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

cublasComputeType_t compute_type(Precision precision) {
  // fp32: CUBLAS_COMPUTE_32F never uses reduced-precision tensor cores (unless the
  // environment sets NVIDIA_TF32_OVERRIDE=1). tf32 opts in explicitly.
  return precision == Precision::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

}  // namespace

// Note [Row-major GEMM on column-major cuBLAS]
// A row-major matrix X[r, c] with leading dimension ld is, byte for byte, the
// column-major matrix X^T[c, r] with the same ld. The row-major product
// C[m,n] = op(A) op(B) is therefore the column-major product C^T[n,m] = op(B)^T op(A)^T:
// swap the operands (B first), swap m and n, and keep each operand's transpose flag
// (op(B)^T of the column-major view B^T is B^T when B is not transposed: CUBLAS_OP_N).
// No data moves; leading dimensions are passed unchanged.
void gemm(const CublasHandle& handle, Precision precision, bool trans_a, bool trans_b, int m, int n,
          int k, float alpha, const void* a, int lda, const void* b, int ldb, float beta, float* c,
          int ldc) {
  if (m == 0 || n == 0) return;
  const cudaDataType_t in = input_type(precision);
  TANDEM_CUBLAS_CHECK(cublasGemmEx(handle.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, in, ldb,
                                   a, in, lda, &beta, c, CUDA_R_32F, ldc, compute_type(precision),
                                   CUBLAS_GEMM_DEFAULT));
}

// The same operand swap as gemm() (Note [Row-major GEMM on column-major cuBLAS]); the
// strides go with their operands.
void gemm_strided_batched(const CublasHandle& handle, Precision precision, bool trans_a,
                          bool trans_b, int m, int n, int k, float alpha, const void* a, int lda,
                          long long stride_a, const void* b, int ldb, long long stride_b,
                          float beta, float* c, int ldc, long long stride_c, int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  const cudaDataType_t in = input_type(precision);
  TANDEM_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
      k, &alpha, b, in, ldb, stride_b, a, in, lda, stride_a, &beta, c, CUDA_R_32F, ldc, stride_c,
      batch, compute_type(precision), CUBLAS_GEMM_DEFAULT));
}

std::string cublas_description() {
  int major = 0, minor = 0, patch = 0;
  TANDEM_CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &major));
  TANDEM_CUBLAS_CHECK(cublasGetProperty(MINOR_VERSION, &minor));
  TANDEM_CUBLAS_CHECK(cublasGetProperty(PATCH_LEVEL, &patch));
  return "cuBLAS " + std::to_string(major) + "." + std::to_string(minor) + "." +
         std::to_string(patch);
}

}  // namespace tandem::cuda
