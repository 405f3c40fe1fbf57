// The quantized decode kernel built for AVX2 (compiled with -mavx2 -mfma
// -mf16c; it runs only where the kernel set, kernel_set.h, names this
// build): the AVX-512 build's register kernel at half the width.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "server/ops/kernels/quantized_gemm.h"
#include "server/ops/kernels/quantized_layout.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace streaming_internal {
namespace {
namespace avx2 {

#include "server/ops/kernels/half_rows_avx2.inc"

#include "server/ops/kernels/streaming_gemm_impl.inc"
#include "server/ops/kernels/quantized_gemm_impl.inc"
constexpr int kDepth = 8;      // rows of W per step
constexpr int kGroupRows = 8;  // rows of A per register group
constexpr int64_t kPrefetchRows = 2 * kDepth;

// Eight integers of a row, columns j .. j + 7 (j a multiple of 8), as floats.
// 4-bit: the four bytes broadcast to every lane and each lane's nibble
// shifted to the top (column j's, the low nibble of the first byte, by 28),
// then down by 28, arithmetically for INT4: column order and sign in three
// instructions.
template <QuantizedType kType>
inline __m256 LoadIntegers8(const uint8_t* data, int64_t j) {
  __m256i qi;
  if constexpr (kType == QuantizedType::kInt8) {
    qi = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(data + j)));
  } else if constexpr (kType == QuantizedType::kUint8) {
    qi = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(data + j)));
  } else {
    int32_t bytes;
    std::memcpy(&bytes, data + j / 2, sizeof bytes);
    const __m256i up =
        _mm256_sllv_epi32(_mm256_set1_epi32(bytes), _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0));
    qi = kType == QuantizedType::kInt4 ? _mm256_srai_epi32(up, 28) : _mm256_srli_epi32(up, 28);
  }
  return _mm256_cvtepi32_ps(qi);
}

// (q - zero) * scale, rounded to the value type as the generic build does.
template <DataType kValue>
inline __m256 ScaleAndRound(__m256 v, __m256 scale) {
  v = _mm256_mul_ps(v, scale);
  if constexpr (kValue == DataType::kBF16) {
    // Round to nearest even at bit 16 (the values are finite).
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb);
    v = _mm256_castsi256_ps(_mm256_and_si256(rounded, _mm256_set1_epi32(~0xffff)));
  } else if constexpr (kValue == DataType::kFP16) {
    v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  return v;
}

// W[r, j], dequantized and rounded as DequantizeRow does: the columns past
// the last multiple of eight.
template <QuantizedType kType, DataType kValue>
inline float DequantizeOne(const QuantizedMatrix& w, int64_t r, int64_t j) {
  const int64_t at = (r / w.block_rows) * w.scale_row_stride + j * w.scale_col_stride;
  const float q = static_cast<float>(QuantizedElement(kType, w.data, w.first + r * w.n + j));
  const float z = w.zero_point == nullptr ? 0.0f : w.zero_point[at];
  float v = (q - z) * w.scale[at];
  if constexpr (kValue == DataType::kBF16) {
    v = BFloat16ToFloat(FloatToBFloat16(v));
  } else if constexpr (kValue == DataType::kFP16) {
    v = HalfToFloat(FloatToHalf(v));
  }
  return v;
}

// Rows r0 .. r1 - 1 of W, columns j0 .. n - 1, one weight at a time.
template <QuantizedType kType, DataType kValue>
void AccumulateTail(int64_t rows, int64_t r0, int64_t r1, int64_t j0, const float* a, int64_t lda,
                    const QuantizedMatrix& w, float* c, int64_t ldc) {
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t j = j0; j < w.n; ++j) {
      const float v = DequantizeOne<kType, kValue>(w, r, j);
      for (int64_t i = 0; i < rows; ++i) c[i * ldc + j] += a[i * lda + r] * v;
    }
  }
}

// One row r of W applied to every row of A, eight columns at a time: a step
// across a block boundary, the last rows, and scales that change every row.
template <QuantizedType kType, bool kPerColumn, bool kZero, DataType kValue>
void QuantizedOneRow(int64_t rows, const QuantizedMatrix& w, int64_t r, const float* a, int64_t lda,
                     float* c, int64_t ldc) {
  const int64_t n8 = w.n & ~int64_t{7};
  const QuantizedRow row = RowOf<kType>(w, r);
  const __m256 one_scale = _mm256_set1_ps(row.scale[0]);
  const __m256 one_zero = kZero && !kPerColumn ? _mm256_set1_ps(row.zero[0]) : __m256{};
  for (int64_t j = 0; j < n8; j += 8) {
    const __m256 scale = kPerColumn ? _mm256_loadu_ps(row.scale + j) : one_scale;
    __m256 v = LoadIntegers8<kType>(row.data, j);
    if constexpr (kZero)
      v = _mm256_sub_ps(v, kPerColumn ? _mm256_loadu_ps(row.zero + j) : one_zero);
    v = ScaleAndRound<kValue>(v, scale);
    for (int64_t i = 0; i < rows; ++i) {
      float* ci = c + i * ldc + j;
      _mm256_storeu_ps(ci, _mm256_fmadd_ps(_mm256_set1_ps(a[i * lda + r]), v, _mm256_loadu_ps(ci)));
    }
  }
  AccumulateTail<kType, kValue>(rows, r, r + 1, n8, a, lda, w, c, ldc);
}

