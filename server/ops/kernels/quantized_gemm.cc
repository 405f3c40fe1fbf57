// The quantized family's portable build, and its entry points through the
// kernel set (kernel_set.h).
#include "server/ops/kernels/quantized_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/ops/kernels/kernel_set.h"
#include "server/ops/kernels/quantized_layout.h"
#include "server/tensor/half.h"

namespace gemmserve {

int32_t QuantizedElement(QuantizedType type, const uint8_t* data, int64_t e) {
  switch (type) {
    case QuantizedType::kInt8: return static_cast<int8_t>(data[e]);
    case QuantizedType::kUint8: return data[e];
    case QuantizedType::kInt4:
    case QuantizedType::kUint4: {
      const uint32_t nibble = (data[e >> 1] >> ((e & 1) * 4)) & 15u;
      return type == QuantizedType::kInt4 ? static_cast<int32_t>(nibble ^ 8u) - 8
                                          : static_cast<int32_t>(nibble);
    }
  }
  return 0;
}

int64_t QuantizedBytes(QuantizedType type, int64_t elements) {
  return type == QuantizedType::kInt8 || type == QuantizedType::kUint8 ? elements
                                                                       : (elements + 1) / 2;
}

bool ScalesFactorable(const float* scale, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float m = std::fabs(scale[i]);
    if (!(m == 0.0f || (m >= 0x1p-126f && m <= 0x1p100f))) return false;  // NaN: false
  }
  return true;
}

void QuantizedGemmAccumulate(int64_t rows, int64_t k_begin, int64_t k_end, const float* a,
                             int64_t lda, const QuantizedMatrix& w, float* c, int64_t ldc) {
  Kernels().quantized(rows, k_begin, k_end, a, lda, w, c, ldc);
}

int ScalesMinExponent(const float* scale, int64_t count) {
  int min = 255;
  for (int64_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &scale[i], sizeof bits);
    if ((bits & 0x7fffffffu) == 0) continue;
    min = std::min(min, static_cast<int>((bits >> 23) & 0xffu));
  }
  return min;
}

void DequantizeBf16Panels(const QuantizedMatrix& w, int64_t k_begin, int64_t k_end, int64_t j0,
                          int64_t width, uint16_t* out) {
  Kernels().dequantize_bf16_panels(w, k_begin, k_end, j0, width, out);
}

namespace streaming_internal {
namespace {
namespace generic {

#include "server/ops/kernels/half_rows_generic.inc"

#include "server/ops/kernels/streaming_gemm_impl.inc"  // the row kernels it shares
#include "server/ops/kernels/quantized_gemm_impl.inc"

}  // namespace generic
}  // namespace

void QuantizedGeneric(int64_t rows, int64_t k_begin, int64_t k_end, const float* a, int64_t lda,
                      const QuantizedMatrix& w, float* c, int64_t ldc) {
  generic::AccumulateQuantized(rows, k_begin, k_end, a, lda, w, c, ldc);
}

void DequantizeBf16PanelsGeneric(const QuantizedMatrix& w, int64_t k_begin, int64_t k_end,
                                 int64_t j0, int64_t width, uint16_t* out) {
  const int64_t k = k_end - k_begin;
  const int64_t stride = Bf16PanelStride(k), panels = Bf16PanelCount(width);
  for (int64_t p = 0; p < panels; ++p) {
    uint16_t* panel = out + p * stride;
    for (int64_t rr = 0; rr < (k + 1) / 2 * 2; ++rr) {
      for (int64_t l = 0; l < kBf16PanelLanes; ++l) {
        const int64_t j = p * kBf16PanelLanes + l;
        uint16_t v = 0;
        if (rr < k && j < width) {
          const int64_t r = k_begin + rr, col = j0 + j;
          const int64_t at = (r / w.block_rows) * w.scale_row_stride + col * w.scale_col_stride;
          const float q =
              static_cast<float>(QuantizedElement(w.type, w.data, w.first + r * w.n + col));
          const float z = w.zero_point == nullptr ? 0.0f : w.zero_point[at];
          v = FloatToBFloat16((q - z) * w.scale[at]);
        }
        panel[(rr / 2) * 2 * kBf16PanelLanes + 2 * l + (rr % 2)] = v;
      }
    }
  }
}

}  // namespace streaming_internal

}  // namespace gemmserve
