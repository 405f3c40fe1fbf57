// With blis_half_gemm.cc, the only files that include blis.h: BLIS aborts the process on invalid
// arguments, so every call goes through these wrappers, which are reached only
// with validated, non-degenerate sizes.
#include <blis.h>

#include <algorithm>

#include "server/ops/kernels/gemm.h"

namespace gemmserve {
namespace {

// Row-major m x n with row stride ld as BLIS strides. BLIS rejects a row
// stride below the row length, and for a single row or column the stride
// along the unit dimension is irrelevant, so keep it legal.
inline inc_t RowStride(int64_t ld, int64_t cols) { return std::max<int64_t>({ld, cols, 1}); }

template <typename T>
bool HandleDegenerate(int64_t m, int64_t n, int64_t k, T* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return true;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T{0});
    return true;
  }
  return false;
}

rntm_t ThreadedRuntime(int threads) {
  rntm_t rntm;
  bli_rntm_init(&rntm);
  bli_rntm_set_num_threads(std::max(threads, 1), &rntm);
  return rntm;
}

}  // namespace

void SgemmRowMajor(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                   int64_t ldb, float* c, int64_t ldc, int threads) {
  if (HandleDegenerate(m, n, k, c, ldc)) return;
  rntm_t rntm = ThreadedRuntime(threads);
  float one = 1.0f, zero = 0.0f;
  bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, const_cast<float*>(a),
               RowStride(lda, k), 1, const_cast<float*>(b), RowStride(ldb, n), 1, &zero, c,
               RowStride(ldc, n), 1, nullptr, &rntm);
}

void DgemmRowMajor(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
                   int64_t ldb, double* c, int64_t ldc, int threads) {
  if (HandleDegenerate(m, n, k, c, ldc)) return;
  rntm_t rntm = ThreadedRuntime(threads);
  double one = 1.0, zero = 0.0;
  bli_dgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, const_cast<double*>(a),
               RowStride(lda, k), 1, const_cast<double*>(b), RowStride(ldb, n), 1, &zero, c,
               RowStride(ldc, n), 1, nullptr, &rntm);
}

}  // namespace gemmserve