// Eight rows of W that share their scales (one K block; scales per column or
// one for the block), applied to kRows rows of A: per eight columns the
// scale (and zero point) is loaded once, the eight rows dequantized into
// registers, and the sums added to C once; the next step's bytes are
// prefetched two steps ahead. kFactor (FP32 values, scales and activations
// in ScalesFactorable's range) applies the scale to the sums, as the AVX-512
// build explains.
template <QuantizedType kType, bool kPerColumn, bool kZero, DataType kValue, bool kFactor,
          int kRows>
void QuantizedRowGroupFor(const QuantizedMatrix& w, int64_t k, int64_t k_end, const float* a,
                          int64_t lda, float* c, int64_t ldc, bool prefetch) {
  static_assert(!kFactor || kValue == DataType::kFP32);
  const int64_t n = w.n, n8 = n & ~int64_t{7};
  const int64_t row_bytes = IsFourBit(kType) ? n / 2 : n;
  constexpr int64_t kLineColumns = IsFourBit(kType) ? 128 : 64;  // one cache line of a row
  const QuantizedRow first = RowOf<kType>(w, k);
  const bool ahead = prefetch && k + kPrefetchRows + kDepth <= k_end;
  const uint8_t* next = first.data + kPrefetchRows * row_bytes;
  const __m256 one_scale = _mm256_set1_ps(first.scale[0]);
  const __m256 one_zero = kZero && !kPerColumn ? _mm256_set1_ps(first.zero[0]) : __m256{};
  for (int64_t j = 0; j < n8; j += 8) {
    if (ahead && j % kLineColumns == 0) {
      const int64_t byte = IsFourBit(kType) ? j / 2 : j;
      for (int t = 0; t < kDepth; ++t) {
        _mm_prefetch(reinterpret_cast<const char*>(next + t * row_bytes + byte), _MM_HINT_T0);
      }
    }
    const __m256 scale = kPerColumn ? _mm256_loadu_ps(first.scale + j) : one_scale;
    __m256 zero = _mm256_setzero_ps();
    if constexpr (kZero) zero = kPerColumn ? _mm256_loadu_ps(first.zero + j) : one_zero;
    __m256 wv[kDepth];
    for (int t = 0; t < kDepth; ++t) {
      wv[t] = LoadIntegers8<kType>(first.data + t * row_bytes, j);
      if constexpr (kZero) wv[t] = _mm256_sub_ps(wv[t], zero);
      if constexpr (!kFactor) wv[t] = ScaleAndRound<kValue>(wv[t], scale);
    }
    for (int i = 0; i < kRows; ++i) {
      const float* ai = a + i * lda + k;
      __m256 p = _mm256_mul_ps(_mm256_set1_ps(ai[0]), wv[0]);
      __m256 q = _mm256_mul_ps(_mm256_set1_ps(ai[1]), wv[1]);
      for (int t = 2; t < kDepth; t += 2) {
        p = _mm256_fmadd_ps(_mm256_set1_ps(ai[t]), wv[t], p);
        q = _mm256_fmadd_ps(_mm256_set1_ps(ai[t + 1]), wv[t + 1], q);
      }
      float* ci = c + i * ldc + j;
      const __m256 ci_old = _mm256_loadu_ps(ci);
      _mm256_storeu_ps(ci, kFactor ? _mm256_fmadd_ps(_mm256_add_ps(p, q), scale, ci_old)
                                   : _mm256_add_ps(ci_old, _mm256_add_ps(p, q)));
    }
  }
  if (n8 < n) AccumulateTail<kType, kValue>(kRows, k, k + kDepth, n8, a, lda, w, c, ldc);
}

#include "server/ops/kernels/quantized_blocks_impl.inc"

template <QuantizedType kType>
void FusedForType(int64_t rows, int64_t k_begin, int64_t k_end, const float* a, int64_t lda,
                  const QuantizedMatrix& w, float* c, int64_t ldc, bool factor) {
  WithScaleLayout(w, [&](auto per_column, auto zero) {
    BlocksForValue<kType, decltype(per_column)::value, decltype(zero)::value>(
        rows, k_begin, k_end, a, lda, w, c, ldc, factor);
  });
}

// Whether every activation of rows x [k_begin, k_end) is within
// kFactorableActivation (NaN is not).
bool ActivationsFactorable(int64_t rows, int64_t k_begin, int64_t k_end, const float* a,
                           int64_t lda) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t k = k_begin; k < k_end; ++k) {
      if (!(std::fabs(a[i * lda + k]) <= kFactorableActivation)) return false;
    }
  }
  return true;
}

void AccumulateQuantizedAvx2(int64_t rows, int64_t k_begin, int64_t k_end, const float* a,
                             int64_t lda, const QuantizedMatrix& w, float* c, int64_t ldc) {
  if (!QuantizedFusedApplies(w))
    return AccumulateQuantized(rows, k_begin, k_end, a, lda, w, c, ldc);
  const bool factor = w.value_type == DataType::kFP32 && w.scales_factorable &&
                      ActivationsFactorable(rows, k_begin, k_end, a, lda);
  WithQuantizedType(w.type, [&](auto type) {
    FusedForType<decltype(type)::value>(rows, k_begin, k_end, a, lda, w, c, ldc, factor);
  });
}

}  // namespace avx2
}  // namespace

void QuantizedAvx2(int64_t rows, int64_t k_begin, int64_t k_end, const float* a, int64_t lda,
                   const QuantizedMatrix& w, float* c, int64_t ldc) {
  avx2::AccumulateQuantizedAvx2(rows, k_begin, k_end, a, lda, w, c, ldc);
}

}  // namespace streaming_internal
}  // namespace gemmserve
