#include "server/ops/grouped_matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/ops/kernels/gemm.h"
#include "server/ops/kernels/streaming_gemm.h"
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

// Groups with at most this many rows take the streaming (decode) path, which
// reads the group's weights once; above it a packing BLIS GEMM wins, since
// the streaming kernel keeps its accumulators in L1/L2 rather than registers.
// Measured with gemmserve-bench on olmoe shapes (docs/performance.md).
constexpr int64_t kStreamingMaxRows = 8;

// Views of one group's run of pairs.
struct GroupRun {
  int64_t group;
  int64_t begin;  // into GroupRuns::pairs
  int64_t count;
};

template <typename T, typename Acc>
class GroupedKernel {
 public:
  static constexpr bool kWiden = !std::is_same_v<T, Acc>;
  using A = Arith<T, Acc>;

  GroupedKernel(const GroupedMatMulPlan& plan, const GroupRuns& runs, const Tensor& input,
                const Tensor& weights, const Tensor* bias, Tensor* output, int threads)
      : plan_(plan), runs_(runs), type_(input.type()), x_(input.data<T>()),
        w_(weights.data<T>()), b_(bias ? bias->data<T>() : nullptr),
        out_(output->data<T>()), threads_(std::max(threads, 1)) {}

  absl::Status Run() {
    std::vector<GroupRun> streaming, packed;
    for (size_t r = 0; r + 1 < runs_.run_begin.size(); ++r) {
      const int64_t begin = runs_.run_begin[r];
      const GroupRun run{runs_.run_group[r], begin, runs_.run_begin[r + 1] - begin};
      (run.count <= kStreamingMaxRows ? streaming : packed).push_back(run);
    }
    if (!streaming.empty()) GEMMSERVE_RETURN_IF_ERROR(RunStreaming(streaming));
    if (!packed.empty()) GEMMSERVE_RETURN_IF_ERROR(RunPacked(packed));
    return absl::OkStatus();
  }

 private:
  const Acc* GroupWeightsAsAcc(int64_t group, Acc* scratch) const {
    const T* gw = w_ + group * plan_.k * plan_.n;
    if constexpr (kWiden) {
      HalfToFloatBlock(type_, gw, scratch, plan_.k * plan_.n);
      return scratch;
    } else {
      (void)scratch;
      return gw;
    }
  }

  // Gathers (and widens) the input row of each pair of `run` into `rows`.
  void Gather(const GroupRun& run, Acc* rows) const {
    const int64_t k = plan_.k;
    if (k == 0) return;
    for (int64_t i = 0; i < run.count; ++i) {
      const T* src = x_ + (runs_.pairs[run.begin + i] / plan_.s) * k;
      if constexpr (kWiden) {
        HalfToFloatBlock(type_, src, rows + i * k, k);
      } else {
        std::memcpy(rows + i * k, src, static_cast<size_t>(k) * sizeof(T));
      }
    }
  }

  // Writes result rows of `run` (plus bias, then the one rounding) to [M,S,N].
  void Scatter(const GroupRun& run, const Acc* result) const {
    const int64_t n = plan_.n;
    const T* group_bias = b_ ? b_ + run.group * n : nullptr;
    for (int64_t i = 0; i < run.count; ++i) {
      T* dst = out_ + runs_.pairs[run.begin + i] * n;
      const Acc* src = result + i * n;
      if (group_bias) {
        for (int64_t j = 0; j < n; ++j) dst[j] = A::Store(type_, src[j] + A::Load(type_, group_bias[j]));
      } else if constexpr (kWiden) {
        FloatToHalfBlock(type_, src, dst, n);
      } else {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
      }
    }
  }

