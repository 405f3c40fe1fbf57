// Cache-blocked integer GEMM. numpy computes integer matmul with a naive
// triple loop; this kernel streams a panel of B that fits in L2 past every row
// of A with a unit-stride inner loop the compiler vectorises. Arithmetic is
// done in the unsigned type of the same width, where overflow is defined to
// wrap, which gives numpy's two's-complement results for the signed types too.
#include <algorithm>
#include <type_traits>

#include "server/ops/kernels/gemm.h"

namespace gemmserve {
namespace {

// A kc x nc panel of B: 128 x 256 elements is 256 KiB at 8 bytes, half of a
// typical L2, leaving room for the rows of A and C in flight.
constexpr int64_t kPanelK = 128;
constexpr int64_t kPanelN = 256;

template <typename U>
void MultiplyPanel(int64_t m, int64_t n, int64_t k, const U* a, int64_t lda,
                   const U* b, int64_t ldb, U* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    U* __restrict__ c_row = c + i * ldc;
    const U* a_row = a + i * lda;
    for (int64_t p = 0; p < k; ++p) {
      const U a_ip = a_row[p];
      const U* __restrict__ b_row = b + p * ldb;
      for (int64_t j = 0; j < n; ++j) c_row[j] += a_ip * b_row[j];
    }
  }
}

}  // namespace

template <typename T>
void IntGemmRowMajor(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
                     const T* b, int64_t ldb, T* c, int64_t ldc) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<T>;
  if (m <= 0 || n <= 0) return;
  for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T{0});
  const U* ua = reinterpret_cast<const U*>(a);
  const U* ub = reinterpret_cast<const U*>(b);
  U* uc = reinterpret_cast<U*>(c);
  for (int64_t j0 = 0; j0 < n; j0 += kPanelN) {
    const int64_t nb = std::min(kPanelN, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += kPanelK) {
      const int64_t kb = std::min(kPanelK, k - p0);
      MultiplyPanel<U>(m, nb, kb, ua + p0, lda, ub + p0 * ldb + j0, ldb, uc + j0, ldc);
    }
  }
}

template void IntGemmRowMajor<int32_t>(int64_t, int64_t, int64_t, const int32_t*, int64_t,
                                       const int32_t*, int64_t, int32_t*, int64_t);
template void IntGemmRowMajor<int64_t>(int64_t, int64_t, int64_t, const int64_t*, int64_t,
                                       const int64_t*, int64_t, int64_t*, int64_t);
template void IntGemmRowMajor<uint32_t>(int64_t, int64_t, int64_t, const uint32_t*, int64_t,
                                        const uint32_t*, int64_t, uint32_t*, int64_t);
template void IntGemmRowMajor<uint64_t>(int64_t, int64_t, int64_t, const uint64_t*, int64_t,
                                        const uint64_t*, int64_t, uint64_t*, int64_t);

}  // namespace gemmserve
