#include "server/ops/grouped_matmul.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/ops/kernels/gemm.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

absl::Status RankError(const char* name, const char* expected, absl::Span<const int64_t> shape) {
  return absl::InvalidArgumentError(absl::StrCat("input '", name, "': expected rank ",
                                                 expected, ", got ", ShapeToString(shape)));
}

// Pairs p = m*S + s, grouped: pairs[run_begin[r] .. run_begin[r+1]) all use
// group run_group[r].
struct GroupRuns {
  std::vector<int64_t> pairs;
  std::vector<int64_t> run_group;
  std::vector<int64_t> run_begin;
  int64_t longest = 0;
};

template <typename Index>
GroupRuns SortPairsByGroup(const Index* indices, int64_t count) {
  std::vector<std::pair<int64_t, int64_t>> keyed(count);
  for (int64_t p = 0; p < count; ++p) keyed[p] = {static_cast<int64_t>(indices[p]), p};
  std::sort(keyed.begin(), keyed.end());
  GroupRuns runs;
  runs.pairs.resize(count);
  for (int64_t p = 0; p < count; ++p) {
    runs.pairs[p] = keyed[p].second;
    if (p == 0 || keyed[p].first != keyed[p - 1].first) {
      runs.run_group.push_back(keyed[p].first);
      runs.run_begin.push_back(p);
    }
  }
  runs.run_begin.push_back(count);
  for (size_t r = 0; r + 1 < runs.run_begin.size(); ++r) {
    runs.longest = std::max(runs.longest, runs.run_begin[r + 1] - runs.run_begin[r]);
  }
  return runs;
}

// Storage type T, computed in Acc (FP32 for the half types, one rounding).
template <typename T, typename Acc>
struct Arith {
  static Acc Load(DataType, T v) { return v; }
  static T Store(DataType, Acc v) { return v; }
};
template <>
struct Arith<uint16_t, float> {
  static float Load(DataType t, uint16_t v) {
    return t == DataType::kBF16 ? BFloat16ToFloat(v) : HalfToFloat(v);
  }
  static uint16_t Store(DataType t, float v) {
    return t == DataType::kBF16 ? FloatToBFloat16(v) : FloatToHalf(v);
  }
};

