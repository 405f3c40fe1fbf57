#include "server/ops/kernels/bf16_panel_gemm.h"

// GCC 12's AVX-512 shift intrinsics start from an undefined vector and warn
// about it where they are inlined (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/ops/kernels/cpu_features.h"
#include "server/ops/kernels/kernel_set.h"
#include "server/ops/kernels/tile32.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

std::atomic<bool> g_fma_only{false};

bool HaveAvx512F() { return Kernels().avx512; }

bool HaveAvx512Bf16() { return Kernels().avx512_bf16; }

constexpr int kRows = static_cast<int>(kBf16TokenRows);

// The tile: rows x cols of C (at most 12 x 32) += or = tokens * weights over
// `pairs` pairs of K. tokens: [pairs][tr] words (tr >= R rows per pair);
// weights: [pairs][64].
// R: the rows computed (the valid ones: a decode call with one token row
// does one row's work, not twelve).
template <int R>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void TileNative(
    int64_t pairs, const uint32_t* tokens, int64_t tr, const uint16_t* weights, float* c,
    int64_t ldc, int64_t cols, bool accumulate) {
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

// The same tile with the pairs widened exactly to FP32 and FP32 FMA (IEEE:
// subnormals kept). tokens: [pairs][tr] words, as for the native tile.
template <int R>
__attribute__((target("avx512f,avx512bw"))) void TileFma(int64_t pairs, const uint32_t* tokens,
                                                         int64_t tr, const uint16_t* weights,
                                                         float* c, int64_t ldc, int64_t cols,
                                                         bool accumulate) {
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

// FP16 on panels of its own, [K][32] halves: each K step one 64-byte load,
// widened exactly to FP32 in registers (vcvtph2ps), FP32 FMA.
// tokens: [kc][tr] floats (tr >= R rows per K step), widened when packed.
// K steps (64 bytes each) ahead of a decode tile's loads that it asks the
// cache for; past a panel's end they fall in the next panel, read next.
constexpr int64_t kHalfPrefetchSteps = 128;

// K step kk of an FP16 panel, widened: columns 0-15 and 16-31.
__attribute__((target("avx512f"), always_inline)) inline void WidenHalfStep(const uint16_t* weights,
                                                                            int64_t kk, __m512& lo,
                                                                            __m512& hi) {
  const __m512i w = _mm512_load_si512(weights + kk * kBf16PanelLanes);
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(w));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w, 1));
}

template <int R>
__attribute__((target("avx512f"))) void TileHalf(int64_t kc, const float* tokens, int64_t tr,
                                                 const uint16_t* weights, float* c, int64_t ldc,
                                                 int64_t cols, bool accumulate) {
  __m512 acc[R][2];
  tile32::Zero(acc);
  int64_t kk = 0;
  if constexpr (R <= 4) {
    // Few rows (decode): odd K steps in a second set of accumulators, so
    // R chains alone do not wait on the FMA latency.
    __m512 odd[R][2];
    tile32::Zero(odd);
    for (; kk + 2 <= kc; kk += 2) {
      // Two K steps are few instructions for their bytes, so the core's
      // window holds too few loads to cover memory's latency (measured:
      // 0.84-1.1 ms for an olmoe decode call without, 0.52-0.70 with).
      _mm_prefetch(
          reinterpret_cast<const char*>(weights + (kk + kHalfPrefetchSteps) * kBf16PanelLanes),
          _MM_HINT_T0);
      _mm_prefetch(
          reinterpret_cast<const char*>(weights + (kk + kHalfPrefetchSteps + 1) * kBf16PanelLanes),
          _MM_HINT_T0);
      __m512 w0, w1, v0, v1;
      WidenHalfStep(weights, kk, w0, w1);
      WidenHalfStep(weights, kk + 1, v0, v1);
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
    tile32::Add(acc, odd);
  }
  for (; kk < kc; ++kk) {
    __m512 w0, w1;
    WidenHalfStep(weights, kk, w0, w1);
    const float* t = tokens + kk * tr;
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(t[r]);
      acc[r][0] = _mm512_fmadd_ps(x, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, w1, acc[r][1]);
    }
  }
  tile32::Store(acc, c, ldc, cols, accumulate);
}

using HalfTileFn = void (*)(int64_t, const float*, int64_t, const uint16_t*, float*, int64_t,
                            int64_t, bool);
constexpr HalfTileFn kHalfTiles[kRows] = {TileHalf<1>, TileHalf<2>,  TileHalf<3>,  TileHalf<4>,
                                          TileHalf<5>, TileHalf<6>,  TileHalf<7>,  TileHalf<8>,
                                          TileHalf<9>, TileHalf<10>, TileHalf<11>, TileHalf<12>};

