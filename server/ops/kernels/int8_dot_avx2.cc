// The AVX2 build of the integer dot products on 8-bit activations
// (int8_dot.h), compiled with -mavx2 -mfma and run only where KernelSet names
// it (CPUs without AVX512-VNNI). Sixteen columns at a time: two K rows of the
// weights widened to int16 and interleaved in pairs, the row's two
// activations broadcast as an int16 pair, and vpmaddwd adds the two products
// into int32 lanes exactly (|q_w q_a| <= 255 * 127: no saturation, unlike
// vpmaddubsw's int16 sums). Each block's sums are folded as the portable
// build folds them (the same FP32 operations in the same order), so the
// results are bit for bit the same.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "server/ops/kernels/int8_dot.h"
#include "server/ops/kernels/quantized_layout.h"

namespace gemmserve {
namespace int8_dot_internal {
namespace {

constexpr int64_t kColumns = 16;

// Row t's `cols` (<= 16) weights from column j0 as 16 int16 (the columns
// past `cols` zero), from a row that starts on a byte.
__m256i LoadRow(const QuantizedMatrix& w, int64_t t, int64_t j0, int64_t cols) {
  const int64_t e = w.first + t * w.n + j0;
  if (!IsFourBit(w.type)) {
    __m128i v;
    if (cols == 16) {
      v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.data + e));
    } else {
      alignas(16) uint8_t bytes[16] = {};
      std::memcpy(bytes, w.data + e, static_cast<size_t>(cols));
      v = _mm_load_si128(reinterpret_cast<const __m128i*>(bytes));
    }
    return w.type == QuantizedType::kInt8 ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v);
  }
  __m128i packed;
  if (cols == 16) {
    packed = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.data + e / 2));
  } else {
    alignas(16) uint8_t bytes[16] = {};
    std::memcpy(bytes, w.data + e / 2, static_cast<size_t>((cols + 1) / 2));
    packed = _mm_load_si128(reinterpret_cast<const __m128i*>(bytes));
  }
  const __m128i nibble = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(packed, nibble);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(packed, 4), nibble);
  __m256i v = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(lo, hi));  // columns in order
  if (w.type == QuantizedType::kInt4) {  // sign-extend the nibbles: (v ^ 8) - 8
    v = _mm256_sub_epi16(_mm256_xor_si256(v, _mm256_set1_epi16(8)), _mm256_set1_epi16(8));
  }
  return v;  // columns past `cols` (n even: whole bytes) read as zero bytes
}

// Rows t and t + 1 (the second zero when absent): lanes in the order
// vpunpck*wd leaves them, lo holding columns 0-3 and 8-11, hi 4-7 and 12-15,
// each 32-bit lane one column's two weights.
void LoadPair(const QuantizedMatrix& w, int64_t t, bool second, int64_t j0, int64_t cols,
              __m256i* lo, __m256i* hi) {
  const __m256i r0 = LoadRow(w, t, j0, cols);
  const __m256i r1 = second ? LoadRow(w, t + 1, j0, cols) : _mm256_setzero_si256();
  *lo = _mm256_unpacklo_epi16(r0, r1);
  *hi = _mm256_unpackhi_epi16(r0, r1);
}

// Row `q`'s two activations at t (the second zero at or past `end`) as an
// int16 pair in every 32-bit lane.
__m256i Activations(const int8_t* q, int64_t t, int64_t end) {
  const int16_t a0 = q[t], a1 = t + 1 < end ? q[t + 1] : 0;
  const uint32_t pair =
      static_cast<uint16_t>(a0) | (static_cast<uint32_t>(static_cast<uint16_t>(a1)) << 16);
  return _mm256_set1_epi32(static_cast<int>(pair));
}

// One row of one 16-column chunk over one block: its sums, columns in order.
void BlockSums(const int8_t* q, int64_t t0, int64_t t1, const QuantizedMatrix& w, int64_t j0,
               int64_t cols, int32_t out[16]) {
  __m256i acc_lo = _mm256_setzero_si256(), acc_hi = _mm256_setzero_si256();
  for (int64_t t = t0; t < t1; t += 2) {
    __m256i lo, hi;
    LoadPair(w, t, t + 1 < t1, j0, cols, &lo, &hi);
    const __m256i act = Activations(q, t, t1);
    acc_lo = _mm256_add_epi32(acc_lo, _mm256_madd_epi16(lo, act));
    acc_hi = _mm256_add_epi32(acc_hi, _mm256_madd_epi16(hi, act));
  }
  // acc_lo: columns 0-3 | 8-11; acc_hi: 4-7 | 12-15.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      _mm256_permute2x128_si256(acc_lo, acc_hi, 0x20));  // 0-3, 4-7
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8),
                      _mm256_permute2x128_si256(acc_lo, acc_hi, 0x31));  // 8-11, 12-15
}

// The portable build's fold of 16 columns' sums into `out`, eight lanes at
// a time: out = fma(s_a * s_w, float(sum - z * asum), out).
void Fold(const QuantizedMatrix& w, int64_t scale_row, int64_t j0, int64_t cols, float sa,
          int32_t asum, const int32_t sums[16], float* out) {
  alignas(32) float scale[16], prev[16];
  alignas(32) int32_t zero[16] = {};
  for (int64_t j = 0; j < cols; ++j) {
    const int64_t s = scale_row + (j0 + j) * w.scale_col_stride;
    scale[j] = w.scale[s];
    if (w.zero_point != nullptr) zero[j] = static_cast<int32_t>(w.zero_point[s]);
    prev[j] = out[j];
  }
  for (int64_t h = 0; h < 16; h += 8) {
    const __m256i corrected = _mm256_sub_epi32(
        _mm256_load_si256(reinterpret_cast<const __m256i*>(sums + h)),
        _mm256_mullo_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(zero + h)),
                           _mm256_set1_epi32(asum)));
    const __m256 r = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(sa), _mm256_load_ps(scale + h)),
                                     _mm256_cvtepi32_ps(corrected), _mm256_load_ps(prev + h));
    _mm256_store_ps(prev + h, r);
  }
  std::memcpy(out, prev, static_cast<size_t>(cols) * sizeof(float));
}

}  // namespace

void Int8DotAvx2(int64_t rows, const int64_t* a_rows, const Int8Rows& a, int64_t k_begin,
                 int64_t k_end, const QuantizedMatrix& w, float* c, int64_t ldc) {
  // 4-bit rows must start on a byte: every row (first and n even).
  if (IsFourBit(w.type) && (w.first % 2 != 0 || w.n % 2 != 0)) {
    return Int8DotGeneric(rows, a_rows, a, k_begin, k_end, w, c, ldc);
  }
  alignas(32) int32_t sums[16];
  for (int64_t t0 = k_begin; t0 < k_end; t0 += a.block) {
    const int64_t t1 = std::min(t0 + a.block, k_end), b = t0 / a.block;
    const int64_t scale_row = (t0 / w.block_rows) * w.scale_row_stride;
    for (int64_t j0 = 0; j0 < w.n; j0 += kColumns) {
      const int64_t cols = std::min(kColumns, w.n - j0);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t src = a_rows != nullptr ? a_rows[i] : i;
        BlockSums(a.q.data() + src * a.ld, t0, t1, w, j0, cols, sums);
        const float sa = a.scale[src * a.blocks + b];
        const int32_t asum = a.sum[src * a.blocks + b];
        Fold(w, scale_row, j0, cols, sa, asum, sums, c + i * ldc + j0);
      }
    }
  }
}

}  // namespace int8_dot_internal
}  // namespace gemmserve
