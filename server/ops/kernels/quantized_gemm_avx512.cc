// The quantized decode kernel and the BF16-panel dequantization built for
// AVX-512 (compiled with -mavx512f -mavx512bw -mavx512vl -mfma -mf16c; they
// run only where the kernel set, kernel_set.h, names this build). The panels'
// rounding by vcvtne2ps2bf16 is the AVX512-BF16 build's
// (quantized_gemm_avx512bf16.cc).
#include <immintrin.h>

// GCC 12 flags the deliberately undefined register inside _mm512_cvtph_ps as
// "maybe uninitialized" (a known false positive of its intrinsics header).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>

#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/ops/kernels/quantized_gemm.h"
#include "server/ops/kernels/quantized_layout.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace streaming_internal {
namespace {
namespace avx512 {

#include "server/ops/kernels/half_rows_avx512.inc"

#include "server/ops/kernels/streaming_gemm_impl.inc"  // the row kernels it shares
#include "server/ops/kernels/quantized_gemm_impl.inc"

// The streaming build's register blocking (streaming_gemm_avx512.cc): eight
// rows of W per step in registers, eight rows of A per group, prefetch two
// steps ahead.
constexpr int kDepth = 8;
constexpr int kGroupRows = 8;
constexpr int64_t kPrefetchRows = 2 * kDepth;

#include "server/ops/kernels/quantized_avx512_impl.inc"

#include "server/ops/kernels/fused_rows_avx512.inc"

// The quantized path with the dequantization in registers
// (AccumulateFusedRows): each 16 columns of four rows of W are dequantized
// once and applied to every row of A.
template <QuantizedType kType, bool kPerColumn, bool kZero, DataType kValue>
void AccumulateQuantizedFused(int64_t rows, int64_t k_begin, int64_t k_end, const float* a,
                              int64_t lda, const QuantizedMatrix& w, float* c, int64_t ldc) {
  AccumulateFusedRows(
      rows, k_begin, k_end, w.n, a, lda, c, ldc, [&w](int64_t k) { return RowOf<kType>(w, k); },
      [](const QuantizedRow& row, int64_t j, __mmask16 mask, int count) {
        return Dequantize16<kType, kPerColumn, kZero, kValue>(row, j, mask, count);
      });
}

// Eight rows of W that share their scales (one K block; scales per column or
// one for the block): RowGroup's register kernel for quantized W. Per 16
// columns the scale (and zero point) is loaded once, the eight rows are
// dequantized into registers and applied to kRows rows of A, and the sums
// added to C once; the eight rows' bytes are prefetched two steps ahead.
//
// kFactor (FP32 values, scales and activations in ScalesFactorable's
// range): the scale is applied to the sums rather than to every weight, as
// sum_t a_t (q_t - z) s = s sum_t a_t (q_t - z) holds there up to one FP32
// rounding per term, the bound of rounding (q - z) s to FP32 first; that
// leaves a convert and an FMA per weight. Otherwise every weight is
// dequantized and rounded to the value type, as DequantizeLinear means.
template <QuantizedType kType, bool kPerColumn, bool kZero, DataType kValue, bool kFactor,
          int kRows>
void QuantizedRowGroup(const QuantizedMatrix& w, int64_t k, int64_t k_end, const float* a,
                       int64_t lda, float* c, int64_t ldc, bool prefetch) {
  static_assert(!kFactor || kValue == DataType::kFP32);
  const int64_t n = w.n;
  const QuantizedRow first = RowOf<kType>(w, k);
  const bool ahead = prefetch && k + kPrefetchRows + kDepth <= k_end;
  const uint8_t* next = first.data + kPrefetchRows * n;
  const __m512 one_scale = _mm512_set1_ps(first.scale[0]);
  const __m512 one_zero = kZero && !kPerColumn ? _mm512_set1_ps(first.zero[0]) : __m512{};
  for (int64_t j = 0; j < n; j += 16) {
    const int count = static_cast<int>(std::min<int64_t>(16, n - j));
    const __mmask16 mask = count == 16 ? 0xffff : static_cast<__mmask16>((1u << count) - 1);
    if (ahead && j % 64 == 0) {
      for (int t = 0; t < kDepth; ++t) {
        _mm_prefetch(reinterpret_cast<const char*>(next + t * n + j), _MM_HINT_T0);
      }
    }
    const __m512 scale = kPerColumn ? _mm512_maskz_loadu_ps(mask, first.scale + j) : one_scale;
    __m512 zero = _mm512_setzero_ps();
    if constexpr (kZero) zero = kPerColumn ? _mm512_maskz_loadu_ps(mask, first.zero + j) : one_zero;
    __m512 wv[kDepth];
    for (int t = 0; t < kDepth; ++t) {
      wv[t] = LoadIntegers16<kType>(first.data + t * n, j, mask, count);
      if constexpr (kZero) wv[t] = _mm512_sub_ps(wv[t], zero);
      if constexpr (!kFactor) wv[t] = ScaleAndRound<kValue>(wv[t], scale);
    }
    for (int i = 0; i < kRows; ++i) {
      const __m512 sum = DepthSum(a + i * lda + k, wv);
      float* ci = c + i * ldc + j;
      const __m512 ci_old = _mm512_maskz_loadu_ps(mask, ci);
      _mm512_mask_storeu_ps(
          ci, mask, kFactor ? _mm512_fmadd_ps(sum, scale, ci_old) : _mm512_add_ps(ci_old, sum));
    }
  }
}

// The 4-bit types' sixteen values as floats, indexed by the nibble.
template <QuantizedType kType>
inline __m512 NibbleTable() {
  if constexpr (kType == QuantizedType::kInt4) {
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
  } else {
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  }
}

// Columns j .. j + 31 in two orders: `lo` and `hi` hold columns j .. j + 15
// and j + 16 .. j + 31, `even` and `odd` columns j, j + 2, ... and j + 1,
// j + 3, ... (the order in which 4-bit bytes decode).
inline void SplitEvenOdd(__m512 lo, __m512 hi, __m512& even, __m512& odd) {
  even = _mm512_permutex2var_ps(
      lo, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), hi);
  odd = _mm512_permutex2var_ps(
      lo, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), hi);
}

