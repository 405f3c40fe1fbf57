// Per-instruction-set builds of the integer GEMM (see int_gemm_impl.inc);
// the kernel set (kernel_set.h) picks one.
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_INT_GEMM_INTERNAL_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_INT_GEMM_INTERNAL_H_

#include <cstdint>

namespace gemmserve {
namespace int_gemm_internal {

#define GEMMSERVE_INT_GEMM_DECLARE(isa)                                                    \
  void IntGemmRows32_##isa(int64_t row_begin, int64_t row_end, int64_t n, int64_t k,       \
                           const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb, \
                           uint32_t* c, int64_t ldc);                                      \
  void IntGemmRows64_##isa(int64_t row_begin, int64_t row_end, int64_t n, int64_t k,       \
                           const uint64_t* a, int64_t lda, const uint64_t* b, int64_t ldb, \
                           uint64_t* c, int64_t ldc);
GEMMSERVE_INT_GEMM_DECLARE(generic)
GEMMSERVE_INT_GEMM_DECLARE(avx2)
GEMMSERVE_INT_GEMM_DECLARE(avx512)
#undef GEMMSERVE_INT_GEMM_DECLARE

// Defines a build's two entry points on the IntGemmRows of the
// int_gemm_impl.inc its file has just included (in its own namespace).
#define GEMMSERVE_INT_GEMM_DEFINE(isa)                                                     \
  void IntGemmRows32_##isa(int64_t row_begin, int64_t row_end, int64_t n, int64_t k,       \
                           const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb, \
                           uint32_t* c, int64_t ldc) {                                     \
    IntGemmRows<uint32_t>(row_begin, row_end, n, k, a, lda, b, ldb, c, ldc);               \
  }                                                                                        \
  void IntGemmRows64_##isa(int64_t row_begin, int64_t row_end, int64_t n, int64_t k,       \
                           const uint64_t* a, int64_t lda, const uint64_t* b, int64_t ldb, \
                           uint64_t* c, int64_t ldc) {                                     \
    IntGemmRows<uint64_t>(row_begin, row_end, n, k, a, lda, b, ldb, c, ldc);               \
  }

// "avx512", "avx2" or "generic": the build IntGemmRowMajor uses here.
const char* IntGemmIsa();

}  // namespace int_gemm_internal
}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_INT_GEMM_INTERNAL_H_
