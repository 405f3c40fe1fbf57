// Streaming GEMM for few rows: C[rows, n] += A[rows, k_begin:k_end] *
// B[k_begin:k_end, :], reading each element of B exactly once, in address
// order.
//
// This is the decode path of GroupedMatMul. With a handful of tokens per
// expert the work is memory-bound: the cost is reading that expert's weights,
// and a packing GEMM (BLIS) reads them, writes a packed copy and reads that
// again. Here B is streamed four rows at a time (column blocks of 1024) and
// multiplied into accumulators that stay in L1/L2, so each weight crosses the
// memory bus once; half-precision B is widened on the fly, so FP16/BF16 weights
// cost half the bandwidth of FP32.
//
// A and C are FP32 (FP64 for FP64 B); B may be FP32, FP16 or BF16 bits, or
// FP64. The kernel set (kernel_set.h) picks an AVX-512 build where the CPU
// has it, else an AVX2 (with FMA and F16C) build, else a portable build of
// the same code.
//
//   std::vector<float> c(rows * n, 0.0f);
//   StreamingGemmAccumulate(DataType::kBF16, rows, 0, k, n, a, k, b, n, c.data(), n);
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_STREAMING_GEMM_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_STREAMING_GEMM_H_

#include <cstdint>

#include "server/tensor/datatype.h"

namespace gemmserve {

// `b_type` is kFP32, kFP16 or kBF16; b points to elements of that type.
void StreamingGemmAccumulate(DataType b_type, int64_t rows, int64_t k_begin, int64_t k_end,
                             int64_t n, const float* a, int64_t lda, const void* b, int64_t ldb,
                             float* c, int64_t ldc);
void StreamingGemmAccumulate(int64_t rows, int64_t k_begin, int64_t k_end, int64_t n,
                             const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
                             int64_t ldc);

// Widens `n` FP16 or BF16 values (bits) to FP32, exactly; vectorised.
void WidenToFloat(DataType type, const uint16_t* src, float* dst, int64_t n);

// Which build the kernel set (kernel_set.h) chose: "avx512", "avx2" or "generic".
const char* StreamingGemmIsa();

namespace streaming_internal {
// Every build, for tests that compare them on any machine that has its features.
void AccumulateGeneric(DataType b_type, int64_t rows, int64_t k_begin, int64_t k_end, int64_t n,
                       const float* a, int64_t lda, const void* b, int64_t ldb, float* c,
                       int64_t ldc);
void AccumulateGeneric(int64_t rows, int64_t k_begin, int64_t k_end, int64_t n, const double* a,
                       int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc);
void AccumulateAvx512(DataType b_type, int64_t rows, int64_t k_begin, int64_t k_end, int64_t n,
                      const float* a, int64_t lda, const void* b, int64_t ldb, float* c,
                      int64_t ldc);
void AccumulateAvx512(int64_t rows, int64_t k_begin, int64_t k_end, int64_t n, const double* a,
                      int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc);
void WidenAvx512(DataType type, const uint16_t* src, float* dst, int64_t n);
void AccumulateAvx2(DataType b_type, int64_t rows, int64_t k_begin, int64_t k_end, int64_t n,
                    const float* a, int64_t lda, const void* b, int64_t ldb, float* c, int64_t ldc);
void AccumulateAvx2(int64_t rows, int64_t k_begin, int64_t k_end, int64_t n, const double* a,
                    int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc);
void WidenAvx2(DataType type, const uint16_t* src, float* dst, int64_t n);
void WidenGeneric(DataType type, const uint16_t* src, float* dst, int64_t n);
}  // namespace streaming_internal

// Defines a build's entry points above (AccumulateIsa for FP32 and FP64,
// WidenIsa) in streaming_internal, on the streaming_gemm_impl.inc its file
// included in namespace `ns`: FP32 through ns::f32 (the included
// AccumulateFloat, or the build's own).
#define GEMMSERVE_STREAMING_DEFINE(Isa, ns, f32)                                                 \
  void Accumulate##Isa(DataType b_type, int64_t rows, int64_t k_begin, int64_t k_end, int64_t n, \
                       const float* a, int64_t lda, const void* b, int64_t ldb, float* c,        \
                       int64_t ldc) {                                                            \
    ns::f32(b_type, rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);                            \
  }                                                                                              \
  void Accumulate##Isa(int64_t rows, int64_t k_begin, int64_t k_end, int64_t n, const double* a, \
                       int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc) {      \
    ns::AccumulateDirect(rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);                       \
  }                                                                                              \
  void Widen##Isa(DataType type, const uint16_t* src, float* dst, int64_t n) {                   \
    ns::WidenRow(type, src, dst, n);                                                             \
  }

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_STREAMING_GEMM_H_