inline void MergeEvenOdd(__m512 even, __m512 odd, __m512& lo, __m512& hi) {
  lo = _mm512_permutex2var_ps(
      even, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), odd);
  hi = _mm512_permutex2var_ps(
      even, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31), odd);
}

// QuantizedRowGroup for 4-bit W, 32 columns (16 bytes) per step. The bytes
// are widened to one dword each; vpermps reads only an index's low four bits,
// so the low nibbles index NibbleTable as they are and the high ones after a
// shift by four: two vectors of values (the even columns and the odd ones)
// in four instructions, with INT4's sign in the table. Scales and zero
// points are put in the same order once per step, and the sums back in
// column order once per row of A.
template <QuantizedType kType, bool kPerColumn, bool kZero, DataType kValue, bool kFactor,
          int kRows>
void Quantized4RowGroup(const QuantizedMatrix& w, int64_t k, int64_t k_end, const float* a,
                        int64_t lda, float* c, int64_t ldc, bool prefetch) {
  static_assert(!kFactor || kValue == DataType::kFP32);
  const int64_t n = w.n, row_bytes = n / 2;  // n even: every row starts on a byte
  const QuantizedRow first = RowOf<kType>(w, k);
  const bool ahead = prefetch && k + kPrefetchRows + kDepth <= k_end;
  const uint8_t* next = first.data + kPrefetchRows * row_bytes;
  const __m512 table = NibbleTable<kType>();
  for (int64_t j = 0; j < n; j += 32) {
    const int count = static_cast<int>(std::min<int64_t>(32, n - j));  // even
    const __mmask16 bytes = count == 32 ? 0xffff : static_cast<__mmask16>((1u << (count / 2)) - 1);
    const __mmask16 lo_mask = count >= 16 ? 0xffff : static_cast<__mmask16>((1u << count) - 1);
    const __mmask16 hi_mask = count == 32  ? 0xffff
                              : count > 16 ? static_cast<__mmask16>((1u << (count - 16)) - 1)
                                           : 0;
    if (ahead && j % 128 == 0) {
      for (int t = 0; t < kDepth; ++t) {
        _mm_prefetch(reinterpret_cast<const char*>(next + t * row_bytes + j / 2), _MM_HINT_T0);
      }
    }
    __m512 scale_even, scale_odd, zero_even = _mm512_setzero_ps(), zero_odd = zero_even;
    if constexpr (kPerColumn) {
      SplitEvenOdd(_mm512_maskz_loadu_ps(lo_mask, first.scale + j),
                   _mm512_maskz_loadu_ps(hi_mask, first.scale + j + 16), scale_even, scale_odd);
      if constexpr (kZero) {
        SplitEvenOdd(_mm512_maskz_loadu_ps(lo_mask, first.zero + j),
                     _mm512_maskz_loadu_ps(hi_mask, first.zero + j + 16), zero_even, zero_odd);
      }
    } else {
      scale_even = scale_odd = _mm512_set1_ps(first.scale[0]);
      if constexpr (kZero) zero_even = zero_odd = _mm512_set1_ps(first.zero[0]);
    }
    __m512 we[kDepth], wo[kDepth];
    for (int t = 0; t < kDepth; ++t) {
      const __m512i b =
          _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(bytes, first.data + t * row_bytes + j / 2));
      we[t] = _mm512_permutexvar_ps(b, table);
      wo[t] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), table);
      if constexpr (kZero) {
        we[t] = _mm512_sub_ps(we[t], zero_even);
        wo[t] = _mm512_sub_ps(wo[t], zero_odd);
      }
      if constexpr (!kFactor) {
        we[t] = ScaleAndRound<kValue>(we[t], scale_even);
        wo[t] = ScaleAndRound<kValue>(wo[t], scale_odd);
      }
    }
    for (int i = 0; i < kRows; ++i) {
      const float* ai = a + i * lda + k;
      __m512 pe = _mm512_mul_ps(_mm512_set1_ps(ai[0]), we[0]);
      __m512 po = _mm512_mul_ps(_mm512_set1_ps(ai[0]), wo[0]);
      __m512 qe = _mm512_mul_ps(_mm512_set1_ps(ai[1]), we[1]);
      __m512 qo = _mm512_mul_ps(_mm512_set1_ps(ai[1]), wo[1]);
      for (int t = 2; t < kDepth; t += 2) {
        const __m512 a0 = _mm512_set1_ps(ai[t]), a1 = _mm512_set1_ps(ai[t + 1]);
        pe = _mm512_fmadd_ps(a0, we[t], pe);
        po = _mm512_fmadd_ps(a0, wo[t], po);
        qe = _mm512_fmadd_ps(a1, we[t + 1], qe);
        qo = _mm512_fmadd_ps(a1, wo[t + 1], qo);
      }
      pe = _mm512_add_ps(pe, qe);
      po = _mm512_add_ps(po, qo);
      if constexpr (kFactor) {
        pe = _mm512_mul_ps(pe, scale_even);
        po = _mm512_mul_ps(po, scale_odd);
      }
      __m512 lo, hi;
      MergeEvenOdd(pe, po, lo, hi);
      float* ci = c + i * ldc + j;
      _mm512_mask_storeu_ps(ci, lo_mask, _mm512_add_ps(_mm512_maskz_loadu_ps(lo_mask, ci), lo));
      _mm512_mask_storeu_ps(ci + 16, hi_mask,
                            _mm512_add_ps(_mm512_maskz_loadu_ps(hi_mask, ci + 16), hi));
    }
  }
}