using TileFn = void (*)(int64_t, const uint32_t*, int64_t, const uint16_t*, float*, int64_t,
                        int64_t, bool);

// Tiles for 1..12 rows.
constexpr TileFn kNativeTiles[kRows] = {
    TileNative<1>, TileNative<2>, TileNative<3>, TileNative<4>,  TileNative<5>,  TileNative<6>,
    TileNative<7>, TileNative<8>, TileNative<9>, TileNative<10>, TileNative<11>, TileNative<12>};
constexpr TileFn kFmaTiles[kRows] = {TileFma<1>, TileFma<2>,  TileFma<3>,  TileFma<4>,
                                     TileFma<5>, TileFma<6>,  TileFma<7>,  TileFma<8>,
                                     TileFma<9>, TileFma<10>, TileFma<11>, TileFma<12>};

// Token rows per pair in the token panels of an m-row call: 12, or m when
// fewer (decode), so a panel holds only its rows and stays in L1.
int64_t TokenStride(int64_t m) { return std::min<int64_t>(m, kRows); }

// Rows [0, m) of X (gathered) from K column k0 on, as token panels of
// `steps` steps: panel t at out + t * steps * TokenStride(m), [steps][tr];
// step q of a row is put(its source row, q), rows past m are zero.
template <typename Word, typename Put>
void PackTokenPanels(int64_t m, int64_t steps, int64_t k0, const uint16_t* x, int64_t ldx,
                     const int64_t* a_rows, Word* out, Put put) {
  const int64_t tr = TokenStride(m);
  const int64_t panels = (m + kRows - 1) / kRows;
  for (int64_t t = 0; t < panels; ++t) {
    Word* panel = out + t * steps * tr;
    const int64_t rows = std::min<int64_t>(kRows, m - t * kRows);
    for (int64_t r = 0; r < tr; ++r) {
      if (r >= rows) {
        for (int64_t q = 0; q < steps; ++q) panel[q * tr + r] = Word{0};
        continue;
      }
      const int64_t i = t * kRows + r;
      const uint16_t* src = x + (a_rows ? a_rows[i] : i) * ldx + k0;
      for (int64_t q = 0; q < steps; ++q) panel[q * tr + r] = put(src, q);
    }
  }
}

// BF16, K [k0, k0 + kb): each step a pair of K as one word (odd K: the
// last pair's second is zero).
void PackTokenPairs(int64_t m, int64_t k0, int64_t kb, const uint16_t* x, int64_t ldx,
                    const int64_t* a_rows, uint32_t* out) {
  PackTokenPanels(m, (kb + 1) / 2, k0, x, ldx, a_rows, out, [kb](const uint16_t* src, int64_t q) {
    const uint32_t second = 2 * q + 1 < kb ? src[2 * q + 1] : 0;
    return uint32_t{src[2 * q]} | second << 16;
  });
}

// FP16, K [k0, k0 + kc): each step one value widened exactly to FP32.
void PackTokensHalf(int64_t m, int64_t k0, int64_t kc, const uint16_t* x, int64_t ldx,
                    const int64_t* a_rows, float* out) {
  PackTokenPanels(m, kc, k0, x, ldx, a_rows, out,
                  [](const uint16_t* src, int64_t q) { return HalfToFloat(src[q]); });
}

}  // namespace

bool Bf16PanelsSupported() { return HaveAvx512F(); }

