// The portable build of the integer dot products on 8-bit activations
// (int8_dot.h): the reference every faster build is held to bit for bit.
#include "server/ops/kernels/int8_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "server/ops/kernels/gemm.h"
#include "server/ops/kernels/int8_dot_walk.h"
#include "server/ops/kernels/kernel_set.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace {

// One block of one row: its scale, its integers and their sum. A block with
// a value that is not finite gets a NaN scale (the answer's row is NaN there,
// as the exact path's would be Inf or NaN) and zero integers.
void QuantizeBlock(const float* v, int64_t count, int8_t* q, float* scale, int32_t* sum) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t t = 0; t < count; ++t) {
    finite = finite && std::isfinite(v[t]);
    amax = std::max(amax, std::fabs(v[t]));
  }
  *sum = 0;
  if (!finite || amax == 0.0f) {
    std::fill(q, q + count, int8_t{0});
    *scale = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const float inv = 127.0f / amax;
  // |v * inv| <= 127 (up to rounding), far below 2^22: adding and taking away
  // 1.5 * 2^23 rounds it to the nearest integer, ties to even, in the default
  // rounding mode (as nearbyint does), in a loop the compiler vectorizes.
  constexpr float kRound = 12582912.0f;
  for (int64_t t = 0; t < count; ++t) {
    const float r = std::min(127.0f, std::max(-127.0f, (v[t] * inv + kRound) - kRound));
    q[t] = static_cast<int8_t>(r);
    *sum += q[t];
  }
  *scale = amax / 127.0f;
}

// Row t of W's integers, minus nothing: q_w[t, 0..n) as int32.
void UnpackRow(const QuantizedMatrix& w, int64_t t, int32_t* out) {
  const int64_t base = w.first + t * w.n;
  switch (w.type) {
    case QuantizedType::kInt8:
      for (int64_t j = 0; j < w.n; ++j) out[j] = static_cast<int8_t>(w.data[base + j]);
      return;
    case QuantizedType::kUint8:
      for (int64_t j = 0; j < w.n; ++j) out[j] = w.data[base + j];
      return;
    case QuantizedType::kInt4:
    case QuantizedType::kUint4: {
      const bool is_signed = w.type == QuantizedType::kInt4;
      for (int64_t j = 0; j < w.n; ++j) {
        const int64_t e = base + j;
        const int32_t nibble = (w.data[e >> 1] >> ((e & 1) * 4)) & 15;
        out[j] = is_signed && nibble > 7 ? nibble - 16 : nibble;
      }
      return;
    }
  }
}

}  // namespace

int64_t Int8ActivationBlock(const QuantizedMatrix& w) {
  return w.block_rows < w.k ? w.block_rows : kInt8ActivationBlock;
}

int64_t Int8RowsBytes(int64_t rows, int64_t k) {
  // The integers padded to whole blocks, and a scale and a sum per block:
  // at most one block per element (blocks of one row).
  const int64_t per_block = static_cast<int64_t>(sizeof(float) + sizeof(int32_t));
  const int64_t per_row =
      SaturatingAdd(SaturatingAdd(k, kInt8MaxBlock), SaturatingMul(k, per_block));
  return SaturatingMul(rows, per_row);
}

void QuantizeInt8Rows(DataType type, const void* a, int64_t lda, int64_t rows, int64_t k,
                      int64_t block, Int8Rows* out) {
  out->rows = rows;
  out->k = k;
  out->block = block;
  out->blocks = (k + block - 1) / block;
  out->ld = out->blocks * block;
  out->q.assign(static_cast<size_t>(rows * out->ld), int8_t{0});
  out->scale.assign(static_cast<size_t>(rows * out->blocks), 0.0f);
  out->sum.assign(static_cast<size_t>(rows * out->blocks), 0);
  std::vector<float> v(static_cast<size_t>(block));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < out->blocks; ++b) {
      const int64_t t0 = b * block, count = std::min(block, k - t0);
      const int64_t at = r * lda + t0;
      if (type == DataType::kFP32) {
        std::memcpy(v.data(), static_cast<const float*>(a) + at,
                    static_cast<size_t>(count) * sizeof(float));
      } else {
        HalfToFloatBlock(type, static_cast<const uint16_t*>(a) + at, v.data(), count);
      }
      QuantizeBlock(v.data(), count, out->q.data() + r * out->ld + t0,
                    out->scale.data() + r * out->blocks + b, out->sum.data() + r * out->blocks + b);
    }
  }
}

