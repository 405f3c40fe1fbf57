// Integer GEMM: the portable build of int_gemm_impl.inc, the build the
// kernel set (kernel_set.h) chose for this CPU called on rows of C split
// across threads.
#include <omp.h>

#include <algorithm>
#include <type_traits>

#include "server/ops/kernels/gemm.h"
#include "server/ops/kernels/kernel_set.h"
#include "server/ops/kernels/int_gemm_internal.h"

namespace gemmserve {
namespace int_gemm_internal {
namespace {
#include "server/ops/kernels/int_gemm_impl.inc"
}  // namespace

GEMMSERVE_INT_GEMM_DEFINE(generic)

const char* IntGemmIsa() { return Kernels().int_isa; }

}  // namespace int_gemm_internal

template <typename T>
void IntGemmRowMajor(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
                     int64_t ldb, T* c, int64_t ldc, int threads) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<T>;
  using namespace int_gemm_internal;
  if (m <= 0 || n <= 0) return;
  const U* ua = reinterpret_cast<const U*>(a);
  const U* ub = reinterpret_cast<const U*>(b);
  U* uc = reinterpret_cast<U*>(c);
  auto rows = [&](int64_t begin, int64_t end) {
    if constexpr (sizeof(U) == 4) {
      Kernels().int_rows32(begin, end, n, k, ua, lda, ub, ldb, uc, ldc);
    } else {
      Kernels().int_rows64(begin, end, n, k, ua, lda, ub, ldb, uc, ldc);
    }
  };
  // Row blocks of at least 16, so that each thread streams B panels for
  // enough rows to amortise them.
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(threads, m / 16));
  if (blocks == 1) {
    rows(0, m);
    return;
  }
#pragma omp parallel for num_threads(static_cast <int>(blocks)) schedule(static, 1)
  for (int64_t t = 0; t < blocks; ++t) rows(m * t / blocks, m * (t + 1) / blocks);
}

template void IntGemmRowMajor<int32_t>(int64_t, int64_t, int64_t, const int32_t*, int64_t,
                                       const int32_t*, int64_t, int32_t*, int64_t, int);
template void IntGemmRowMajor<int64_t>(int64_t, int64_t, int64_t, const int64_t*, int64_t,
                                       const int64_t*, int64_t, int64_t*, int64_t, int);
template void IntGemmRowMajor<uint32_t>(int64_t, int64_t, int64_t, const uint32_t*, int64_t,
                                        const uint32_t*, int64_t, uint32_t*, int64_t, int);
template void IntGemmRowMajor<uint64_t>(int64_t, int64_t, int64_t, const uint64_t*, int64_t,
                                        const uint64_t*, int64_t, uint64_t*, int64_t, int);

}  // namespace gemmserve
