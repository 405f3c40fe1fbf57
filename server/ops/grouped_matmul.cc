#include "server/ops/grouped_matmul.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/allocation.h"
#include "server/common/status_macros.h"
#include "server/ops/gemm_scheduler.h"

namespace gemmserve {
namespace {

absl::Status RankError(const char* name, const char* expected, absl::Span<const int64_t> shape) {
  return absl::InvalidArgumentError(
      absl::StrCat("input '", name, "': expected rank ", expected, ", got ", ShapeToString(shape)));
}

template <typename Index>
GroupedMatMulWork BuildProblems(const GroupedMatMulPlan& plan, const Index* indices,
                                const Tensor& input, const GroupedWeights& weights,
                                const Tensor* bias, Tensor* output) {
  const int64_t pairs = plan.m * plan.s;
  std::vector<std::pair<int64_t, int64_t>> keyed(pairs);
  for (int64_t p = 0; p < pairs; ++p) keyed[p] = {static_cast<int64_t>(indices[p]), p};
  std::sort(keyed.begin(), keyed.end());
  GroupedMatMulWork out;
  out.pair_of_row.resize(pairs);
  out.token_of_row.resize(pairs);
  for (int64_t r = 0; r < pairs; ++r) {
    out.pair_of_row[r] = keyed[r].second;
    out.token_of_row[r] = keyed[r].second / plan.s;
  }
  const DataType type = input.type();
  const int64_t es = DataTypeSize(type);
  const auto* b = bias ? static_cast<const uint8_t*>(bias->raw_data()) : nullptr;
  for (int64_t begin = 0; begin < pairs;) {
    const int64_t group = keyed[begin].first;
    int64_t end = begin;
    while (end < pairs && keyed[end].first == group) ++end;
    GemmProblem p;
    p.type = type;
    p.m = end - begin;
    p.n = plan.n;
    p.k = plan.k;
    p.a = input.raw_data();
    p.lda = plan.k;
    p.a_rows = out.token_of_row.data() + begin;
    SetGroupWeights(weights, group, &p);
    p.c = output->raw_data();
    p.ldc = plan.n;
    p.c_rows = out.pair_of_row.data() + begin;
    p.bias = b ? b + group * plan.n * es : nullptr;
    out.problems.push_back(p);
    begin = end;
  }
  return out;
}

}  // namespace

void SetGroupWeights(const GroupedWeights& weights, int64_t group, GemmProblem* p) {
  if (weights.dense) {  // (an empty tensor's data may be null)
    const auto* w = static_cast<const uint8_t*>(weights.dense->raw_data());
    p->b = w + group * p->k * p->n * DataTypeSize(weights.dense->type());
    p->ldb = p->n;
  } else if (weights.quantized) {
    p->b_quantized = &weights.quantized->group(group);
  } else {
    p->b_panels = weights.packed->group(group);
    p->b_panels_min_exponent = weights.packed->min_exponent(group);
  }
}

absl::StatusOr<GroupedMatMulPlan> PlanGroupedMatMul(absl::Span<const int64_t> input_shape,
                                                    absl::Span<const int64_t> weights_shape,
                                                    absl::Span<const int64_t> indices_shape,
                                                    const Shape* bias_shape) {
  if (input_shape.size() != 2) return RankError("input", "2 [M, K]", input_shape);
  if (weights_shape.size() != 3) return RankError("weights", "3 [G, K, N]", weights_shape);
  if (indices_shape.size() != 2) return RankError("group_indices", "2 [M, S]", indices_shape);
  GEMMSERVE_RETURN_IF_ERROR(ElementCount(input_shape).status());
  GEMMSERVE_RETURN_IF_ERROR(ElementCount(weights_shape).status());
  GEMMSERVE_RETURN_IF_ERROR(ElementCount(indices_shape).status());
  GroupedMatMulPlan plan;
  plan.m = input_shape[0];
  plan.k = input_shape[1];
  plan.g = weights_shape[0];
  plan.n = weights_shape[2];
  plan.s = indices_shape[1];
  if (weights_shape[1] != plan.k) {
    return absl::InvalidArgumentError(absl::StrCat("input 'weights': expected K=", plan.k,
                                                   " (from input ", ShapeToString(input_shape),
                                                   "), got ", ShapeToString(weights_shape)));
  }
  if (indices_shape[0] != plan.m) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'group_indices': expected first dimension M=", plan.m, " (from input ",
                     ShapeToString(input_shape), "), got ", ShapeToString(indices_shape)));
  }
  if (bias_shape != nullptr) {
    plan.has_bias = true;
    if (bias_shape->size() != 2 || (*bias_shape)[0] != plan.g || (*bias_shape)[1] != plan.n) {
      return absl::InvalidArgumentError(absl::StrCat("input 'bias': expected shape [G, N] = [",
                                                     plan.g, ",", plan.n, "], got ",
                                                     ShapeToString(*bias_shape)));
    }
  }
  plan.output_shape = {plan.m, plan.s, plan.n};
  GEMMSERVE_ASSIGN_OR_RETURN(plan.output_elements, ElementCount(plan.output_shape));
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t pairs, CheckedMul(plan.m, plan.s));
  if (plan.g == 0 && pairs > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'weights': G = 0 groups, but group_indices ",
                     ShapeToString(indices_shape), " selects ", pairs, " of them"));
  }
  plan.flops = SaturatingMul(SaturatingMul(plan.output_elements, plan.k), 2);
  return plan;
}

