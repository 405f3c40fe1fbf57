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

GEMMSERVE_STREAMING_DEFINE(Avx2, avx2, AccumulateFloat)

}  // namespace streaming_internal
}  // namespace gemmserve
