// The AVX-VNNI build of the integer dot products on 8-bit activations
// (int8_dot.h), compiled with -mavx2 -mfma -mavxvnni and run only where
// KernelSet names it: CPUs with the VEX-encoded, 256-bit vpdpbusd but not
// AVX512-VNNI (Intel's client cores since Alder Lake, its E-core Xeons such
// as Sierra Forest; and any CPU with AVX-VNNI under
// GEMMSERVE_MAX_CPU_ISA=avx2_vnni). The AVX512-VNNI build's arithmetic in
// half-width registers: four K rows of the weights interleaved into one
// 32-bit lane per column (made unsigned: +128 for INT8, +8 for INT4, folded
// into the zero point's correction), the four activations of a row
// broadcast, and vpdpbusd adds the four products exactly.
//
// It reads the same packed layout (PackInt8Weights), so one copy made at
// load serves both builds: each 64-byte register of that layout (a line of
// sixteen columns, in order) is two of these registers, columns 16q .. 16q +
// 7 and 16q + 8 .. 16q + 15 of the chunk. With sixteen registers rather than
// 32, a row group accumulates eight registers: one row all four lines of a
// 64-column chunk, two rows two lines, three or four rows one line, each pass
// over the chunk's units reading its lines (a 64-byte line per unit, in L1
// after the first pass). Row-major weights are interleaved here, sixteen
// columns at a time, in column order. Each block's sums are folded as the
// portable build folds them (the same FP32 operations in the same order), so
// the results are bit for bit the same.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "server/ops/kernels/int8_dot.h"
#include "server/ops/kernels/int8_dot_walk.h"

namespace gemmserve {
namespace int8_dot_internal {
namespace {

constexpr int64_t kLine = 16;  // a line: one 64-byte register of the packed layout, two here
// Software prefetch this far ahead in the packed stream, as the AVX512-VNNI
// build does (eight units ahead).
constexpr int64_t kPrefetchBytes = 2048;

// Lines a pass of kCount rows accumulates: eight accumulators in all.
constexpr int LinesFor(int count) { return count == 1 ? 4 : count == 2 ? 2 : 1; }

// Row t's `cols` (1 .. 16) weights from column j as 16 unsigned bytes in
// column order, from a row that starts on a byte (the columns past `cols`
// are not used).
__m128i LoadRow(const QuantizedMatrix& w, int64_t t, int64_t j, int64_t cols) {
  const int64_t e = w.first + t * w.n + j;
  if (!IsFourBit(w.type)) {
    __m128i v;
    if (cols >= kLine) {
      v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.data + e));
    } else {
      alignas(16) uint8_t bytes[16] = {};
      std::memcpy(bytes, w.data + e, static_cast<size_t>(cols));
      v = _mm_load_si128(reinterpret_cast<const __m128i*>(bytes));
    }
    return w.type == QuantizedType::kInt8 ? _mm_xor_si128(v, _mm_set1_epi8(-128)) : v;
  }
  // Two columns a byte (e even), the even one in the low nibble.
  __m128i packed;
  if (cols >= kLine) {
    packed = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.data + e / 2));
  } else {
    alignas(16) uint8_t bytes[16] = {};
    std::memcpy(bytes, w.data + e / 2, static_cast<size_t>((cols + 1) / 2));
    packed = _mm_load_si128(reinterpret_cast<const __m128i*>(bytes));
  }
  const __m128i nibble = _mm_set1_epi8(0x0F);
  const __m128i v = _mm_unpacklo_epi8(_mm_and_si128(packed, nibble),
                                      _mm_and_si128(_mm_srli_epi16(packed, 4), nibble));
  return w.type == QuantizedType::kInt4 ? _mm_xor_si128(v, _mm_set1_epi8(8)) : v;
}

// Rows t .. t + present - 1 (present <= 4; the others zero) of the line from
// column j (`cols` of its columns present; none: zeros) interleaved by four:
// out[0] columns j .. j + 7, out[1] j + 8 .. j + 15, a column's four rows in
// its 32-bit lane (the packed layout's order).
void LoadFour(const QuantizedMatrix& w, int64_t t, int64_t present, int64_t j, int64_t cols,
              __m256i out[2]) {
  __m128i r[4];
  for (int x = 0; x < 4; ++x) {
    r[x] = x < present && cols > 0 ? LoadRow(w, t + x, j, cols) : _mm_setzero_si128();
  }
  const __m128i lo01 = _mm_unpacklo_epi8(r[0], r[1]), hi01 = _mm_unpackhi_epi8(r[0], r[1]);
  const __m128i lo23 = _mm_unpacklo_epi8(r[2], r[3]), hi23 = _mm_unpackhi_epi8(r[2], r[3]);
  out[0] = _mm256_set_m128i(_mm_unpackhi_epi16(lo01, lo23), _mm_unpacklo_epi16(lo01, lo23));
  out[1] = _mm256_set_m128i(_mm_unpackhi_epi16(hi01, hi23), _mm_unpacklo_epi16(hi01, hi23));
}