namespace {

constexpr int64_t kPackColumns = 64;

// Rows of a packed unit: a quad, or a pair of quads for 4-bit weights.
int64_t UnitRows(const QuantizedMatrix& w) { return IsFourBit(w.type) ? 8 : 4; }

// W[t, j] made unsigned (+128 for INT8, +8 for INT4).
uint8_t Unsigned(const QuantizedMatrix& w, int64_t t, int64_t j) {
  const int32_t q = QuantizedElement(w.type, w.data, w.first + t * w.n + j);
  return static_cast<uint8_t>(q + int8_dot_internal::UnsignedOffset(w.type));
}

}  // namespace

int64_t Int8PackedBytes(const QuantizedMatrix& w, int64_t block) {
  const int64_t chunks = (w.n + kPackColumns - 1) / kPackColumns;
  const int64_t unit = UnitRows(w);
  int64_t units = 0;  // over every block, each padded to whole units
  for (int64_t t0 = 0; t0 < w.k; t0 += block)
    units += (std::min(block, w.k - t0) + unit - 1) / unit;
  return SaturatingMul(SaturatingMul(units, chunks), 256);
}

bool Int8PackingCostsLittle(const QuantizedMatrix& w, int64_t block) {
  return Int8PackedBytes(w, block) <= 2 * QuantizedBytes(w.type, w.k * w.n) + 4096;
}

void PackInt8Weights(const QuantizedMatrix& w, int64_t block, uint8_t* out) {
  const int64_t chunks = (w.n + kPackColumns - 1) / kPackColumns;
  const int64_t unit = UnitRows(w);
  for (int64_t t0 = 0; t0 < w.k; t0 += block) {
    const int64_t t1 = std::min(t0 + block, w.k);
    const int64_t units = (t1 - t0 + unit - 1) / unit;
    for (int64_t ch = 0; ch < chunks; ++ch) {
      for (int64_t u = 0; u < units; ++u, out += 256) {
        std::memset(out, 0, 256);
        // Register q's lane i holds column 64ch + 16q + i, its byte x the
        // quad's row x (for 4-bit weights the high nibble the next quad's).
        for (int64_t q = 0; q < 4; ++q) {
          for (int64_t i = 0; i < 16; ++i) {
            const int64_t j = ch * kPackColumns + 16 * q + i;
            for (int64_t x = 0; x < 4 && j < w.n; ++x) {
              const int64_t t = t0 + u * unit + x;
              uint8_t v = t < t1 ? Unsigned(w, t, j) : 0;
              if (unit == 8 && t + 4 < t1) v |= static_cast<uint8_t>(Unsigned(w, t + 4, j) << 4);
              out[q * 64 + i * 4 + x] = v;
            }
          }
        }
      }
    }
  }
}

void Int8DotAccumulate(int64_t rows, const int64_t* a_rows, const Int8Rows& a, int64_t k_begin,
                       int64_t k_end, const QuantizedMatrix& w, float* c, int64_t ldc) {
  Kernels().int8_dot(rows, a_rows, a, k_begin, k_end, w, c, ldc);
}

namespace int8_dot_internal {

void Int8DotGeneric(int64_t rows, const int64_t* a_rows, const Int8Rows& a, int64_t k_begin,
                    int64_t k_end, const QuantizedMatrix& w, float* c, int64_t ldc) {
  const int64_t n = w.n, block = a.block;
  std::vector<int32_t> isum(static_cast<size_t>(n)), row(static_cast<size_t>(n));
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t src = a_rows != nullptr ? a_rows[i] : i;
    const int8_t* qa = a.q.data() + src * a.ld;
    float* out = c + i * ldc;
    for (int64_t t0 = k_begin; t0 < k_end; t0 += block) {
      const int64_t b = t0 / block, t1 = std::min(t0 + block, k_end);
      std::fill(isum.begin(), isum.end(), 0);
      for (int64_t t = t0; t < t1; ++t) {
        if (qa[t] == 0) continue;
        UnpackRow(w, t, row.data());
        const int32_t q = qa[t];
        for (int64_t j = 0; j < n; ++j) isum[j] += q * row[j];
      }
      const float sa = a.scale[src * a.blocks + b];
      const int32_t asum = a.sum[src * a.blocks + b];
      const int64_t scale_row = (t0 / w.block_rows) * w.scale_row_stride;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t s = scale_row + j * w.scale_col_stride;
        const int32_t z = w.zero_point != nullptr ? static_cast<int32_t>(w.zero_point[s]) : 0;
        out[j] = std::fma(sa * w.scale[s], static_cast<float>(isum[j] - z * asum), out[j]);
      }
    }
  }
}

}  // namespace int8_dot_internal
}  // namespace gemmserve
