// The BF16/FP16 panel family's AVX-512 build (bf16_panel_gemm.h; compiled
// with the AVX-512 flags, it runs only where the kernel set, kernel_set.h,
// names it): the FMA tiles on BF16 pair panels, the FP16 tiles, and the
// packing of BF16 weights into pair panels. The vdpbf16ps tiles are the
// AVX512-BF16 build's (bf16_panel_gemm_avx512bf16.cc).
#include <immintrin.h>

// GCC 12's AVX-512 shift intrinsics start from an undefined vector and warn
// about it where they are inlined (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/ops/kernels/tile32.h"

namespace gemmserve {
namespace bf16_panel_internal {
namespace {

// A pair tile (PairTileFn) with the pairs widened exactly to FP32 and FP32
// FMA (IEEE: subnormals kept).
template <int R>
void TileFma(int64_t pairs, const uint32_t* tokens, int64_t tr, const uint16_t* weights, float* c,
             int64_t ldc, int64_t cols, bool accumulate) {
  __m512 acc[R][2];
  tile32::Zero(acc);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t q = 0; q < pairs; ++q) {
    const __m512i v0 = _mm512_load_si512(weights + q * 64);
    const __m512i v1 = _mm512_load_si512(weights + q * 64 + 32);
    const __m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16));
    const __m512 o0 = _mm512_castsi512_ps(_mm512_and_si512(v0, high));
    const __m512 e1 = _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16));
    const __m512 o1 = _mm512_castsi512_ps(_mm512_and_si512(v1, high));
    const uint32_t* t = tokens + q * tr;
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      uint32_t lo_bits = t[r] << 16, hi_bits = t[r] & 0xffff0000u;
      float xe, xo;
      std::memcpy(&xe, &lo_bits, sizeof xe);
      std::memcpy(&xo, &hi_bits, sizeof xo);
      const __m512 be = _mm512_set1_ps(xe), bo = _mm512_set1_ps(xo);
      acc[r][0] = _mm512_fmadd_ps(bo, o0, _mm512_fmadd_ps(be, e0, acc[r][0]));
      acc[r][1] = _mm512_fmadd_ps(bo, o1, _mm512_fmadd_ps(be, e1, acc[r][1]));
    }
  }
  tile32::Store(acc, c, ldc, cols, accumulate);
}

// K steps (64 bytes each) ahead of a decode tile's loads that it asks the
// cache for; past a panel's end they fall in the next panel, read next.
constexpr int64_t kHalfPrefetchSteps = 128;

// K step kk of an FP16 panel, widened: columns 0-15 and 16-31.
__attribute__((always_inline)) inline void WidenHalfStep(const uint16_t* weights, int64_t kk,
                                                         __m512& lo, __m512& hi) {
  const __m512i w = _mm512_load_si512(weights + kk * kBf16PanelLanes);
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(w));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w, 1));
}

// A half tile (HalfTileFn): each K step one 64-byte load, widened exactly to
// FP32 in registers (vcvtph2ps), FP32 FMA. Two K steps are few instructions
// for their bytes, so the core's window holds too few loads to cover
// memory's latency: the decode tiles prefetch (measured: 0.84-1.1 ms for an
// olmoe decode call without, 0.52-0.70 with).
template <int R>
void TileHalf(int64_t kc, const float* tokens, int64_t tr, const uint16_t* weights, float* c,
              int64_t ldc, int64_t cols, bool accumulate) {
  tile32::FmaTile<R>(
      kc, tokens, tr,
      [weights](int64_t kk, __m512 & lo, __m512 & hi)
          __attribute__((always_inline)) { WidenHalfStep(weights, kk, lo, hi); },
      [weights](int64_t kk) __attribute__((always_inline)) {
        _mm_prefetch(
            reinterpret_cast<const char*>(weights + (kk + kHalfPrefetchSteps) * kBf16PanelLanes),
            _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(weights +
                                                   (kk + kHalfPrefetchSteps + 1) * kBf16PanelLanes),
                     _MM_HINT_T0);
      },
      c, ldc, cols, accumulate);
}

}  // namespace

const PairTileFn kFmaTilesAvx512[kBf16TokenRows] = {
    TileFma<1>, TileFma<2>, TileFma<3>, TileFma<4>,  TileFma<5>,  TileFma<6>,
    TileFma<7>, TileFma<8>, TileFma<9>, TileFma<10>, TileFma<11>, TileFma<12>};

const HalfTileFn kHalfTilesAvx512[kBf16TokenRows] = {
    TileHalf<1>, TileHalf<2>, TileHalf<3>, TileHalf<4>,  TileHalf<5>,  TileHalf<6>,
    TileHalf<7>, TileHalf<8>, TileHalf<9>, TileHalf<10>, TileHalf<11>, TileHalf<12>};

// Two rows of K at a time: 32 columns of each (masked at the panel's edge
// and past K, so padding comes out zero), interleaved into 64 pairs by two
// two-source permutes.
void PackBf16PanelsAvx512(const uint16_t* w, int64_t ldw, int64_t k, int64_t n, uint16_t* out) {
  alignas(64) uint16_t lo_index[32], hi_index[32];
  for (int j = 0; j < 16; ++j) {
    lo_index[2 * j] = static_cast<uint16_t>(j);
    lo_index[2 * j + 1] = static_cast<uint16_t>(32 + j);
    hi_index[2 * j] = static_cast<uint16_t>(16 + j);
    hi_index[2 * j + 1] = static_cast<uint16_t>(48 + j);
  }
  const __m512i lo = _mm512_load_si512(lo_index), hi = _mm512_load_si512(hi_index);
  const int64_t stride = Bf16PanelStride(k);
  for (int64_t p = 0; p < Bf16PanelCount(n); ++p) {
    uint16_t* panel = out + p * stride;
    const int64_t j0 = p * kBf16PanelLanes;
    const int64_t cols = std::min(kBf16PanelLanes, n - j0);
    const __mmask32 mask = cols == 32 ? ~__mmask32{0} : (__mmask32{1} << cols) - 1;
    for (int64_t kk = 0; kk < k; kk += 2) {
      const __m512i a = _mm512_maskz_loadu_epi16(mask, w + kk * ldw + j0);
      const __m512i b = kk + 1 < k ? _mm512_maskz_loadu_epi16(mask, w + (kk + 1) * ldw + j0)
                                   : _mm512_setzero_si512();
      uint16_t* dst = panel + (kk / 2) * 2 * kBf16PanelLanes;
      _mm512_storeu_si512(dst, _mm512_permutex2var_epi16(a, lo, b));
      _mm512_storeu_si512(dst + 32, _mm512_permutex2var_epi16(a, hi, b));
    }
  }
}

}  // namespace bf16_panel_internal
}  // namespace gemmserve
