// The streaming kernel built for AVX-512 (this file alone is compiled with
// -mavx512f -mavx512bw -mavx512vl -mfma -mf16c; it runs only where
// streaming_gemm.cc's dispatcher has seen those features).
#include <immintrin.h>

// GCC 12 flags the deliberately undefined register inside _mm512_cvtph_ps as
// "maybe uninitialized" (a known false positive of its intrinsics header).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>

#include "server/ops/kernels/streaming_gemm.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace streaming_internal {
namespace {
namespace avx512 {

// vcvtph2ps: sixteen FP16 values to FP32 per instruction, exact.
inline void WidenHalfRow(const uint16_t* src, float* dst, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j));
    _mm512_storeu_ps(dst + j, _mm512_cvtph_ps(h));
  }
  for (; j < n; ++j) dst[j] = HalfToFloat(src[j]);
}

#include "server/ops/kernels/streaming_gemm_impl.inc"

}  // namespace avx512
}  // namespace

void AccumulateAvx512(DataType b_type, int64_t rows, int64_t k_begin, int64_t k_end, int64_t n,
                      const float* a, int64_t lda, const void* b, int64_t ldb, float* c,
                      int64_t ldc) {
  avx512::AccumulateFloat(b_type, rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
}

void AccumulateAvx512(int64_t rows, int64_t k_begin, int64_t k_end, int64_t n, const double* a,
                      int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc) {
  avx512::AccumulateDirect(rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
}

void WidenAvx512(DataType type, const uint16_t* src, float* dst, int64_t n) {
  if (type == DataType::kBF16) {
    avx512::WidenBf16Row(src, dst, n);
  } else {
    avx512::WidenHalfRow(src, dst, n);
  }
}

}  // namespace streaming_internal
}  // namespace gemmserve
