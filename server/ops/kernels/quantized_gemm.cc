#include "server/ops/kernels/quantized_gemm.h"

#include <cmath>

#include "server/ops/kernels/streaming_gemm.h"

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
  if (streaming_internal::HaveAvx512()) {
    streaming_internal::QuantizedAvx512(rows, k_begin, k_end, a, lda, w, c, ldc);
  } else {
    streaming_internal::QuantizedGeneric(rows, k_begin, k_end, a, lda, w, c, ldc);
  }
}

}  // namespace gemmserve
