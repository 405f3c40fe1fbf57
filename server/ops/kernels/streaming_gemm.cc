#include "server/ops/kernels/streaming_gemm.h"

#include <algorithm>

#include "server/ops/kernels/cpu_features.h"
#include "server/ops/kernels/kernel_set.h"
#include "server/ops/kernels/quantized_gemm.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace streaming_internal {
namespace {
namespace generic {

inline void WidenHalfRow(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = HalfToFloat(src[j]);
}

inline void RoundRowToHalf(float* dst, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = HalfToFloat(FloatToHalf(dst[j]));
}

#include "server/ops/kernels/streaming_gemm_impl.inc"
#include "server/ops/kernels/quantized_gemm_impl.inc"

}  // namespace generic
}  // namespace

void QuantizedGeneric(int64_t rows, int64_t k_begin, int64_t k_end, const float* a, int64_t lda,
                      const QuantizedMatrix& w, float* c, int64_t ldc) {
  generic::AccumulateQuantized(rows, k_begin, k_end, a, lda, w, c, ldc);
}

void AccumulateGeneric(DataType b_type, int64_t rows, int64_t k_begin, int64_t k_end, int64_t n,
                       const float* a, int64_t lda, const void* b, int64_t ldb, float* c,
                       int64_t ldc) {
  generic::AccumulateFloat(b_type, rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
}

void AccumulateGeneric(int64_t rows, int64_t k_begin, int64_t k_end, int64_t n, const double* a,
                       int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc) {
  generic::AccumulateDirect(rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
}

void WidenGeneric(DataType type, const uint16_t* src, float* dst, int64_t n) {
  if (type == DataType::kBF16) {
    generic::WidenBf16Row(src, dst, n);
  } else {
    generic::WidenHalfRow(src, dst, n);
  }
}

}  // namespace streaming_internal

void StreamingGemmAccumulate(DataType b_type, int64_t rows, int64_t k_begin, int64_t k_end,
                             int64_t n, const float* a, int64_t lda, const void* b, int64_t ldb,
                             float* c, int64_t ldc) {
  Kernels().stream_f32(b_type, rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
}

void StreamingGemmAccumulate(int64_t rows, int64_t k_begin, int64_t k_end, int64_t n,
                             const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
                             int64_t ldc) {
  Kernels().stream_f64(rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
}

void WidenToFloat(DataType type, const uint16_t* src, float* dst, int64_t n) {
  Kernels().widen(type, src, dst, n);
}

const char* StreamingGemmIsa() { return Kernels().streaming_isa; }

}  // namespace gemmserve
