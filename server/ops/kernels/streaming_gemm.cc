#include "server/ops/kernels/streaming_gemm.h"

#include <algorithm>

#include "server/ops/kernels/cpu_features.h"
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

bool HaveAvx512() { return Cpu().Avx512Build(); }

bool HaveAvx2() { return Cpu().Avx2Build(); }

bool HaveAvx512Bf16() { return Cpu().Avx512Build() && Cpu().avx512_bf16; }

}  // namespace streaming_internal

void StreamingGemmAccumulate(DataType b_type, int64_t rows, int64_t k_begin, int64_t k_end,
                             int64_t n, const float* a, int64_t lda, const void* b, int64_t ldb,
                             float* c, int64_t ldc) {
  if (streaming_internal::HaveAvx512()) {
    streaming_internal::AccumulateAvx512(b_type, rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
  } else if (streaming_internal::HaveAvx2()) {
    streaming_internal::AccumulateAvx2(b_type, rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
  } else {
    streaming_internal::AccumulateGeneric(b_type, rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
  }
}

void StreamingGemmAccumulate(int64_t rows, int64_t k_begin, int64_t k_end, int64_t n,
                             const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
                             int64_t ldc) {
  if (streaming_internal::HaveAvx512()) {
    streaming_internal::AccumulateAvx512(rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
  } else if (streaming_internal::HaveAvx2()) {
    streaming_internal::AccumulateAvx2(rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
  } else {
    streaming_internal::AccumulateGeneric(rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
  }
}

void WidenToFloat(DataType type, const uint16_t* src, float* dst, int64_t n) {
  if (streaming_internal::HaveAvx512()) {
    streaming_internal::WidenAvx512(type, src, dst, n);
  } else if (streaming_internal::HaveAvx2()) {
    streaming_internal::WidenAvx2(type, src, dst, n);
  } else if (type == DataType::kBF16) {
    streaming_internal::generic::WidenBf16Row(src, dst, n);
  } else {
    streaming_internal::generic::WidenHalfRow(src, dst, n);
  }
}

const char* StreamingGemmIsa() {
  if (streaming_internal::HaveAvx512()) return "avx512";
  return streaming_internal::HaveAvx2() ? "avx2" : "generic";
}

}  // namespace gemmserve