// The register kernel for kRows rows of A and eight rows of W (4-bit:
// Quantized4RowGroup), and one row of W for every row of A: what
// quantized_blocks_impl.inc calls.
template <QuantizedType kType, bool kPerColumn, bool kZero, DataType kValue, bool kFactor,
          int kRows>
void QuantizedRowGroupFor(const QuantizedMatrix& w, int64_t k, int64_t k_end, const float* a,
                          int64_t lda, float* c, int64_t ldc, bool prefetch) {
  if constexpr (IsFourBit(kType)) {
    Quantized4RowGroup<kType, kPerColumn, kZero, kValue, kFactor, kRows>(w, k, k_end, a, lda, c,
                                                                         ldc, prefetch);
  } else {
    QuantizedRowGroup<kType, kPerColumn, kZero, kValue, kFactor, kRows>(w, k, k_end, a, lda, c, ldc,
                                                                        prefetch);
  }
}

template <QuantizedType kType, bool kPerColumn, bool kZero, DataType kValue>
void QuantizedOneRow(int64_t rows, const QuantizedMatrix& w, int64_t r, const float* a, int64_t lda,
                     float* c, int64_t ldc) {
  AccumulateQuantizedFused<kType, kPerColumn, kZero, kValue>(rows, r, r + 1, a, lda, w, c, ldc);
}

#include "server/ops/kernels/quantized_blocks_impl.inc"

// The template for the matrix's layout and value type.
template <QuantizedType kType, bool kPerColumn, bool kZero>
void FusedForValue(int64_t rows, int64_t k_begin, int64_t k_end, const float* a, int64_t lda,
                   const QuantizedMatrix& w, float* c, int64_t ldc) {
  switch (w.value_type) {
    case DataType::kBF16:
      return AccumulateQuantizedFused<kType, kPerColumn, kZero, DataType::kBF16>(
          rows, k_begin, k_end, a, lda, w, c, ldc);
    case DataType::kFP16:
      return AccumulateQuantizedFused<kType, kPerColumn, kZero, DataType::kFP16>(
          rows, k_begin, k_end, a, lda, w, c, ldc);
    default:
      return AccumulateQuantizedFused<kType, kPerColumn, kZero, DataType::kFP32>(
          rows, k_begin, k_end, a, lda, w, c, ldc);
  }
}

