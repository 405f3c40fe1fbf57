// The BF16 panel family's AVX512-BF16 build (bf16_panel_gemm.h; compiled
// with the AVX-512 flags and -mavx512bf16, it runs only where the kernel set,
// kernel_set.h, names it): the native tiles on vdpbf16ps, and the
// measurement of its rate against FP32 FMA that decides whether BF16 weights
// are packed at all.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/ops/kernels/tile32.h"

namespace gemmserve {
namespace bf16_panel_internal {
namespace {

// A pair tile (PairTileFn) on vdpbf16ps, R the rows computed (the valid
// ones: a decode call with one token row does one row's work, not twelve).
template <int R>
void TileNative(int64_t pairs, const uint32_t* tokens, int64_t tr, const uint16_t* weights,
                float* c, int64_t ldc, int64_t cols, bool accumulate) {
  __m512 acc[R][2];
  tile32::Zero(acc);
  int64_t q = 0;
  if constexpr (R <= 4) {
    // Few rows (decode): too few accumulator chains to hide vdpbf16ps's
    // latency, so odd pairs go to a second set, added at the end.
    __m512 odd[R][2];
    tile32::Zero(odd);
    for (; q + 2 <= pairs; q += 2) {
      const __m512bh w0 = (__m512bh)_mm512_load_si512(weights + q * 64);
      const __m512bh w1 = (__m512bh)_mm512_load_si512(weights + q * 64 + 32);
      const __m512bh v0 = (__m512bh)_mm512_load_si512(weights + q * 64 + 64);
      const __m512bh v1 = (__m512bh)_mm512_load_si512(weights + q * 64 + 96);
      const uint32_t* t = tokens + q * tr;
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(t[r]));
        const __m512bh y = (__m512bh)_mm512_set1_epi32(static_cast<int>(t[tr + r]));
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, w0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, w1);
        odd[r][0] = _mm512_dpbf16_ps(odd[r][0], y, v0);
        odd[r][1] = _mm512_dpbf16_ps(odd[r][1], y, v1);
      }
    }
    tile32::Add(acc, odd);
  }
  for (; q < pairs; ++q) {
    const __m512bh w0 = (__m512bh)_mm512_load_si512(weights + q * 64);
    const __m512bh w1 = (__m512bh)_mm512_load_si512(weights + q * 64 + 32);
    const uint32_t* t = tokens + q * tr;
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(t[r]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, w0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, w1);
    }
  }
  tile32::Store(acc, c, ldc, cols, accumulate);
}

// Flops per second of 12 independent accumulations over `steps` steps:
// vdpbf16ps (64 flops each, kDot) or FP32 FMA (32), in registers only.
template <bool kDot>
__attribute__((noinline)) double Rate(int64_t steps) {
  __m512 acc[12];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  // BF16 pairs of 1.0 and 2^-32, or FP32 1.0 and 1e-9: sums that stay finite.
  __m512 x = kDot ? _mm512_castsi512_ps(_mm512_set1_epi16(0x3f80)) : _mm512_set1_ps(1.0f);
  const __m512 y = kDot ? _mm512_castsi512_ps(_mm512_set1_epi16(0x2f80)) : _mm512_set1_ps(1e-9f);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) {
#pragma GCC unroll 12
    for (__m512& a : acc) {
      if constexpr (kDot) {
        a = _mm512_dpbf16_ps(a, (__m512bh)_mm512_castps_si512(x), (__m512bh)_mm512_castps_si512(y));
      } else {
        a = _mm512_fmadd_ps(x, y, a);
      }
    }
    asm volatile("" : "+v"(x));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  alignas(64) float sink[16];
  for (__m512& a : acc) {  // the sums are used, so the loop is not removed
    _mm512_store_ps(sink, a);
    asm volatile("" : : "m"(sink));
  }
  return static_cast<double>(steps) * 12 * (kDot ? 64 : 32) / std::max(s, 1e-9);
}

}  // namespace

const PairTileFn kNativeTilesAvx512Bf16[kBf16TokenRows] = {
    TileNative<1>, TileNative<2>, TileNative<3>, TileNative<4>,  TileNative<5>,  TileNative<6>,
    TileNative<7>, TileNative<8>, TileNative<9>, TileNative<10>, TileNative<11>, TileNative<12>};

// The best of five alternating runs of each: a shared machine's stalls
// only ever make a run slower.
double MeasureNativeSpeedupAvx512Bf16() {
  double dot = 0, fma = 0;
  for (int r = 0; r < 5; ++r) {
    dot = std::max(dot, Rate<true>(20000));
    fma = std::max(fma, Rate<false>(20000));
  }
  return dot / std::max(fma, 1.0);
}

}  // namespace bf16_panel_internal
}  // namespace gemmserve