// Two rows of K at a time: 32 columns of each (masked at the panel's edge
// and past K, so padding comes out zero), interleaved into 64 pairs by two
// two-source permutes.
__attribute__((target("avx512f,avx512bw"))) void PackBf16PanelsAvx512(const uint16_t* w,
                                                                      int64_t ldw, int64_t k,
                                                                      int64_t n, uint16_t* out) {
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

void PackBf16Panels(const uint16_t* w, int64_t ldw, int64_t k, int64_t n, uint16_t* out) {
  if (HaveAvx512F()) return PackBf16PanelsAvx512(w, ldw, k, n, out);
  const int64_t stride = Bf16PanelStride(k);
  for (int64_t p = 0; p < Bf16PanelCount(n); ++p) {
    uint16_t* panel = out + p * stride;
    std::fill(panel, panel + stride, uint16_t{0});
    const int64_t j0 = p * kBf16PanelLanes;
    const int64_t cols = std::min(kBf16PanelLanes, n - j0);
    for (int64_t kk = 0; kk < k; ++kk) {
      const uint16_t* src = w + kk * ldw + j0;
      uint16_t* dst = panel + (kk / 2) * 2 * kBf16PanelLanes + (kk % 2);
      for (int64_t j = 0; j < cols; ++j) dst[2 * j] = src[j];
    }
  }
}

int Bf16MinExponent(const uint16_t* data, int64_t count) {
  int min = 255;
  for (int64_t i = 0; i < count; ++i) {
    const uint16_t bits = data[i] & 0x7fff;
    if (bits == 0) continue;
    min = std::min(min, static_cast<int>(bits >> 7));
  }
  return min;
}

// The K block of a call: kBf16KBlock, or all of K when the rows fit one
// tile (decode), so each weight panel streams once, front to back.
int64_t CallKBlock(int64_t m, int64_t k) {
  return m <= kRows ? std::max<int64_t>(k, 1) : kBf16KBlock;
}

int64_t Bf16PanelScratchWords(int64_t m, int64_t k) {
  const int64_t panels = (m + kRows - 1) / kRows;
  const int64_t pairs = (std::min(k, CallKBlock(m, k)) + 1) / 2;
  return (panels * pairs * kRows + 15) / 16 * 16;
}

void Bf16PanelGemm(int64_t m, int64_t k, int64_t n, const uint16_t* x, int64_t ldx,
                   const int64_t* a_rows, const uint16_t* panels, int weights_min_exponent,
                   int64_t panel_begin, int64_t panel_end, float* c, int64_t ldc,
                   uint32_t* scratch) {
  panel_end = std::min(panel_end, Bf16PanelCount(n));
  if (m <= 0 || panel_begin >= panel_end) return;
  const int64_t j_first = panel_begin * kBf16PanelLanes;
  const int64_t width = std::min(n, panel_end * kBf16PanelLanes) - j_first;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + width, 0.0f);
    return;
  }
  // The native path where no subnormal can arise (file comment of the header).
  bool native = HaveAvx512Bf16() && !g_fma_only.load(std::memory_order_relaxed);
  if (native) {
    int tokens_min = 255;
    for (int64_t i = 0; i < m && tokens_min + weights_min_exponent >= 142; ++i) {
      tokens_min = std::min(tokens_min, Bf16MinExponent(x + (a_rows ? a_rows[i] : i) * ldx, k));
    }
    native = tokens_min + weights_min_exponent >= 142;
  }
  const TileFn* tiles = native ? kNativeTiles : kFmaTiles;
  const int64_t stride = Bf16PanelStride(k);
  const int64_t token_panels = (m + kRows - 1) / kRows, tr = TokenStride(m);
  const int64_t k_block = CallKBlock(m, k);
  for (int64_t k0 = 0; k0 < k; k0 += k_block) {
    const int64_t kb = std::min(k_block, k - k0), pairs = (kb + 1) / 2;
    PackTokenPairs(m, k0, kb, x, ldx, a_rows, scratch);
    for (int64_t p = panel_begin; p < panel_end; ++p) {
      const uint16_t* w = panels + p * stride + (k0 / 2) * 2 * kBf16PanelLanes;
      const int64_t cols = std::min(kBf16PanelLanes, n - p * kBf16PanelLanes);
      for (int64_t t = 0; t < token_panels; ++t) {
        const int64_t rows = std::min<int64_t>(kRows, m - t * kRows);
        tiles[rows - 1](pairs, scratch + t * pairs * tr, tr, w,
                        c + t * kRows * ldc + (p * kBf16PanelLanes - j_first), ldc, cols, k0 > 0);
      }
    }
  }
}

void PackFp16Panels(const uint16_t* w, int64_t ldw, int64_t k, int64_t n, uint16_t* out) {
  const int64_t stride = Fp16PanelStride(k);
  for (int64_t p = 0; p < Bf16PanelCount(n); ++p) {
    uint16_t* panel = out + p * stride;
    const int64_t j0 = p * kBf16PanelLanes;
    const int64_t cols = std::min(kBf16PanelLanes, n - j0);
    for (int64_t kk = 0; kk < k; ++kk) {
      std::copy(w + kk * ldw + j0, w + kk * ldw + j0 + cols, panel + kk * kBf16PanelLanes);
      std::fill(panel + kk * kBf16PanelLanes + cols, panel + (kk + 1) * kBf16PanelLanes,
                uint16_t{0});
    }
  }
}

int64_t Fp16PanelScratchWords(int64_t m, int64_t k) {
  const int64_t panels = (m + kRows - 1) / kRows;
  const int64_t kc = std::min(k, CallKBlock(m, k));
  return (panels * kc * kRows + 15) / 16 * 16;
}

