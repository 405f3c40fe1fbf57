// The streaming family's portable build, and its entry points through the
// kernel set (kernel_set.h).
#include "server/ops/kernels/streaming_gemm.h"

#include <algorithm>

#include "server/ops/kernels/kernel_set.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace streaming_internal {
namespace {
namespace generic {

#include "server/ops/kernels/half_rows_generic.inc"

#include "server/ops/kernels/streaming_gemm_impl.inc"

}  // namespace generic
}  // namespace

GEMMSERVE_STREAMING_DEFINE(Generic, generic, AccumulateFloat)

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