template <QuantizedType kType>
void FusedForType(int64_t rows, int64_t k_begin, int64_t k_end, const float* a, int64_t lda,
                  const QuantizedMatrix& w, float* c, int64_t ldc, bool factor) {
  WithScaleLayout(w, [&](auto per_column, auto zero) {
    constexpr bool kPerColumn = decltype(per_column)::value, kZero = decltype(zero)::value;
    // One scale per row (blocks shorter than a step): four rows at a time.
    if (!kPerColumn && w.block_rows < kDepth) {
      return FusedForValue<kType, false, kZero>(rows, k_begin, k_end, a, lda, w, c, ldc);
    }
    // Scales per column, or one per tensor or block of rows.
    BlocksForValue<kType, kPerColumn, kZero>(rows, k_begin, k_end, a, lda, w, c, ldc, factor);
  });
}

// Whether every activation of rows x [k_begin, k_end) is within
// kFactorableActivation (NaN is not).
bool ActivationsFactorable(int64_t rows, int64_t k_begin, int64_t k_end, const float* a,
                           int64_t lda) {
  const __m512 limit = _mm512_set1_ps(kFactorableActivation);
  for (int64_t i = 0; i < rows; ++i) {
    const float* ai = a + i * lda;
    __mmask16 bad = 0;
    for (int64_t k = k_begin; k < k_end; k += 16) {
      const __mmask16 mask =
          k_end - k >= 16 ? 0xffff : static_cast<__mmask16>((1u << (k_end - k)) - 1);
      const __m512 v = _mm512_abs_ps(_mm512_maskz_loadu_ps(mask, ai + k));
      bad |= _mm512_mask_cmp_ps_mask(mask, v, limit, _CMP_NLE_UQ);  // > limit, or NaN
    }
    if (bad != 0) return false;
  }
  return true;
}

void AccumulateQuantizedAvx512(int64_t rows, int64_t k_begin, int64_t k_end, const float* a,
                               int64_t lda, const QuantizedMatrix& w, float* c, int64_t ldc) {
  if (!QuantizedFusedApplies(w))
    return AccumulateQuantized(rows, k_begin, k_end, a, lda, w, c, ldc);
  const bool factor = w.value_type == DataType::kFP32 && w.scales_factorable &&
                      ActivationsFactorable(rows, k_begin, k_end, a, lda);
  WithQuantizedType(w.type, [&](auto type) {
    FusedForType<decltype(type)::value>(rows, k_begin, k_end, a, lda, w, c, ldc, factor);
  });
}

template <QuantizedType kType, bool kPerColumn, bool kZero>
void DequantizePanelsAs(const QuantizedMatrix& w, int64_t k_begin, int64_t k_end, int64_t j0,
                        int64_t width, uint16_t* out) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  DequantizePanelsWith<kType, kPerColumn, kZero, DataType::kBF16>(
      w, k_begin, k_end, j0, width, out, [high](__m512 v0, __m512 v1, __mmask16 mask) {
        // (v1 & high) | (v0 >> 16): the rounded values' top halves.
        const __m512i word = _mm512_ternarylogic_epi32(
            _mm512_castps_si512(v1), high, _mm512_srli_epi32(_mm512_castps_si512(v0), 16), 0xea);
        return _mm512_maskz_mov_epi32(mask, word);
      });
}

}  // namespace avx512
}  // namespace

void QuantizedAvx512(int64_t rows, int64_t k_begin, int64_t k_end, const float* a, int64_t lda,
                     const QuantizedMatrix& w, float* c, int64_t ldc) {
  avx512::AccumulateQuantizedAvx512(rows, k_begin, k_end, a, lda, w, c, ldc);
}

void DequantizeBf16PanelsAvx512(const QuantizedMatrix& w, int64_t k_begin, int64_t k_end,
                                int64_t j0, int64_t width, uint16_t* out) {
  // 4-bit rows must start on a byte, and the tile on an even column.
  if (!QuantizedFusedApplies(w) || j0 % 2 != 0) {
    return DequantizeBf16PanelsGeneric(w, k_begin, k_end, j0, width, out);
  }
  WithQuantizedType(w.type, [&](auto type) {
    WithScaleLayout(w, [&](auto per_column, auto zero) {
      avx512::DequantizePanelsAs<decltype(type)::value, decltype(per_column)::value,
                                 decltype(zero)::value>(w, k_begin, k_end, j0, width, out);
    });
  });
}

}  // namespace streaming_internal
}  // namespace gemmserve