void Fp16PanelGemm(int64_t m, int64_t k, int64_t n, const uint16_t* x, int64_t ldx,
                   const int64_t* a_rows, const uint16_t* panels, int64_t panel_begin,
                   int64_t panel_end, float* c, int64_t ldc, uint32_t* scratch) {
  panel_end = std::min(panel_end, Bf16PanelCount(n));
  if (m <= 0 || panel_begin >= panel_end) return;
  const int64_t j_first = panel_begin * kBf16PanelLanes;
  const int64_t width = std::min(n, panel_end * kBf16PanelLanes) - j_first;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + width, 0.0f);
    return;
  }
  auto* tokens = reinterpret_cast<float*>(scratch);
  const int64_t stride = Fp16PanelStride(k);
  const int64_t token_panels = (m + kRows - 1) / kRows, tr = TokenStride(m);
  const int64_t k_block = CallKBlock(m, k);
  for (int64_t k0 = 0; k0 < k; k0 += k_block) {
    const int64_t kc = std::min(k_block, k - k0);
    PackTokensHalf(m, k0, kc, x, ldx, a_rows, tokens);
    for (int64_t p = panel_begin; p < panel_end; ++p) {
      const uint16_t* w = panels + p * stride + k0 * kBf16PanelLanes;
      const int64_t cols = std::min(kBf16PanelLanes, n - p * kBf16PanelLanes);
      for (int64_t t = 0; t < token_panels; ++t) {
        const int64_t rows = std::min<int64_t>(kRows, m - t * kRows);
        kHalfTiles[rows - 1](kc, tokens + t * kc * tr, tr, w,
                             c + t * kRows * ldc + (p * kBf16PanelLanes - j_first), ldc, cols,
                             k0 > 0);
      }
    }
  }
}

const char* Bf16PanelIsa() {
  if (!HaveAvx512F()) return "none";
  return HaveAvx512Bf16() && !g_fma_only.load() ? "avx512_bf16" : "avx512f";
}

namespace {

std::atomic<Bf16Panels> g_bf16_panels{Bf16Panels::kAuto};

// Flops per second of 12 independent accumulations over `steps` steps:
// vdpbf16ps (64 flops each, kDot) or FP32 FMA (32), in registers only. Only
// run where AVX512-BF16 exists, so one target serves both.
template <bool kDot>
__attribute__((target("avx512f,avx512bf16"), noinline)) double Rate(int64_t steps) {
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

// The best of five alternating runs of each: a shared machine's stalls
// only ever make a run slower.
double MeasureNativeSpeedup() {
  if (!HaveAvx512Bf16()) return 0;
  double dot = 0, fma = 0;
  for (int r = 0; r < 5; ++r) {
    dot = std::max(dot, Rate<true>(20000));
    fma = std::max(fma, Rate<false>(20000));
  }
  return dot / std::max(fma, 1.0);
}

}  // namespace

void SetBf16Panels(Bf16Panels mode) { g_bf16_panels.store(mode); }

bool ParseBf16Panels(const char* text, Bf16Panels* mode) {
  const std::string t = text;
  if (t == "auto")
    *mode = Bf16Panels::kAuto;
  else if (t == "on")
    *mode = Bf16Panels::kOn;
  else if (t == "off")
    *mode = Bf16Panels::kOff;
  else
    return false;
  return true;
}

double Bf16NativeSpeedup() {
  static const double speedup = MeasureNativeSpeedup();
  return speedup;
}

bool Bf16PanelsPreferred() {
  if (!Bf16PanelsSupported()) return false;
  switch (g_bf16_panels.load()) {
    case Bf16Panels::kOn: return true;
    case Bf16Panels::kOff: return false;
    case Bf16Panels::kAuto: break;
  }
  return Bf16NativeSpeedup() >= kBf16NativeMinSpeedup;
}

std::string Bf16PanelsChoice() {
  if (!Bf16PanelsSupported()) return "row-major (no AVX-512)";
  const char* layout = Bf16PanelsPreferred() ? "pair panels" : "row-major";
  switch (g_bf16_panels.load()) {
    case Bf16Panels::kOn: return absl::StrCat(layout, " (--bf16_panels=on)");
    case Bf16Panels::kOff: return absl::StrCat(layout, " (--bf16_panels=off)");
    case Bf16Panels::kAuto: break;
  }
  return absl::StrFormat("%s (auto: vdpbf16ps does %.2fx FP32 FMA's flops here; panels from %.2fx)",
                         layout, Bf16NativeSpeedup(), kBf16NativeMinSpeedup);
}

namespace bf16_panel_internal {
void ForceFmaPath(bool fma_only) { g_fma_only.store(fma_only); }
bool HaveNativeBf16() { return HaveAvx512Bf16(); }
}  // namespace bf16_panel_internal

}  // namespace gemmserve
