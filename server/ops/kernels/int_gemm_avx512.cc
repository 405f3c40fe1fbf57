// The integer GEMM built for AVX-512 (compiled with -mavx512f -mavx512dq
// -mavx512bw -mavx512vl; it runs only where the kernel set, kernel_set.h,
// names this build).
#include <algorithm>
#include <cstdint>

#include "server/ops/kernels/int_gemm_internal.h"

namespace gemmserve {
namespace int_gemm_internal {
namespace {
#include "server/ops/kernels/int_gemm_impl.inc"
}  // namespace

GEMMSERVE_INT_GEMM_DEFINE(avx512)

}  // namespace int_gemm_internal
}  // namespace gemmserve
