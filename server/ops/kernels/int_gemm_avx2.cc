// The integer GEMM built for AVX2 (compiled with -mavx2; it runs
// only where the kernel set, kernel_set.h, names this build).
#include <algorithm>
#include <cstdint>

#include "server/ops/kernels/int_gemm_internal.h"

namespace gemmserve {
namespace int_gemm_internal {
namespace {
#include "server/ops/kernels/int_gemm_impl.inc"
}  // namespace

GEMMSERVE_INT_GEMM_DEFINE(avx2)

}  // namespace int_gemm_internal
}  // namespace gemmserve