namespace {
template <typename Index>
absl::Status CheckIndices(const Index* data, int64_t count, int64_t s, int64_t g) {
  for (int64_t p = 0; p < count; ++p) {
    const int64_t v = static_cast<int64_t>(data[p]);
    if (v < 0 || v >= g) {
      return absl::InvalidArgumentError(absl::StrCat("input 'group_indices': value ", v, " at [",
                                                     p / s, ",", p % s,
                                                     "] is outside [0, G) with G=", g));
    }
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status ValidateGroupIndices(const Tensor& indices, int64_t g) {
  const int64_t count = indices.num_elements();
  if (count == 0) return absl::OkStatus();
  const int64_t s = indices.shape().size() == 2 ? indices.shape()[1] : count;
  switch (indices.type()) {
    case DataType::kINT32: return CheckIndices(indices.data<int32_t>(), count, s, g);
    case DataType::kINT64: return CheckIndices(indices.data<int64_t>(), count, s, g);
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "input 'group_indices': expected INT32 or INT64, got ", DataTypeName(indices.type())));
  }
}

absl::Status ValidateGroupIndices(absl::Span<const int64_t> indices, int64_t s, int64_t g) {
  if (indices.empty()) return absl::OkStatus();
  return CheckIndices(indices.data(), static_cast<int64_t>(indices.size()), std::max<int64_t>(s, 1),
                      g);
}

absl::StatusOr<GroupedMatMulWork> BuildGroupedMatMulWork(const GroupedMatMulPlan& plan,
                                                         const Tensor& input,
                                                         const GroupedWeights& weights,
                                                         const Tensor& indices, const Tensor* bias,
                                                         Tensor* output) {
  if (!IsFloatingPoint(input.type())) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'input': GroupedMatMul needs BF16, FP16, FP32 or FP64, got ",
                     DataTypeName(input.type())));
  }
  if (plan.output_elements == 0) return GroupedMatMulWork{};
  if (indices.num_elements() != SaturatingMul(plan.m, plan.s) ||
      input.num_elements() != SaturatingMul(plan.m, plan.k) ||
      weights.shape() != Shape{plan.g, plan.k, plan.n} || weights.type() != input.type() ||
      (bias != nullptr && bias->num_elements() != SaturatingMul(plan.g, plan.n)) ||
      output->num_elements() != plan.output_elements) {
    return absl::InternalError("GroupedMatMul: tensors differ from the plan");
  }
  return CatchAllocationFailure(
      "GroupedMatMul's sorted (token, slot) pairs", [&]() -> absl::StatusOr<GroupedMatMulWork> {
        if (indices.type() == DataType::kINT32) {
          return BuildProblems(plan, indices.data<int32_t>(), input, weights, bias, output);
        }
        return BuildProblems(plan, indices.data<int64_t>(), input, weights, bias, output);
      });
}

int64_t GroupedMatMulWorkBytes(const GroupedMatMulPlan& plan, DataType type, int threads,
                               bool panels, bool quantized, bool int8_activations) {
  if (plan.output_elements == 0) return 0;  // BuildGroupedMatMulWork builds nothing
  const int64_t pairs = SaturatingMul(plan.m, plan.s);
  GemmWorkShape work;
  work.type = type;
  work.problems = std::min(plan.g, pairs);
  work.rows = pairs;
  work.min_rows = 1;
  work.max_rows = pairs;
  work.k = plan.k;
  work.n = plan.n;
  work.gathered = true;
  work.panels = panels;
  work.quantized = quantized;
  work.int8_activations = int8_activations;
  // Per pair: its (group, pair) key while sorting, and its two row indices.
  constexpr int64_t kPairBytes = sizeof(std::pair<int64_t, int64_t>) + 2 * sizeof(int64_t);
  return SaturatingAdd(SaturatingMul(pairs, kPairBytes), GemmWorkBytes(work, threads));
}

absl::Status RunGroupedMatMul(const GroupedMatMulPlan& plan, const Tensor& input,
                              const GroupedWeights& weights, const Tensor& indices,
                              const Tensor* bias, Tensor* output, int threads) {
  GEMMSERVE_ASSIGN_OR_RETURN(GroupedMatMulWork work,
                             BuildGroupedMatMulWork(plan, input, weights, indices, bias, output));
  return RunGemmProblems(work.problems, threads);
}

}  // namespace gemmserve
