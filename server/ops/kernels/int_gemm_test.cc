// Every build of the integer kernel (portable, AVX2, AVX-512 where this CPU
// has them) against the reference, including the 4-row unroll remainder,
// panel edges (K 128, N 256) and wrap-around.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "server/ops/kernels/int_gemm_internal.h"
#include "server/ops/kernels/reference_gemm.h"

namespace gemmserve {
namespace int_gemm_internal {
namespace {

struct Dims {
  int64_t m, n, k;
};
const Dims kDims[] = {{1, 1, 1},     {3, 5, 7},     {2, 257, 3},  {5, 17, 129},
                      {4, 256, 128}, {7, 300, 131}, {16, 33, 260}};

template <typename U, typename Fn>
void Check(Fn fn, const char* isa, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (const Dims& d : kDims) {
    const int64_t lda = d.k + 3, ldb = d.n + 2, ldc = d.n + 1;
    std::vector<U> a(d.m * lda), b(d.k * ldb), c(d.m * ldc, U(0x5a)), want(d.m * ldc, U(0x5a));
    // Full-range values: products and sums overflow and must wrap.
    for (U& v : a) v = static_cast<U>(rng());
    for (U& v : b) v = static_cast<U>(rng());
    // Two calls over row halves, as the threaded driver makes them.
    fn(0, d.m / 2, d.n, d.k, a.data(), lda, b.data(), ldb, c.data(), ldc);
    fn(d.m / 2, d.m, d.n, d.k, a.data(), lda, b.data(), ldb, c.data(), ldc);
    ReferenceGemm(sizeof(U) == 4 ? DataType::kUINT32 : DataType::kUINT64, d.m, d.n, d.k, a.data(),
                  lda, b.data(), ldb, want.data(), ldc);
    ASSERT_EQ(c, want) << isa << " m=" << d.m << " n=" << d.n << " k=" << d.k;
  }
}

TEST(IntGemmBuildsTest, EveryBuildThisCpuRunsMatchesTheReference) {
  Check<uint32_t>(IntGemmRows32_generic, "generic", 1);
  Check<uint64_t>(IntGemmRows64_generic, "generic", 2);
  if (__builtin_cpu_supports("avx2")) {
    Check<uint32_t>(IntGemmRows32_avx2, "avx2", 3);
    Check<uint64_t>(IntGemmRows64_avx2, "avx2", 4);
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    Check<uint32_t>(IntGemmRows32_avx512, "avx512", 5);
    Check<uint64_t>(IntGemmRows64_avx512, "avx512", 6);
  }
}

}  // namespace
}  // namespace int_gemm_internal
}  // namespace gemmserve
