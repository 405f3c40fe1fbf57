// The ONNX GroupedMatMul operator (opset 29), the mixture-of-experts layer:
//
//   output[m, s, :] = input[m, :] @ weights[group_indices[m, s]] (+ bias[group])
//
// with input [M, K], weights [G, K, N], group_indices [M, S] (INT32 or INT64),
// optional bias [G, N], output [M, S, N].
//
// The kernel never materialises the [M*S, K, N] selected weights of the ONNX
// function body. It sorts the (token, slot) pairs by group, and for each group
// that is used gathers the rows of its tokens, runs one GEMM against that
// group's [K, N] weights in place, and scatters the rows (plus bias, added
// before the single rounding of half types) into [M, S, N].
//
// Indices are data: ValidateGroupIndices must accept them before RunGroupedMatMul
// reads any weight; an index outside [0, G) is INVALID_ARGUMENT, never wrapped.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(auto plan, PlanGroupedMatMul(x.shape(), w.shape(),
//                                                           idx.shape(), nullptr));
//   GEMMSERVE_RETURN_IF_ERROR(ValidateGroupIndices(idx, plan.g));
//   GEMMSERVE_RETURN_IF_ERROR(RunGroupedMatMul(plan, x, w, idx, nullptr, &out, 2));
#ifndef GEMMSERVE_SERVER_OPS_GROUPED_MATMUL_H_
#define GEMMSERVE_SERVER_OPS_GROUPED_MATMUL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/ops/gemm_scheduler.h"
#include "server/ops/packed_weights.h"
#include "server/ops/quantized_weights.h"
#include "server/tensor/shape.h"
#include "server/tensor/tensor.h"

namespace gemmserve {

struct GroupedMatMulPlan {
  int64_t m = 0, k = 0, n = 0, g = 0, s = 0;
  bool has_bias = false;
  Shape output_shape;  // [M, S, N]
  int64_t output_elements = 0;
  int64_t flops = 0;  // 2*M*S*K*N, saturating
};

// Shape checks of the spec; `bias_shape` is null when there is no bias.
// Messages name the tensor: "input 'weights': expected rank 3 [G, K, N], got [2,3]".
absl::StatusOr<GroupedMatMulPlan> PlanGroupedMatMul(absl::Span<const int64_t> input_shape,
                                                    absl::Span<const int64_t> weights_shape,
                                                    absl::Span<const int64_t> indices_shape,
                                                    const Shape* bias_shape);

// INVALID_ARGUMENT for the first index outside [0, g), naming its position.
// `indices` must be INT32 or INT64.
absl::Status ValidateGroupIndices(const Tensor& indices, int64_t g);
// The same for indices already widened to int64, `s` per row.
absl::Status ValidateGroupIndices(absl::Span<const int64_t> indices, int64_t s, int64_t g);

// The (token, slot) pairs p = m*S + s sorted by group, as GEMM problems: one
// per group in use, its rows gathered from the pairs' tokens and scattered to
// the pairs' output rows. The problems point into the row lists and into the
// tensors, which must outlive them; moving the struct keeps them valid.
struct GroupedMatMulWork {
  std::vector<int64_t> pair_of_row;   // output row (pair) of each sorted row
  std::vector<int64_t> token_of_row;  // input row (token) of each sorted row
  std::vector<GemmProblem> problems;
};

// The weights [G, K, N] as the problems read them: a row-major tensor, or
// panels packed once (a resident model's), or integers dequantized as they
// are read (a quantized resident model's; type() is the value type).
struct GroupedWeights {
  GroupedWeights(const Tensor& w) : dense(&w) {}                // NOLINT: implicit on purpose
  GroupedWeights(const PackedWeights& w) : packed(&w) {}        // NOLINT
  GroupedWeights(const QuantizedWeights& w) : quantized(&w) {}  // NOLINT
  DataType type() const {
    return dense ? dense->type() : packed ? packed->type() : quantized->value_type();
  }
  const Shape& shape() const {
    return dense ? dense->shape() : packed ? packed->shape() : quantized->shape();
  }
  const Tensor* dense = nullptr;
  const PackedWeights* packed = nullptr;
  const QuantizedWeights* quantized = nullptr;
};

// Points problem `p` (whose k and n are set) at group `group` of the
// weights: its row-major [K, N] slice, its panels or its quantized matrix.
// `group` must be in range ([0, G), or 0 for [K, N] weights).
void SetGroupWeights(const GroupedWeights& weights, int64_t group, GemmProblem* p);

// The problems of one GroupedMatMul, to run alone or merged with others'
// (the batcher runs several requests' problems in one RunGemmProblems call).
// Same preconditions as RunGroupedMatMul. RESOURCE_EXHAUSTED if the lists
// cannot be allocated.
absl::StatusOr<GroupedMatMulWork> BuildGroupedMatMulWork(const GroupedMatMulPlan& plan,
                                                         const Tensor& input,
                                                         const GroupedWeights& weights,
                                                         const Tensor& indices, const Tensor* bias,
                                                         Tensor* output);

// Bytes BuildGroupedMatMulWork and running its problems hold beyond the
// tensors (the sorted pairs, the row lists, the problems and the scheduler's
// scratch, GemmWorkBytes), known before the indices are read: every token may
// choose one expert, or each its own.
// `panels`: the weights are packed (PackedWeights).
// `quantized`: the weights are QuantizedWeights.
// `int8_activations`: quantized weights on 8-bit activations.
int64_t GroupedMatMulWorkBytes(const GroupedMatMulPlan& plan, DataType type, int threads,
                               bool panels = false, bool quantized = false,
                               bool int8_activations = false);

// Tensors must match the plan; `bias` may be null. Indices must have passed
// ValidateGroupIndices. RESOURCE_EXHAUSTED if scratch memory is denied.
absl::Status RunGroupedMatMul(const GroupedMatMulPlan& plan, const Tensor& input,
                              const GroupedWeights& weights, const Tensor& indices,
                              const Tensor* bias, Tensor* output, int threads);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_GROUPED_MATMUL_H_
