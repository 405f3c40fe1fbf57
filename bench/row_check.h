// Checks sampled rows of a GEMM result against a reference computed here in
// double precision (wrap-around for integers), so that gemmserve-bench cannot
// time a kernel that computes the wrong thing. One row of C = A * B costs k*n
// multiply-adds: a few rows check even the largest case in milliseconds.
//
// Floating types pass when |got - ref| <= 2*k*u*sum_p|a_p*b_pj| + v*|ref| + t,
// the forward error bound of a k-term sum accumulated with unit roundoff u
// (FP64 for FP64, else FP32) plus one rounding to the output type (unit
// roundoff v, subnormal spacing t). A row taken from the wrong token or group
// misses it by orders of magnitude. Integers must match exactly.
//
//   GEMMSERVE_RETURN_IF_ERROR(CheckGroupedMatMulSample(plan, x, w, idx, out));
#ifndef GEMMSERVE_SERVER_BENCH_ROW_CHECK_H_
#define GEMMSERVE_SERVER_BENCH_ROW_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/ops/grouped_matmul.h"
#include "server/ops/matmul.h"
#include "server/tensor/datatype.h"
#include "server/tensor/tensor.h"

namespace gemmserve {

// c_row (1 x n) against a_row (1 x k) * b (k x n, row stride n). INTERNAL on
// a mismatch, naming `what`, the column, the value and the expected value.
absl::Status CheckGemmRow(DataType type, const void* a_row, const void* b, int64_t k, int64_t n,
                          const void* c_row, absl::string_view what);

// Every slot of tokens 0, 1, M/2 and M-1 of a GroupedMatMul without bias.
absl::Status CheckGroupedMatMulSample(const GroupedMatMulPlan& plan, const Tensor& input,
                                      const Tensor& weights, const Tensor& indices,
                                      const Tensor& output);

// Rows 0, 1, R/2 and R-1 of a MatMul output seen as [R, N], R = batch * M.
// B is either [K, N] (shared by the batch) or has the batch of A (no other
// broadcasting).
absl::Status CheckMatMulSample(const MatMulPlan& plan, const Tensor& a, const Tensor& b,
                               const Tensor& y);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_BENCH_ROW_CHECK_H_
