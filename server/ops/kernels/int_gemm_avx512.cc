// The integer GEMM built for AVX512; this file alone gets the AVX512 compile
// flags (server/CMakeLists.txt) and runs only where int_gemm.cc has seen them.
#include <algorithm>
#include <cstdint>

#include "server/ops/kernels/int_gemm_internal.h"

namespace gemmserve {
namespace int_gemm_internal {
namespace {
#include "server/ops/kernels/int_gemm_impl.inc"
}  // namespace

void IntGemmRows32_avx512(int64_t row_begin, int64_t row_end, int64_t n, int64_t k,
                          const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb,
                          uint32_t* c, int64_t ldc) {
  IntGemmRows32(row_begin, row_end, n, k, a, lda, b, ldb, c, ldc);
}
void IntGemmRows64_avx512(int64_t row_begin, int64_t row_end, int64_t n, int64_t k,
                          const uint64_t* a, int64_t lda, const uint64_t* b, int64_t ldb,
                          uint64_t* c, int64_t ldc) {
  IntGemmRows64(row_begin, row_end, n, k, a, lda, b, ldb, c, ldc);
}

}  // namespace int_gemm_internal
}  // namespace gemmserve
