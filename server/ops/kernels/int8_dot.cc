// The portable build of the integer dot products on 8-bit activations
// (int8_dot.h): the reference every faster build is held to bit for bit.
#include "server/ops/kernels/int8_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "server/ops/kernels/kernel_set.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace {

float LoadValue(DataType type, const void* a, int64_t i) {
  switch (type) {
    case DataType::kFP32: return static_cast<const float*>(a)[i];
    case DataType::kFP16: return HalfToFloat(static_cast<const uint16_t*>(a)[i]);
    default: return BFloat16ToFloat(static_cast<const uint16_t*>(a)[i]);
  }
}

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
  for (int64_t t = 0; t < count; ++t) {
    // nearbyint rounds half to even in the default rounding mode.
    const float r = std::min(127.0f, std::max(-127.0f, std::nearbyint(v[t] * inv)));
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
      for (int64_t t = 0; t < count; ++t) v[t] = LoadValue(type, a, r * lda + t0 + t);
      QuantizeBlock(v.data(), count, out->q.data() + r * out->ld + t0,
                    out->scale.data() + r * out->blocks + b, out->sum.data() + r * out->blocks + b);
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