  // Decode: each group's weights streamed once, the work split into items of
  // (group, slice of K) so that even one group keeps every thread busy; each
  // item accumulates into its own partial rows, summed per group at the end.
  absl::Status RunStreaming(const std::vector<GroupRun>& runs) {
    const int64_t k = plan_.k, n = plan_.n;
    const int64_t groups = static_cast<int64_t>(runs.size());
    // Enough items for two per thread; slices of K no thinner than 64 rows.
    const int64_t wanted = (2 * threads_ + groups - 1) / groups;
    const int64_t slices = std::max<int64_t>(1, std::min<int64_t>(wanted, k / 64));
    struct Item {
      int64_t run, k_begin, k_end, partial;  // partial: offset in elements
    };
    std::vector<Item> items;
    std::vector<int64_t> rows_offset(groups);
    int64_t rows_total = 0, partial_total = 0;
    for (int64_t r = 0; r < groups; ++r) {
      rows_offset[r] = rows_total;
      rows_total += runs[r].count * k;
      for (int64_t s = 0; s < slices; ++s) {
        items.push_back({r, k * s / slices, k * (s + 1) / slices, partial_total});
        partial_total += runs[r].count * n;
      }
    }
    GEMMSERVE_ASSIGN_OR_RETURN(AlignedBuffer rows_buf,
                               AlignedBuffer::Allocate(rows_total * int64_t{sizeof(Acc)}));
    GEMMSERVE_ASSIGN_OR_RETURN(AlignedBuffer partial_buf,
                               AlignedBuffer::Allocate(partial_total * int64_t{sizeof(Acc)}));
    Acc* rows = static_cast<Acc*>(rows_buf.data());
    Acc* partial = static_cast<Acc*>(partial_buf.data());
    for (int64_t r = 0; r < groups; ++r) Gather(runs[r], rows + rows_offset[r]);
    if (partial_total > 0) std::fill(partial, partial + partial_total, Acc{0});

    const int64_t item_count = static_cast<int64_t>(items.size());
#pragma omp parallel for num_threads(threads_) schedule(dynamic, 1)
    for (int64_t i = 0; i < item_count; ++i) {
      const Item& item = items[i];
      const GroupRun& run = runs[item.run];
      const T* gw = w_ + run.group * k * n;
      if constexpr (std::is_same_v<Acc, double>) {
        StreamingGemmAccumulate(run.count, item.k_begin, item.k_end, n, rows + rows_offset[item.run],
                                k, gw, n, partial + item.partial, n);
      } else {
        StreamingGemmAccumulate(type_, run.count, item.k_begin, item.k_end, n,
                                rows + rows_offset[item.run], k, gw, n, partial + item.partial, n);
      }
    }
    // Slice partials of one group are adjacent: fold them into the first.
    for (int64_t r = 0; r < groups; ++r) {
      Acc* first = partial + items[r * slices].partial;
      const int64_t len = runs[r].count * n;
      for (int64_t s = 1; s < slices; ++s) {
        const Acc* other = partial + items[r * slices + s].partial;
        for (int64_t e = 0; e < len; ++e) first[e] += other[e];
      }
      Scatter(runs[r], first);
    }
    return absl::OkStatus();
  }

  // Prefill: one packing GEMM per group. With many groups, groups run in
  // parallel on one BLIS thread each (no fork/join inside a GEMM, uneven
  // groups balanced by dynamic scheduling); with few, one group at a time on
  // all threads.
  absl::Status RunPacked(const std::vector<GroupRun>& runs) {
    const int64_t k = plan_.k, n = plan_.n;
    const int64_t groups = static_cast<int64_t>(runs.size());
    const bool across_groups = threads_ > 1 && groups >= 2 * threads_;
    const int lanes = across_groups ? threads_ : 1;
    int64_t longest = 0;
    for (const GroupRun& run : runs) longest = std::max(longest, run.count);
    std::vector<AlignedBuffer> rows_buf(lanes), result_buf(lanes), weights_buf(lanes);
    for (int t = 0; t < lanes; ++t) {
      GEMMSERVE_ASSIGN_OR_RETURN(rows_buf[t], AlignedBuffer::Allocate(longest * k * int64_t{sizeof(Acc)}));
      GEMMSERVE_ASSIGN_OR_RETURN(result_buf[t], AlignedBuffer::Allocate(longest * n * int64_t{sizeof(Acc)}));
      if constexpr (kWiden) {
        GEMMSERVE_ASSIGN_OR_RETURN(weights_buf[t], AlignedBuffer::Allocate(k * n * int64_t{sizeof(Acc)}));
      }
    }
    auto one_group = [&](const GroupRun& run, int lane, int gemm_threads) {
      Acc* rows = static_cast<Acc*>(rows_buf[lane].data());
      Acc* result = static_cast<Acc*>(result_buf[lane].data());
      Gather(run, rows);
      const Acc* gw = GroupWeightsAsAcc(run.group, static_cast<Acc*>(weights_buf[lane].data()));
      if constexpr (std::is_same_v<Acc, double>) {
        DgemmRowMajor(run.count, n, k, rows, k, gw, n, result, n, gemm_threads);
      } else {
        SgemmRowMajor(run.count, n, k, rows, k, gw, n, result, n, gemm_threads);
      }
      Scatter(run, result);
    };
    if (across_groups) {
#pragma omp parallel for num_threads(threads_) schedule(dynamic, 1)
      for (int64_t r = 0; r < groups; ++r) one_group(runs[r], omp_get_thread_num(), 1);
    } else {
      for (const GroupRun& run : runs) one_group(run, 0, threads_);
    }
    return absl::OkStatus();
  }

  const GroupedMatMulPlan& plan_;
  const GroupRuns& runs_;
  const DataType type_;
  const T* x_;
  const T* w_;
  const T* b_;
  T* out_;
  const int threads_;
};

template <typename T, typename Acc>
absl::Status RunTyped(const GroupedMatMulPlan& plan, const GroupRuns& runs, const Tensor& input,
                      const Tensor& weights, const Tensor* bias, Tensor* output, int threads) {
  return GroupedKernel<T, Acc>(plan, runs, input, weights, bias, output, threads).Run();
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
