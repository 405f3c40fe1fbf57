// The AVX512-VNNI build of the integer dot products on 8-bit activations
// (int8_dot.h), compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni
// and run only where KernelSet names it. 64 columns at a time: four K rows of
// the weights interleaved in registers into one 32-bit lane per column (the
// weights made unsigned: +128 for INT8, +8 for INT4), the four activations of
// a row broadcast, and vpdpbusd adds the four products. The interleave leaves
// the columns in a known order, put back once per block before its sums are
// folded as the portable build folds them (the same FP32 operations in the
// same order), so the results are bit for bit the same.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "server/ops/kernels/int8_dot.h"
#include "server/ops/kernels/int8_dot_walk.h"

namespace gemmserve {
namespace int8_dot_internal {
namespace {

// Software prefetch this far ahead in the packed stream (eight units): at
// decode a row group's weights come from memory, and measured side by side
// (scripts/bench_side_by_side.py, olmoe M = 1, 4, 64, five runs) this ran
// 2-14% faster than leaving the stream to the hardware prefetcher alone.
constexpr int64_t kPrefetchBytes = 2048;

__mmask64 ByteMask(int64_t bytes) {
  return bytes >= 64 ? ~__mmask64{0} : (__mmask64{1} << bytes) - 1;
}

// Row t's `cols` (<= 64) weights from column j0 as 64 unsigned bytes, in
// column order (the columns past `cols` zero).
__m512i LoadRow(const QuantizedMatrix& w, int64_t t, int64_t j0, int64_t cols) {
  const int64_t e = w.first + t * w.n + j0;
  if (!IsFourBit(w.type)) {
    const __m512i v = _mm512_maskz_loadu_epi8(ByteMask(cols), w.data + e);
    return w.type == QuantizedType::kInt8 ? _mm512_xor_si512(v, _mm512_set1_epi8(-128)) : v;
  }
  // Two columns a byte (e even here), the even one in the low nibble: each
  // byte widened to a word, its nibbles then the word's two bytes.
  const __m256i packed =
      _mm256_maskz_loadu_epi8(static_cast<__mmask32>(ByteMask((cols + 1) / 2)), w.data + e / 2);
  const __m512i words = _mm512_cvtepu8_epi16(packed);
  const __m512i v =
      _mm512_or_si512(_mm512_and_si512(words, _mm512_set1_epi16(0x000F)),
                      _mm512_slli_epi16(_mm512_and_si512(words, _mm512_set1_epi16(0x00F0)), 4));
  const __mmask64 mask = ByteMask(cols);
  return _mm512_maskz_mov_epi8(
      mask, w.type == QuantizedType::kInt4 ? _mm512_xor_si512(v, _mm512_set1_epi8(8)) : v);
}

// Rows t .. t + present - 1 (present <= 4; the others zero) interleaved by
// four: register q's lane 4L + y holds column 16L + 4q + y's four weights.
void LoadFour(const QuantizedMatrix& w, int64_t t, int64_t present, int64_t j0, int64_t cols,
              __m512i out[4]) {
  __m512i r[4];
  for (int x = 0; x < 4; ++x) {
    r[x] = x < present ? LoadRow(w, t + x, j0, cols) : _mm512_setzero_si512();
  }
  const __m512i lo01 = _mm512_unpacklo_epi8(r[0], r[1]), hi01 = _mm512_unpackhi_epi8(r[0], r[1]);
  const __m512i lo23 = _mm512_unpacklo_epi8(r[2], r[3]), hi23 = _mm512_unpackhi_epi8(r[2], r[3]);
  out[0] = _mm512_unpacklo_epi16(lo01, lo23);
  out[1] = _mm512_unpackhi_epi16(lo01, lo23);
  out[2] = _mm512_unpacklo_epi16(hi01, hi23);
  out[3] = _mm512_unpackhi_epi16(hi01, hi23);
}

// Registers in LoadFour's order back to column order: n[L] = columns
// 16L .. 16L + 15 (a 4 x 4 transpose of 128-bit quarters).
void ToColumns(const __m512i acc[4], __m512i n[4]) {
  const __m512i t0 = _mm512_maskz_shuffle_i32x4(0xFFFF, acc[0], acc[1], 0x44);
  const __m512i t1 = _mm512_maskz_shuffle_i32x4(0xFFFF, acc[0], acc[1], 0xEE);
  const __m512i t2 = _mm512_maskz_shuffle_i32x4(0xFFFF, acc[2], acc[3], 0x44);
  const __m512i t3 = _mm512_maskz_shuffle_i32x4(0xFFFF, acc[2], acc[3], 0xEE);
  n[0] = _mm512_maskz_shuffle_i32x4(0xFFFF, t0, t2, 0x88);
  n[1] = _mm512_maskz_shuffle_i32x4(0xFFFF, t0, t2, 0xDD);
  n[2] = _mm512_maskz_shuffle_i32x4(0xFFFF, t1, t3, 0x88);
  n[3] = _mm512_maskz_shuffle_i32x4(0xFFFF, t1, t3, 0xDD);
}

// A row's four activations at t (ActivationQuad) in every lane.
__m512i Activations(const int8_t* q, int64_t t, int64_t end) {
  return _mm512_set1_epi32(static_cast<int>(ActivationQuad(q, t, end)));
}

// The block's scales, and zero points plus the offset as int32, of the 16
// columns from j0 (`mask` of them present); row_base: the block's first
// scale, (t0 / block_rows) * scale_row_stride.
void LoadScales(const QuantizedMatrix& w, int64_t row_base, int64_t j0, __mmask16 mask,
                __m512* scale, __m512i* zero) {
  const int64_t base = row_base + j0 * w.scale_col_stride;
  const bool contiguous = w.scale_col_stride == 1;
  const __m512i index =
      contiguous ? _mm512_setzero_si512()
                 : _mm512_mullo_epi32(
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                       _mm512_set1_epi32(static_cast<int>(w.scale_col_stride)));
  *scale = contiguous
               ? _mm512_maskz_loadu_ps(mask, w.scale + base)
               : _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, index, w.scale + base, 4);
  __m512i z = _mm512_set1_epi32(UnsignedOffset(w.type));
  if (w.zero_point != nullptr) {
    const __m512 zf = contiguous ? _mm512_maskz_loadu_ps(mask, w.zero_point + base)
                                 : _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, index,
                                                            w.zero_point + base, 4);
    z = _mm512_add_epi32(z, _mm512_maskz_cvttps_epi32(0xFFFF, zf));
  }
  *zero = z;
}

// The sums of rows i0 .. i0 + count over one block from its packed units
// (PackInt8Weights): `units` of 256 bytes, 4 K rows each, or 8 for 4-bit.
template <int kCount>
void PackedSums(const Int8Rows& a, const int64_t* src, int64_t t0, int64_t t1, bool four,
                const uint8_t* packed, int64_t units, __m512i acc[kCount][4]) {
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const int8_t* rows[kCount];
  for (int r = 0; r < kCount; ++r) rows[r] = a.q.data() + src[r] * a.ld;
  for (int64_t u = 0; u < units; ++u, packed += 256) {
    for (int q = 0; q < 4; ++q) {
      _mm_prefetch(reinterpret_cast<const char*>(packed + kPrefetchBytes + q * 64), _MM_HINT_T0);
    }
    __m512i v[4];
    for (int q = 0; q < 4; ++q) v[q] = _mm512_loadu_si512(packed + q * 64);
    const int64_t t = t0 + u * (four ? 8 : 4);
    for (int r = 0; r < kCount; ++r) {
      const int8_t* qa = rows[r];
      const __m512i act = Activations(qa, t, t1);
      if (!four) {
        for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_dpbusd_epi32(acc[r][q], v[q], act);
        continue;
      }
      const __m512i act_hi = Activations(qa, t + 4, t1);
      for (int q = 0; q < 4; ++q) {
        acc[r][q] = _mm512_dpbusd_epi32(acc[r][q], _mm512_and_si512(v[q], nibble), act);
        acc[r][q] = _mm512_dpbusd_epi32(
            acc[r][q], _mm512_and_si512(_mm512_srli_epi16(v[q], 4), nibble), act_hi);
      }
    }
  }
}

// Rows i0 .. i0 + kCount (kCount <= kInt8WalkRowGroup) of one 64-column chunk over one
// activation block [t0, t1): their sums, folded into C.
template <int kCount>
void BlockRows(const Int8Rows& a, const int64_t* a_rows, int64_t i0, int64_t t0, int64_t t1,
               const QuantizedMatrix& w, int64_t j0, int64_t cols, const uint8_t* packed,
               int64_t units, float* c, int64_t ldc) {
  int64_t src[kInt8WalkRowGroup];
  __m512i acc[kCount][4];
  for (int r = 0; r < kCount; ++r) {
    src[r] = a_rows != nullptr ? a_rows[i0 + r] : i0 + r;
    for (__m512i& v : acc[r]) v = _mm512_setzero_si512();
  }
  if (packed != nullptr) {
    PackedSums<kCount>(a, src, t0, t1, IsFourBit(w.type), packed, units, acc);
  } else {
    __m512i weights[4];
    for (int64_t t = t0; t < t1; t += 4) {
      LoadFour(w, t, std::min<int64_t>(4, t1 - t), j0, cols, weights);
      for (int r = 0; r < kCount; ++r) {
        const __m512i act = Activations(a.q.data() + src[r] * a.ld, t, t1);
        for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_dpbusd_epi32(acc[r][q], weights[q], act);
      }
    }
  }
  const int64_t b = t0 / a.block;
  __m512i columns[kCount][4];  // the packed layout holds its columns in order already
  __m512 sa[kCount];
  __m512i correction[kCount];  // (z + offset) * sum, where there is no zero point
  for (int r = 0; r < kCount; ++r) {
    if (packed != nullptr) {
      for (int q = 0; q < 4; ++q) columns[r][q] = acc[r][q];
    } else {
      ToColumns(acc[r], columns[r]);
    }
    sa[r] = _mm512_set1_ps(a.scale[src[r] * a.blocks + b]);
    correction[r] = _mm512_set1_epi32(a.sum[src[r] * a.blocks + b]);
  }
  const int64_t row_base = (t0 / w.block_rows) * w.scale_row_stride;
  for (int64_t l = 0; l * 16 < cols; ++l) {
    const int64_t here = std::min<int64_t>(16, cols - l * 16);
    const __mmask16 mask = static_cast<__mmask16>((1u << here) - 1);
    __m512 scale;
    __m512i zero;
    LoadScales(w, row_base, j0 + l * 16, mask, &scale, &zero);
    for (int r = 0; r < kCount; ++r) {
      const __m512 sa_sw = _mm512_mul_ps(sa[r], scale);
      const __m512i corrected =
          _mm512_sub_epi32(columns[r][l], _mm512_mullo_epi32(zero, correction[r]));
      float* out = c + (i0 + r) * ldc + j0 + l * 16;
      const __m512 prev = _mm512_maskz_loadu_ps(mask, out);
      _mm512_mask_storeu_ps(
          out, mask, _mm512_fmadd_ps(sa_sw, _mm512_maskz_cvtepi32_ps(0xFFFF, corrected), prev));
    }
  }
}

}  // namespace

void Int8DotAvx512Vnni(int64_t rows, const int64_t* a_rows, const Int8Rows& a, int64_t k_begin,
                       int64_t k_end, const QuantizedMatrix& w, float* c, int64_t ldc) {
  if (Int8RowsStartMidByte(w)) return Int8DotGeneric(rows, a_rows, a, k_begin, k_end, w, c, ldc);
  // chunk: j0, cols, packed, units (WalkInt8Blocks).
  WalkInt8Blocks(rows, a, k_begin, k_end, w,
                 [&](auto count, int64_t i0, int64_t t0, int64_t t1, auto... chunk) {
                   BlockRows<decltype(count)::value>(a, a_rows, i0, t0, t1, w, chunk..., c, ldc);
                 });
}

}  // namespace int8_dot_internal
}  // namespace gemmserve
