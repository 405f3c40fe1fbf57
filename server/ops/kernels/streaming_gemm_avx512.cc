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

// Sixteen half values widened in registers: BF16 is the top half of an FP32,
// FP16 goes through vcvtph2ps.
template <bool kBf16>
inline __m512 Widen16(const uint16_t* p, __mmask16 mask) {
  const __m256i h = _mm256_maskz_loadu_epi16(mask, p);
  if constexpr (kBf16) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_cvtph_ps(h);
  }
}

// The half-precision path with the widening fused into the multiply: per
// column block and four rows of B, each 16 columns are loaded and widened once,
// in registers, and applied to every row of A; no widened copy of B is
// written anywhere, and B is still read in address order.
template <bool kBf16>
void AccumulateHalfFused(int64_t rows, int64_t k_begin, int64_t k_end, int64_t n, const float* a,
                         int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc) {
  for (int64_t j0 = 0; j0 < n; j0 += kColumnBlock) {
    const int64_t j1 = std::min(n, j0 + kColumnBlock);
    int64_t k = k_begin;
    for (; k + 4 <= k_end; k += 4) {
      const uint16_t* w = b + k * ldb;
      for (int64_t j = j0; j < j1; j += 16) {
        const __mmask16 mask = j1 - j >= 16 ? 0xffff : static_cast<__mmask16>((1u << (j1 - j)) - 1);
        const __m512 w0 = Widen16<kBf16>(w + j, mask), w1 = Widen16<kBf16>(w + ldb + j, mask),
                     w2 = Widen16<kBf16>(w + 2 * ldb + j, mask),
                     w3 = Widen16<kBf16>(w + 3 * ldb + j, mask);
        for (int64_t i = 0; i < rows; ++i) {
          const float* ai = a + i * lda + k;
          float* ci = c + i * ldc + j;
          // Two independent pairs, then C: a shorter dependency chain than
          // four FMAs in a row onto C.
          __m512 p = _mm512_mul_ps(_mm512_set1_ps(ai[0]), w0);
          __m512 q = _mm512_mul_ps(_mm512_set1_ps(ai[2]), w2);
          p = _mm512_fmadd_ps(_mm512_set1_ps(ai[1]), w1, p);
          q = _mm512_fmadd_ps(_mm512_set1_ps(ai[3]), w3, q);
          const __m512 acc = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, ci), _mm512_add_ps(p, q));
          _mm512_mask_storeu_ps(ci, mask, acc);
        }
      }
    }
    for (; k < k_end; ++k) {
      for (int64_t j = j0; j < j1; j += 16) {
        const __mmask16 mask = j1 - j >= 16 ? 0xffff : static_cast<__mmask16>((1u << (j1 - j)) - 1);
        const __m512 w0 = Widen16<kBf16>(b + k * ldb + j, mask);
        for (int64_t i = 0; i < rows; ++i) {
          float* ci = c + i * ldc + j;
          const __m512 acc = _mm512_maskz_loadu_ps(mask, ci);
          _mm512_mask_storeu_ps(ci, mask, _mm512_fmadd_ps(_mm512_set1_ps(a[i * lda + k]), w0, acc));
        }
      }
    }
  }
}

// Few rows (decode: 1 to kFewRows tokens per expert): the same stream of B,
// eight rows of B at a time, with the row count a compile-time constant so
// every loop is unrolled and each row of C is loaded and stored once per
// eight rows of B. Measured 2x the general loop above at one row, where that
// one is bound by its per-vector overhead rather than by memory.
constexpr int64_t kFewRows = 4;

template <bool kBf16, int kRows>
void AccumulateHalfFew(int64_t k_begin, int64_t k_end, int64_t n, const float* a, int64_t lda,
                       const uint16_t* b, int64_t ldb, float* c, int64_t ldc) {
  constexpr int kDepth = 8;
  // Eight rows of B are eight streams 2 * ldb bytes apart, more than the
  // hardware prefetcher follows well: fetch the rows two steps ahead.
  constexpr int64_t kPrefetchRows = 2 * kDepth;
  int64_t k = k_begin;
  for (; k + kDepth <= k_end; k += kDepth) {
    const uint16_t* w = b + k * ldb;
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 mask = n - j >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - j)) - 1);
      if ((j & 31) == 0 && k + kPrefetchRows + kDepth <= k_end) {
        for (int t = 0; t < kDepth; ++t) {
          _mm_prefetch(reinterpret_cast<const char*>(w + (kPrefetchRows + t) * ldb + j),
                       _MM_HINT_T0);
        }
      }
      __m512 wv[kDepth];
      for (int t = 0; t < kDepth; ++t) wv[t] = Widen16<kBf16>(w + t * ldb + j, mask);
      for (int i = 0; i < kRows; ++i) {
        const float* ai = a + i * lda + k;
        __m512 p = _mm512_mul_ps(_mm512_set1_ps(ai[0]), wv[0]);
        __m512 q = _mm512_mul_ps(_mm512_set1_ps(ai[1]), wv[1]);
        for (int t = 2; t < kDepth; t += 2) {
          p = _mm512_fmadd_ps(_mm512_set1_ps(ai[t]), wv[t], p);
          q = _mm512_fmadd_ps(_mm512_set1_ps(ai[t + 1]), wv[t + 1], q);
        }
        float* ci = c + i * ldc + j;
        _mm512_mask_storeu_ps(
            ci, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, ci), _mm512_add_ps(p, q)));
      }
    }
  }
  if (k < k_end) AccumulateHalfFused<kBf16>(kRows, k, k_end, n, a, lda, b, ldb, c, ldc);
}

template <bool kBf16>
void AccumulateHalf(int64_t rows, int64_t k_begin, int64_t k_end, int64_t n, const float* a,
                    int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc) {
  switch (rows) {
    case 1: return AccumulateHalfFew<kBf16, 1>(k_begin, k_end, n, a, lda, b, ldb, c, ldc);
    case 2: return AccumulateHalfFew<kBf16, 2>(k_begin, k_end, n, a, lda, b, ldb, c, ldc);
    case 3: return AccumulateHalfFew<kBf16, 3>(k_begin, k_end, n, a, lda, b, ldb, c, ldc);
    case 4: return AccumulateHalfFew<kBf16, 4>(k_begin, k_end, n, a, lda, b, ldb, c, ldc);
    default: return AccumulateHalfFused<kBf16>(rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
  }
}
static_assert(kFewRows == 4, "AccumulateHalf's switch covers 1..kFewRows rows");

}  // namespace avx512
}  // namespace

void AccumulateAvx512(DataType b_type, int64_t rows, int64_t k_begin, int64_t k_end, int64_t n,
                      const float* a, int64_t lda, const void* b, int64_t ldb, float* c,
                      int64_t ldc) {
  const auto* half = static_cast<const uint16_t*>(b);
  switch (b_type) {
    case DataType::kBF16:
      return avx512::AccumulateHalf<true>(rows, k_begin, k_end, n, a, lda, half, ldb, c, ldc);
    case DataType::kFP16:
      return avx512::AccumulateHalf<false>(rows, k_begin, k_end, n, a, lda, half, ldb, c, ldc);
    default:
      return avx512::AccumulateFloat(b_type, rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
  }
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
