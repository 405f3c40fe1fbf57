// FP16 / BF16 GEMM on top of BLIS sgemm. The operands are widened to FP32 a
// block at a time (kRowBlock rows of A and C; B once per call, since every row
// block reuses all of it), multiplied with FP32 accumulation, and rounded once.
#include <algorithm>

#include "server/common/status_macros.h"
#include "server/ops/kernels/gemm.h"
#include "server/ops/kernels/streaming_gemm.h"
#include "server/tensor/half.h"
#include "server/tensor/tensor.h"

namespace gemmserve {
namespace {

// Rows of A and C widened per step: bounds scratch to kRowBlock * (k + n)
// floats while keeping each sgemm call large enough to run at speed.
constexpr int64_t kRowBlock = 256;

}  // namespace

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

absl::Status HalfGemmRowMajor(DataType type, int64_t m, int64_t n, int64_t k,
                              const uint16_t* a, int64_t lda, const uint16_t* b,
                              int64_t ldb, uint16_t* c, int64_t ldc, int threads) {
  if (m <= 0 || n <= 0) return absl::OkStatus();
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, uint16_t{0});
    return absl::OkStatus();
  }
  const int64_t rows = std::min(m, kRowBlock);
  GEMMSERVE_ASSIGN_OR_RETURN(AlignedBuffer b32, AlignedBuffer::Allocate(k * n * 4));
  GEMMSERVE_ASSIGN_OR_RETURN(AlignedBuffer a32, AlignedBuffer::Allocate(rows * k * 4));
  GEMMSERVE_ASSIGN_OR_RETURN(AlignedBuffer c32, AlignedBuffer::Allocate(rows * n * 4));
  float* bf = static_cast<float*>(b32.data());
  float* af = static_cast<float*>(a32.data());
  float* cf = static_cast<float*>(c32.data());
  for (int64_t p = 0; p < k; ++p) HalfToFloatBlock(type, b + p * ldb, bf + p * n, n);
  for (int64_t i0 = 0; i0 < m; i0 += rows) {
    const int64_t mb = std::min(rows, m - i0);
    for (int64_t i = 0; i < mb; ++i) HalfToFloatBlock(type, a + (i0 + i) * lda, af + i * k, k);
    SgemmRowMajor(mb, n, k, af, k, bf, n, cf, n, threads);
    for (int64_t i = 0; i < mb; ++i) FloatToHalfBlock(type, cf + i * n, c + (i0 + i) * ldc, n);
  }
  return absl::OkStatus();
}

}  // namespace gemmserve
