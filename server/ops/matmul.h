// The ONNX MatMul operator with numpy.matmul semantics, on Tensors.
//
// PlanMatMul checks two operand shapes and computes the output shape without
// touching data: a 1-D A is promoted to [1, K] and a 1-D B to [K, 1] (the
// added dimension is dropped from the result), leading batch dimensions
// broadcast, K must agree, and a rank-0 operand is rejected as numpy does.
// RunMatMul then fills a pre-allocated output: when B has no batch of its own
// the batch is folded into M (one GEMM); otherwise one GEMM per batch entry.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(MatMulPlan plan, PlanMatMul(a.shape(), b.shape()));
//   GEMMSERVE_ASSIGN_OR_RETURN(Tensor y, Tensor::Allocate(a.type(), plan.output_shape));
//   GEMMSERVE_RETURN_IF_ERROR(RunMatMul(plan, a, b, &y, /*threads=*/2));
#ifndef GEMMSERVE_SERVER_OPS_MATMUL_H_
#define GEMMSERVE_SERVER_OPS_MATMUL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/ops/gemm_scheduler.h"
#include "server/tensor/shape.h"
#include "server/tensor/tensor.h"

namespace gemmserve {

struct MatMulPlan {
  int64_t m = 0, n = 0, k = 0;
  Shape batch_shape;        // broadcast batch dimensions
  Shape a_batch, b_batch;   // operand batch dims, left-padded with 1 to batch rank
  int64_t batch_count = 1;  // product of batch_shape
  Shape output_shape;
  int64_t output_elements = 0;
  // Multiply-adds, for cost accounting (saturates at INT64_MAX).
  int64_t flops = 0;
};

// INVALID_ARGUMENT naming the operand for rank 0, mismatched K, batch
// dimensions that do not broadcast, or any size that overflows int64.
absl::StatusOr<MatMulPlan> PlanMatMul(absl::Span<const int64_t> a_shape,
                                      absl::Span<const int64_t> b_shape);

// `a`, `b` and `y` must have the shapes the plan was made from and one
// datatype. Needs scratch only for half types (RESOURCE_EXHAUSTED if denied).
absl::Status RunMatMul(const MatMulPlan& plan, const Tensor& a, const Tensor& b, Tensor* y,
                       int threads);

// The GEMM problems RunMatMul would run, appended to `problems`, so the
// batcher can run several requests' problems in one call. They point into the
// tensors, which must outlive them. K = 0 needs no problem: `y` is zeroed.
absl::Status AppendMatMulProblems(const MatMulPlan& plan, const Tensor& a, const Tensor& b,
                                  Tensor* y, std::vector<GemmProblem>* problems);

// Bytes the problems of `plan` hold while they run beyond A, B and Y (their
// list and the scheduler's scratch, GemmWorkBytes), known before anything is
// allocated: a batch of 2^29 empty matrices is 2^29 problems.
int64_t MatMulWorkBytes(const MatMulPlan& plan, DataType type, int threads);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_MATMUL_H_
