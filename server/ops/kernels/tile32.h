// What gemmserve's own AVX-512 GEMM tiles share (kernels/panel_gemm.cc,
// kernels/bf16_panel_gemm.cc): R rows of 32 FP32 accumulators, each row two
// 16-lane halves, zeroed, summed, and stored to the first `cols` columns of C
// (row stride ldc), added to what C holds when `accumulate` (a later K block).
// Callers are compiled for AVX-512 through target attributes; these inline
// into them.
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_TILE32_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_TILE32_H_

#include <immintrin.h>

#include <cstdint>

namespace gemmserve::tile32 {

#define GEMMSERVE_TILE32_INLINE inline __attribute__((target("avx512f"), always_inline))

template <int R>
GEMMSERVE_TILE32_INLINE void Zero(__m512 (&acc)[R][2]) {
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
}

// acc += other, row by row (the second accumulator set of the few-row tiles).
template <int R>
GEMMSERVE_TILE32_INLINE void Add(__m512 (&acc)[R][2], const __m512 (&other)[R][2]) {
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    acc[r][0] = _mm512_add_ps(acc[r][0], other[r][0]);
    acc[r][1] = _mm512_add_ps(acc[r][1], other[r][1]);
  }
}

template <int R>
GEMMSERVE_TILE32_INLINE void Store(const __m512 (&acc)[R][2], float* c, int64_t ldc, int64_t cols,
                                   bool accumulate) {
  const __mmask16 lo = cols >= 16 ? 0xffff : static_cast<__mmask16>((1u << cols) - 1);
  const __mmask16 hi = cols >= 32  ? 0xffff
                       : cols > 16 ? static_cast<__mmask16>((1u << (cols - 16)) - 1)
                                   : 0;
  for (int r = 0; r < R; ++r) {
    float* row = c + r * ldc;
    __m512 a0 = acc[r][0], a1 = acc[r][1];
    if (accumulate) {
      a0 = _mm512_add_ps(a0, _mm512_maskz_loadu_ps(lo, row));
      a1 = _mm512_add_ps(a1, _mm512_maskz_loadu_ps(hi, row + 16));
    }
    _mm512_mask_storeu_ps(row, lo, a0);
    _mm512_mask_storeu_ps(row + 16, hi, a1);
  }
}

#undef GEMMSERVE_TILE32_INLINE

}  // namespace gemmserve::tile32

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_TILE32_H_