// A row's four activations at t (ActivationQuad) in every lane.
__m256i Activations(const int8_t* q, int64_t t, int64_t end) {
  return _mm256_set1_epi32(static_cast<int>(ActivationQuad(q, t, end)));
}

// The sums of kCount rows (their integers at q[r]) over one block [t0, t1)
// from its packed units (PackInt8Weights): `units` of 256 bytes, 4 K rows
// each or 8 for 4-bit, `packed` at the pass's first line of the first unit.
// A register at a time across the rows, their activations held: at most 8
// accumulators, 8 activations and a register of weights live (the
// activations past the sixteen registers read as vpdpbusd's memory operand).
template <int kCount, int kRegs>
void PackedSums(const int8_t* const q[kCount], int64_t t0, int64_t t1, bool four,
                const uint8_t* packed, int64_t units, __m256i acc[kCount][kRegs]) {
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  for (int64_t u = 0; u < units; ++u, packed += 256) {
    for (int l = 0; l < kRegs / 2; ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(packed + kPrefetchBytes + l * 64), _MM_HINT_T0);
    }
    const int64_t t = t0 + u * (four ? 8 : 4);
    __m256i act[kCount];
    for (int r = 0; r < kCount; ++r) act[r] = Activations(q[r], t, t1);
    if (!four) {
      for (int g = 0; g < kRegs; ++g) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + g * 32));
        for (int r = 0; r < kCount; ++r) acc[r][g] = _mm256_dpbusd_avx_epi32(acc[r][g], v, act[r]);
      }
      continue;
    }
    __m256i act_hi[kCount];  // the next quad's rows, in the high nibbles
    for (int r = 0; r < kCount; ++r) act_hi[r] = Activations(q[r], t + 4, t1);
    for (int g = 0; g < kRegs; ++g) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + g * 32));
      const __m256i lo = _mm256_and_si256(v, nibble);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
      for (int r = 0; r < kCount; ++r) {
        acc[r][g] = _mm256_dpbusd_avx_epi32(acc[r][g], lo, act[r]);
        acc[r][g] = _mm256_dpbusd_avx_epi32(acc[r][g], hi, act_hi[r]);
      }
    }
  }
}

// The same sums from row-major weights: the lines from column j (`cols` of
// the chunk's columns from j present), four K rows at a time, a line at a
// time across the rows.
template <int kCount, int kRegs>
void RowMajorSums(const int8_t* const q[kCount], int64_t t0, int64_t t1, const QuantizedMatrix& w,
                  int64_t j, int64_t cols, __m256i acc[kCount][kRegs]) {
  for (int64_t t = t0; t < t1; t += 4) {
    const int64_t present = std::min<int64_t>(4, t1 - t);
    __m256i act[kCount];
    for (int r = 0; r < kCount; ++r) act[r] = Activations(q[r], t, t1);
    for (int l = 0; l < kRegs / 2; ++l) {
      __m256i v[2];
      LoadFour(w, t, present, j + l * kLine, std::min(kLine, cols - l * kLine), v);
      for (int r = 0; r < kCount; ++r) {
        for (int h = 0; h < 2; ++h) {
          acc[r][2 * l + h] = _mm256_dpbusd_avx_epi32(acc[r][2 * l + h], v[h], act[r]);
        }
      }
    }
  }
}

