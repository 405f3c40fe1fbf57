// FP16 / BF16 GEMM: HalfPackedGemm (blis_half_gemm.cc) into an FP32 block of
// kHalfGemmRowBlock rows of C, rounded once into C.
#include <algorithm>

#include "server/common/status_macros.h"
#include "server/ops/kernels/gemm.h"
#include "server/ops/kernels/streaming_gemm.h"
#include "server/tensor/half.h"
#include "server/tensor/tensor.h"

namespace gemmserve {
void HalfToFloatBlock(DataType type, const uint16_t* in, float* out, int64_t count) {
  WidenToFloat(type, in, out, count);
}

void FloatToHalfBlock(DataType type, const float* in, uint16_t* out, int64_t count) {
  if (type == DataType::kBF16) {
    for (int64_t i = 0; i < count; ++i) out[i] = FloatToBFloat16(in[i]);
  } else {
    for (int64_t i = 0; i < count; ++i) out[i] = FloatToHalf(in[i]);
  }
}

absl::Status HalfGemmRowMajor(DataType type, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                              int64_t lda, const uint16_t* b, int64_t ldb, uint16_t* c, int64_t ldc,
                              int threads) {
  if (m <= 0 || n <= 0) return absl::OkStatus();
  // Rows of C per step bound the scratch; B is repacked once per step, a
  // small cost against 2 * kHalfGemmRowBlock flops per element of B.
  const int64_t rows = std::min(m, kHalfGemmRowBlock);
  GEMMSERVE_ASSIGN_OR_RETURN(AlignedBuffer c32, AlignedBuffer::Allocate(rows * n * 4));
  float* cf = static_cast<float*>(c32.data());
  for (int64_t i0 = 0; i0 < m; i0 += rows) {
    const int64_t mb = std::min(rows, m - i0);
    HalfPackedGemm(type, mb, n, k, a + i0 * lda, lda, nullptr, b, ldb, cf, n, threads);
    for (int64_t i = 0; i < mb; ++i) FloatToHalfBlock(type, cf + i * n, c + (i0 + i) * ldc, n);
  }
  return absl::OkStatus();
}

}  // namespace gemmserve
