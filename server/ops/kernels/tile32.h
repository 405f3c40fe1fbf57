// What gemmserve's own AVX-512 GEMM tiles share (panel_gemm_avx512.cc,
// bf16_panel_gemm_avx512.cc, bf16_panel_gemm_avx512bf16.cc): R rows of 32
// FP32 accumulators, each row two 16-lane halves, zeroed, summed, and stored
// to the first `cols` columns of C (row stride ldc), added to what C holds
// when `accumulate` (a later K block); and the decode tile's loop of FP32 FMA
// over K (FmaTile), written once for the FP32 and FP16 panels. Only files
// compiled with the AVX-512 flags include it; everything here inlines into
// them.
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_TILE32_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_TILE32_H_

#include <immintrin.h>

#include <cstdint>

namespace gemmserve::tile32 {

#define GEMMSERVE_TILE32_INLINE inline __attribute__((always_inline))

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

// A tile of R token rows x 32 weight columns in FP32 FMA over K steps
// [0, kc), stored to C: tokens [kc][tr] floats (tr >= R rows per step), and
// step(kk, lo, hi) loads K step kk of the weights (columns 0-15 and 16-31).
// Few rows (R <= 4, decode): the odd steps go to a second set of
// accumulators, added at the end, so that R chains alone do not wait on the
// FMA latency; ahead(kk) runs before each pair of steps (a prefetch, or
// nothing).
template <int R, typename Step, typename Ahead>
GEMMSERVE_TILE32_INLINE void FmaTile(int64_t kc, const float* tokens, int64_t tr, Step step,
                                     Ahead ahead, float* c, int64_t ldc, int64_t cols,
                                     bool accumulate) {
  __m512 acc[R][2];
  Zero(acc);
  int64_t kk = 0;
  if constexpr (R <= 4) {
    __m512 odd[R][2];
    Zero(odd);
    for (; kk + 2 <= kc; kk += 2) {
      ahead(kk);
      __m512 w0, w1, v0, v1;
      step(kk, w0, w1);
      step(kk + 1, v0, v1);
      const float* t = tokens + kk * tr;
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 x = _mm512_set1_ps(t[r]), y = _mm512_set1_ps(t[tr + r]);
        acc[r][0] = _mm512_fmadd_ps(x, w0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(x, w1, acc[r][1]);
        odd[r][0] = _mm512_fmadd_ps(y, v0, odd[r][0]);
        odd[r][1] = _mm512_fmadd_ps(y, v1, odd[r][1]);
      }
    }
    Add(acc, odd);
  }
  for (; kk < kc; ++kk) {
    __m512 w0, w1;
    step(kk, w0, w1);
    const float* t = tokens + kk * tr;
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(t[r]);
      acc[r][0] = _mm512_fmadd_ps(x, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, w1, acc[r][1]);
    }
  }
  Store(acc, c, ldc, cols, accumulate);
}

#undef GEMMSERVE_TILE32_INLINE

}  // namespace gemmserve::tile32

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_TILE32_H_