// The block's scales, and zero points plus the offset as int32, of the
// columns from j (lanes in `mask`; the others zero); row_base: the block's
// first scale, (t0 / block_rows) * scale_row_stride.
void LoadScales(const QuantizedMatrix& w, int64_t row_base, int64_t j, bool whole, __m256i mask,
                __m256* scale, __m256i* zero) {
  const int64_t base = row_base + j * w.scale_col_stride;
  const auto load = [&](const float* p) {
    if (w.scale_col_stride != 1) {  // per row or per tensor (stride 0), or transposed
      const __m256i index =
          _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                             _mm256_set1_epi32(static_cast<int>(w.scale_col_stride)));
      return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), p + base, index,
                                      _mm256_castsi256_ps(mask), 4);
    }
    return whole ? _mm256_loadu_ps(p + base) : _mm256_maskload_ps(p + base, mask);
  };
  *scale = load(w.scale);
  __m256i z = _mm256_set1_epi32(UnsignedOffset(w.type));
  if (w.zero_point != nullptr) z = _mm256_add_epi32(z, _mm256_cvttps_epi32(load(w.zero_point)));
  *zero = z;
}

// Columns j .. j + here - 1 (here <= 8) of one block: the sums of kCount
// rows, columns in order, folded into their rows of C (out[r][j]) as the
// portable build folds them: out = fma(s_a * s_w, float(sum - (z + offset) * asum), out).
template <int kCount>
void FoldEight(const QuantizedMatrix& w, int64_t row_base, int64_t j, int64_t here,
               const float sa[kCount], const int32_t asum[kCount], const __m256i sums[kCount],
               float* const out[kCount]) {
  const bool whole = here == 8;
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(here)),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256 scale;
  __m256i zero;
  LoadScales(w, row_base, j, whole, mask, &scale, &zero);
  for (int r = 0; r < kCount; ++r) {
    const __m256 sa_sw = _mm256_mul_ps(_mm256_set1_ps(sa[r]), scale);
    const __m256i corrected =
        _mm256_sub_epi32(sums[r], _mm256_mullo_epi32(zero, _mm256_set1_epi32(asum[r])));
    float* o = out[r] + j;
    const __m256 prev = whole ? _mm256_loadu_ps(o) : _mm256_maskload_ps(o, mask);
    const __m256 next = _mm256_fmadd_ps(sa_sw, _mm256_cvtepi32_ps(corrected), prev);
    if (whole) {
      _mm256_storeu_ps(o, next);
    } else {
      _mm256_maskstore_ps(o, mask, next);
    }
  }
}

// Rows i0 .. i0 + kCount (kCount <= kInt8WalkRowGroup) of one 64-column chunk over one
// activation block [t0, t1): their sums, a pass of LinesFor(kCount) lines at
// a time, folded into C.
template <int kCount>
void BlockRows(const Int8Rows& a, const int64_t* a_rows, int64_t i0, int64_t t0, int64_t t1,
               const QuantizedMatrix& w, int64_t j0, int64_t cols, const uint8_t* packed,
               int64_t units, float* c, int64_t ldc) {
  constexpr int kLines = LinesFor(kCount), kRegs = 2 * kLines;
  const int64_t b = t0 / a.block;
  const int8_t* q[kCount];
  float* out[kCount];
  float sa[kCount];
  int32_t asum[kCount];
  for (int r = 0; r < kCount; ++r) {
    const int64_t src = a_rows != nullptr ? a_rows[i0 + r] : i0 + r;
    q[r] = a.q.data() + src * a.ld;
    out[r] = c + (i0 + r) * ldc;
    sa[r] = a.scale[src * a.blocks + b];
    asum[r] = a.sum[src * a.blocks + b];
  }
  const int64_t row_base = (t0 / w.block_rows) * w.scale_row_stride;
  for (int64_t l0 = 0; l0 * kLine < cols; l0 += kLines) {
    const int64_t j = l0 * kLine;  // the pass's first column in the chunk
    __m256i acc[kCount][kRegs];
    for (int r = 0; r < kCount; ++r) {
      for (__m256i& v : acc[r]) v = _mm256_setzero_si256();
    }
    if (packed != nullptr) {
      PackedSums<kCount, kRegs>(q, t0, t1, IsFourBit(w.type), packed + l0 * 64, units, acc);
    } else {
      RowMajorSums<kCount, kRegs>(q, t0, t1, w, j0 + j, cols - j, acc);
    }
    for (int g = 0; g < kRegs && j + g * 8 < cols; ++g) {
      __m256i sums[kCount];
      for (int r = 0; r < kCount; ++r) sums[r] = acc[r][g];
      FoldEight<kCount>(w, row_base, j0 + j + g * 8, std::min<int64_t>(8, cols - j - g * 8), sa,
                        asum, sums, out);
    }
  }
}

}  // namespace

void Int8DotAvxVnni(int64_t rows, const int64_t* a_rows, const Int8Rows& a, int64_t k_begin,
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
