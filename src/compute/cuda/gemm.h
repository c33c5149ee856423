// cuBLAS behind a row-major GEMM with the same argument order as the CPU sgemm
// (compute/cpu/blas.h), in four precisions.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "compute/precision.h"

namespace tandem::cuda {

// One cuBLAS handle, bound to the device current at construction and to one stream.
class CublasHandle {
 public:
  CublasHandle();
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;

  cublasHandle_t get() const { return handle_; }
  // Every later GEMM on this handle is enqueued on `stream`.
  void set_stream(cudaStream_t stream);

 private:
  cublasHandle_t handle_ = nullptr;
};

// What a GEMM's A and B hold: fp32 for kFp32/kTf32, __half for kFp16, __nv_bfloat16 for
// kBf16 (the caller casts them). C is fp32 always, and accumulation is fp32.
std::size_t gemm_input_bytes(Precision precision);

// C[m,n] = alpha * op(A) op(B) + beta * C, all row-major, lda/ldb/ldc the row-major
// leading dimensions (columns of the stored matrix), exactly as tandem::sgemm.
void gemm(const CublasHandle& handle, Precision precision, bool trans_a, bool trans_b, int m, int n,
          int k, float alpha, const void* a, int lda, const void* b, int ldb, float beta, float* c,
          int ldc);

// `batch` GEMMs of gemm()'s shape at once, matrix i at a + i * stride_a (elements of the
// input type), b + i * stride_b and c + i * stride_c: attention's per-head products on
// strided views of qkv (compute/cuda/attention.cpp), one cuBLAS call per sequence.
void gemm_strided_batched(const CublasHandle& handle, Precision precision, bool trans_a,
                          bool trans_b, int m, int n, int k, float alpha, const void* a, int lda,
                          long long stride_a, const void* b, int ldb, long long stride_b,
                          float beta, float* c, int ldc, long long stride_c, int batch);

// "cuBLAS 13.0.2": for reports.
std::string cublas_description();

}  // namespace tandem::cuda
