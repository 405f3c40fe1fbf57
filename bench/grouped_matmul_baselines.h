// The two GroupedMatMul baselines of shared/BENCHMARKS.md, measured beside the
// fused kernel (RunGroupedMatMul) by gemmserve-bench:
//
//   per_group_loop      sort the (token, slot) pairs by group; for each group
//                       that is used, gather its rows, run one BLIS GEMM
//                       against the group's [K, N] weights, scatter. Half
//                       types widen the rows and the whole group's weights to
//                       FP32 for SgemmRowMajor and round once on the way out.
//   onnx_decomposition  the ONNX function body run op by op, as a runtime
//                       without a fused kernel would: Gather the weights to
//                       [M*S, K, N] (materialised, in the input datatype),
//                       Expand the input to [M*S, 1, K], batched MatMul (one
//                       m = 1 GEMM per pair, through GemmRowMajor), and the
//                       [M*S, 1, N] result is the [M, S, N] output.
//
// Both take tensors that PlanGroupedMatMul and ValidateGroupIndices accepted,
// without bias, and use `threads` for every GEMM, like the fused kernel.
//
//   OnnxDecompositionScratch scratch;  // reused across calls
//   GEMMSERVE_RETURN_IF_ERROR(RunOnnxDecomposition(plan, x, w, idx, &scratch, &out, 2));
#ifndef GEMMSERVE_SERVER_BENCH_GROUPED_MATMUL_BASELINES_H_
#define GEMMSERVE_SERVER_BENCH_GROUPED_MATMUL_BASELINES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/ops/grouped_matmul.h"
#include "server/tensor/datatype.h"
#include "server/tensor/tensor.h"

namespace gemmserve {

// Scratch sized per call like the fused kernel's (the longest group's rows,
// plus one group's widened weights for half types). RESOURCE_EXHAUSTED if it
// cannot be had.
absl::Status RunPerGroupLoop(const GroupedMatMulPlan& plan, const Tensor& input,
                             const Tensor& weights, const Tensor& indices, Tensor* output,
                             int threads);

// The materialised intermediates of the decomposition. The caller keeps them
// across calls, so that a benchmark times the ops and not first-touch page
// faults (as a runtime with an arena allocator would): the baseline gets its
// most favourable memory treatment.
struct OnnxDecompositionScratch {
  AlignedBuffer gathered_weights;  // [M*S, K, N]
  AlignedBuffer expanded_input;    // [M*S, 1, K]
};

// Bytes of the [M*S, K, N] gathered weights: what makes this baseline
// memory-hungry. INVALID_ARGUMENT on int64 overflow.
absl::StatusOr<int64_t> OnnxGatheredWeightsBytes(const GroupedMatMulPlan& plan, DataType type);

// Grows `scratch` when it is too small (RESOURCE_EXHAUSTED if denied).
absl::Status RunOnnxDecomposition(const GroupedMatMulPlan& plan, const Tensor& input,
                                  const Tensor& weights, const Tensor& indices,
                                  OnnxDecompositionScratch* scratch, Tensor* output, int threads);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_BENCH_GROUPED_MATMUL_BASELINES_H_