template <typename T, typename Acc>
absl::Status RunTyped(const GroupedMatMulPlan& plan, const GroupRuns& runs, const Tensor& input,
                      const Tensor& weights, const Tensor* bias, Tensor* output, int threads) {
  constexpr bool kWiden = !std::is_same_v<T, Acc>;
  using A = Arith<T, Acc>;
  const DataType type = input.type();
  const int64_t k = plan.k, n = plan.n, s = plan.s;
  const T* x = input.data<T>();
  const T* w = weights.data<T>();
  const T* b = bias ? bias->data<T>() : nullptr;
  T* out = output->data<T>();

  GEMMSERVE_ASSIGN_OR_RETURN(AlignedBuffer rows_buf,
                             AlignedBuffer::Allocate(runs.longest * k * int64_t{sizeof(Acc)}));
  GEMMSERVE_ASSIGN_OR_RETURN(AlignedBuffer result_buf,
                             AlignedBuffer::Allocate(runs.longest * n * int64_t{sizeof(Acc)}));
  AlignedBuffer widened_weights;
  if constexpr (kWiden) {
    GEMMSERVE_ASSIGN_OR_RETURN(widened_weights, AlignedBuffer::Allocate(k * n * int64_t{sizeof(Acc)}));
  }
  Acc* rows = static_cast<Acc*>(rows_buf.data());
  Acc* result = static_cast<Acc*>(result_buf.data());

  for (size_t r = 0; r + 1 < runs.run_begin.size(); ++r) {
    const int64_t group = runs.run_group[r];
    const int64_t begin = runs.run_begin[r];
    const int64_t count = runs.run_begin[r + 1] - begin;
    // Gather (and widen) the input row of each pair's token.
    for (int64_t i = 0; i < count && k > 0; ++i) {
      const T* src = x + (runs.pairs[begin + i] / s) * k;
      if constexpr (kWiden) {
        HalfToFloatBlock(type, src, rows + i * k, k);
      } else {
        std::memcpy(rows + i * k, src, static_cast<size_t>(k) * sizeof(T));
      }
    }
    const T* group_weights = w + group * k * n;
    const Acc* gemm_weights;
    if constexpr (kWiden) {
      HalfToFloatBlock(type, group_weights, static_cast<Acc*>(widened_weights.data()), k * n);
      gemm_weights = static_cast<const Acc*>(widened_weights.data());
    } else {
      gemm_weights = group_weights;
    }
    GEMMSERVE_RETURN_IF_ERROR(GemmRowMajor(DataTypeOf<Acc>::value, count, n, k, rows, k,
                                           gemm_weights, n, result, n, threads));
    // Scatter into [M, S, N] (pair p is row p), adding the bias before the
    // one rounding to T.
    const T* group_bias = b ? b + group * n : nullptr;
    for (int64_t i = 0; i < count; ++i) {
      T* dst = out + runs.pairs[begin + i] * n;
      const Acc* src = result + i * n;
      if (group_bias) {
        for (int64_t j = 0; j < n; ++j) dst[j] = A::Store(type, src[j] + A::Load(type, group_bias[j]));
      } else if constexpr (kWiden) {
        FloatToHalfBlock(type, src, dst, n);
      } else {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

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
    return absl::InvalidArgumentError(absl::StrCat(
        "input 'weights': expected K=", plan.k, " (from input ", ShapeToString(input_shape),
        "), got ", ShapeToString(weights_shape)));
  }
  if (indices_shape[0] != plan.m) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input 'group_indices': expected first dimension M=", plan.m, " (from input ",
        ShapeToString(input_shape), "), got ", ShapeToString(indices_shape)));
  }
  if (bias_shape != nullptr) {
    plan.has_bias = true;
    if (bias_shape->size() != 2 || (*bias_shape)[0] != plan.g || (*bias_shape)[1] != plan.n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input 'bias': expected shape [G, N] = [", plan.g, ",", plan.n, "], got ",
          ShapeToString(*bias_shape)));
    }
  }
  plan.output_shape = {plan.m, plan.s, plan.n};
  GEMMSERVE_ASSIGN_OR_RETURN(plan.output_elements, ElementCount(plan.output_shape));
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t pairs, CheckedMul(plan.m, plan.s));
  if (plan.g == 0 && pairs > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input 'weights': G = 0 groups, but group_indices ", ShapeToString(indices_shape),
        " selects ", pairs, " of them"));
  }
  int64_t flops;
  if (__builtin_mul_overflow(plan.output_elements, plan.k, &flops) ||
      __builtin_mul_overflow(flops, int64_t{2}, &flops)) {
    flops = std::numeric_limits<int64_t>::max();
  }
  plan.flops = flops;
  return plan;
}

namespace {
template <typename Index>
absl::Status CheckIndices(const Index* data, int64_t count, int64_t s, int64_t g) {
  for (int64_t p = 0; p < count; ++p) {
    const int64_t v = static_cast<int64_t>(data[p]);
    if (v < 0 || v >= g) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input 'group_indices': value ", v, " at [", p / s, ",", p % s,
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

absl::Status RunGroupedMatMul(const GroupedMatMulPlan& plan, const Tensor& input,
                              const Tensor& weights, const Tensor& indices, const Tensor* bias,
                              Tensor* output, int threads) {
  if (plan.output_elements == 0) return absl::OkStatus();
  const int64_t pairs = plan.m * plan.s;
  GroupRuns runs = indices.type() == DataType::kINT32
                       ? SortPairsByGroup(indices.data<int32_t>(), pairs)
                       : SortPairsByGroup(indices.data<int64_t>(), pairs);
  switch (input.type()) {
    case DataType::kFP32:
      return RunTyped<float, float>(plan, runs, input, weights, bias, output, threads);
    case DataType::kFP64:
      return RunTyped<double, double>(plan, runs, input, weights, bias, output, threads);
    case DataType::kFP16:
    case DataType::kBF16:
      return RunTyped<uint16_t, float>(plan, runs, input, weights, bias, output, threads);
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "input 'input': GroupedMatMul needs BF16, FP16, FP32 or FP64, got ",
          DataTypeName(input.type())));
  }
}

}  // namespace gemmserve
