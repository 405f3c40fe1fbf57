// Row-major GEMM kernels, C = A * B, one entry point per element type:
//
//   FP32 / FP64      BLIS (bli_?gemm_ex) with a per-call thread count.
//   FP16 / BF16      BLIS's FP32 micro-kernels; A and B widened to FP32
//                    while BLIS packs them (custom pack_fn), FP32
//                    accumulation, one round to nearest-even on the way out.
//   INT32 ... UINT64 a cache-blocked C++ kernel that wraps like numpy.
//
// A is m x k with row stride lda, B is k x n with row stride ldb, C is m x n
// with row stride ldc; C is overwritten. Zero sizes are valid: k == 0 writes
// zeros. The caller guarantees the pointers cover the stated extents (the
// operator front ends validate shapes first; BLIS aborts on bad arguments).
//
// `threads` bounds how many threads the call may use (>= 1).
//
//   GemmRowMajor(DataType::kFP32, m, n, k, a, k, b, n, c, n, /*threads=*/2);
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_GEMM_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "server/tensor/datatype.h"

namespace gemmserve {

void SgemmRowMajor(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                   int64_t ldb, float* c, int64_t ldc, int threads);
void DgemmRowMajor(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
                   int64_t ldb, double* c, int64_t ldc, int threads);

// Integer GEMM with wrap-around (two's complement) arithmetic, vectorised for
// the CPU it runs on (AVX-512, AVX2 or portable), rows split over threads.
template <typename T>
void IntGemmRowMajor(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
                     int64_t ldb, T* c, int64_t ldc, int threads);

// Half-precision GEMM (FP16 or BF16 bits), FP32 accumulation, one rounding.
// Computes kHalfGemmRowBlock rows of C at a time in FP32 scratch of
// min(m, kHalfGemmRowBlock) * n floats: RESOURCE_EXHAUSTED if it cannot be had.
inline constexpr int64_t kHalfGemmRowBlock = 512;
absl::Status HalfGemmRowMajor(DataType type, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                              int64_t lda, const uint16_t* b, int64_t ldb, uint16_t* c, int64_t ldc,
                              int threads);

// The FP32 result of a half-precision product, C32 = A' * B, where row i of
// A' is row a_rows[i] of a (a_rows null: row i), both operands widened inside
// BLIS's packing step, so neither a gathered nor a widened copy of A or B is
// ever made. C32 is m x n FP32, row stride ldc.
void HalfPackedGemm(DataType type, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                    const int64_t* a_rows, const uint16_t* b, int64_t ldb, float* c, int64_t ldc,
                    int threads);

// Dispatch on `type`; pointers are to elements of that type.
absl::Status GemmRowMajor(DataType type, int64_t m, int64_t n, int64_t k, const void* a,
                          int64_t lda, const void* b, int64_t ldb, void* c, int64_t ldc,
                          int threads);

// Converts `count` half values (FP16 or BF16 bits) to FP32, and back with
// round-to-nearest-even.
void HalfToFloatBlock(DataType type, const uint16_t* in, float* out, int64_t count);
void FloatToHalfBlock(DataType type, const float* in, uint16_t* out, int64_t count);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_GEMM_H_
