// The streaming decode kernel built for AVX2 (compiled with -mavx2 -mfma
// -mf16c; it runs only where the kernel set, kernel_set.h, names this
// build): CPUs without AVX-512 get eight-wide vectors and F16C conversions.
// The quantized family's AVX2 build is quantized_gemm_avx2.cc.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "server/ops/kernels/quantized_gemm.h"
#include "server/ops/kernels/streaming_gemm.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace streaming_internal {
namespace {
namespace avx2 {

#include "server/ops/kernels/half_rows_avx2.inc"

#include "server/ops/kernels/streaming_gemm_impl.inc"

}  // namespace avx2
}  // namespace

void AccumulateAvx2(DataType b_type, int64_t rows, int64_t k_begin, int64_t k_end, int64_t n,
                    const float* a, int64_t lda, const void* b, int64_t ldb, float* c,
                    int64_t ldc) {
  avx2::AccumulateFloat(b_type, rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
}

void AccumulateAvx2(int64_t rows, int64_t k_begin, int64_t k_end, int64_t n, const double* a,
                    int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc) {
  avx2::AccumulateDirect(rows, k_begin, k_end, n, a, lda, b, ldb, c, ldc);
}

void WidenAvx2(DataType type, const uint16_t* src, float* dst, int64_t n) {
  if (type == DataType::kBF16) {
    avx2::WidenBf16Row(src, dst, n);
  } else {
    avx2::WidenHalfRow(src, dst, n);
  }
}

}  // namespace streaming_internal
}  // namespace gemmserve
