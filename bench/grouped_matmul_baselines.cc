#include "bench/grouped_matmul_baselines.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/ops/kernels/gemm.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace {

int64_t IndexAt(const Tensor& indices, int64_t p) {
  return indices.type() == DataType::kINT32 ? int64_t{indices.data<int32_t>()[p]}
                                            : indices.data<int64_t>()[p];
}

absl::Status CheckFloatingInput(const Tensor& input) {
  if (IsFloatingPoint(input.type())) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("input 'input': GroupedMatMul needs BF16, FP16, FP32 or FP64, got ",
                   DataTypeName(input.type())));
}

void Gemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c, int threads) {
  SgemmRowMajor(m, n, k, a, k, b, n, c, n, threads);
}
void Gemm(int64_t m, int64_t n, int64_t k, const double* a, const double* b, double* c,
          int threads) {
  DgemmRowMajor(m, n, k, a, k, b, n, c, n, threads);
}

// T is the storage type, Acc the type BLIS computes in (FP32 for half types).
template <typename T, typename Acc>
absl::Status PerGroupLoopTyped(const GroupedMatMulPlan& plan, const Tensor& input,
                               const Tensor& weights, const Tensor& indices, Tensor* output,
                               int threads) {
  constexpr bool kWiden = !std::is_same_v<T, Acc>;
  const DataType type = input.type();
  const int64_t k = plan.k, n = plan.n, s = plan.s, pairs = plan.m * plan.s;

  std::vector<std::pair<int64_t, int64_t>> by_group(pairs);  // (group, pair)
  for (int64_t p = 0; p < pairs; ++p) by_group[p] = {IndexAt(indices, p), p};
  std::sort(by_group.begin(), by_group.end());
  int64_t longest = 0;
  for (int64_t begin = 0, end; begin < pairs; begin = end) {
    end = begin + 1;
    while (end < pairs && by_group[end].first == by_group[begin].first) ++end;
    longest = std::max(longest, end - begin);
  }

  GEMMSERVE_ASSIGN_OR_RETURN(AlignedBuffer rows_buffer,
                             AlignedBuffer::Allocate(longest * k * int64_t{sizeof(Acc)}));
  GEMMSERVE_ASSIGN_OR_RETURN(AlignedBuffer result_buffer,
                             AlignedBuffer::Allocate(longest * n * int64_t{sizeof(Acc)}));
  AlignedBuffer widened_buffer;
  if constexpr (kWiden) {
    GEMMSERVE_ASSIGN_OR_RETURN(widened_buffer,
                               AlignedBuffer::Allocate(k * n * int64_t{sizeof(Acc)}));
  }
  Acc* rows = static_cast<Acc*>(rows_buffer.data());
  Acc* result = static_cast<Acc*>(result_buffer.data());
  const T* x = input.data<T>();
  const T* w = weights.data<T>();
  T* out = output->data<T>();

  for (int64_t begin = 0, end; begin < pairs; begin = end) {
    const int64_t group = by_group[begin].first;
    end = begin + 1;
    while (end < pairs && by_group[end].first == group) ++end;
    const int64_t count = end - begin;
    for (int64_t i = 0; i < count; ++i) {
      const T* row = x + (by_group[begin + i].second / s) * k;
      if constexpr (kWiden) {
        HalfToFloatBlock(type, row, rows + i * k, k);
      } else {
        std::memcpy(rows + i * k, row, static_cast<size_t>(k) * sizeof(T));
      }
    }
    const T* group_weights = w + group * k * n;
    const Acc* b;
    if constexpr (kWiden) {
      HalfToFloatBlock(type, group_weights, static_cast<Acc*>(widened_buffer.data()), k * n);
      b = static_cast<const Acc*>(widened_buffer.data());
    } else {
      b = group_weights;
    }
    Gemm(count, n, k, rows, b, result, threads);
    for (int64_t i = 0; i < count; ++i) {
      T* dst = out + by_group[begin + i].second * n;
      if constexpr (kWiden) {
        FloatToHalfBlock(type, result + i * n, dst, n);
      } else {
        std::memcpy(dst, result + i * n, static_cast<size_t>(n) * sizeof(T));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Reserve(AlignedBuffer* buffer, int64_t bytes) {
  if (buffer->size() >= bytes) return absl::OkStatus();
  *buffer = AlignedBuffer();  // free the old one before asking for more
  GEMMSERVE_ASSIGN_OR_RETURN(*buffer, AlignedBuffer::Allocate(bytes));
  return absl::OkStatus();
}

}  // namespace

absl::Status RunPerGroupLoop(const GroupedMatMulPlan& plan, const Tensor& input,
                             const Tensor& weights, const Tensor& indices, Tensor* output,
                             int threads) {
  GEMMSERVE_RETURN_IF_ERROR(CheckFloatingInput(input));
  if (plan.output_elements == 0) return absl::OkStatus();
  switch (input.type()) {
    case DataType::kFP32:
      return PerGroupLoopTyped<float, float>(plan, input, weights, indices, output, threads);
    case DataType::kFP64:
      return PerGroupLoopTyped<double, double>(plan, input, weights, indices, output, threads);
    default:
      return PerGroupLoopTyped<uint16_t, float>(plan, input, weights, indices, output, threads);
  }
}

absl::StatusOr<int64_t> OnnxGatheredWeightsBytes(const GroupedMatMulPlan& plan, DataType type) {
  return ByteSize({plan.m, plan.s, plan.k, plan.n}, type);
}

absl::Status RunOnnxDecomposition(const GroupedMatMulPlan& plan, const Tensor& input,
                                  const Tensor& weights, const Tensor& indices,
                                  OnnxDecompositionScratch* scratch, Tensor* output, int threads) {
  GEMMSERVE_RETURN_IF_ERROR(CheckFloatingInput(input));
  const DataType type = input.type();
  const int64_t k = plan.k, n = plan.n, s = plan.s, pairs = plan.m * plan.s;
  const int64_t element = DataTypeSize(type);
  GEMMSERVE_ASSIGN_OR_RETURN(const int64_t gathered_bytes, OnnxGatheredWeightsBytes(plan, type));
  GEMMSERVE_RETURN_IF_ERROR(Reserve(&scratch->gathered_weights, gathered_bytes));
  GEMMSERVE_RETURN_IF_ERROR(Reserve(&scratch->expanded_input, pairs * k * element));
  if (plan.output_elements == 0) return absl::OkStatus();

  const size_t matrix_bytes = static_cast<size_t>(k * n * element);
  const size_t row_bytes = static_cast<size_t>(k * element);
  auto* gathered = static_cast<uint8_t*>(scratch->gathered_weights.data());
  auto* expanded = static_cast<uint8_t*>(scratch->expanded_input.data());
  const auto* w = static_cast<const uint8_t*>(weights.raw_data());
  const auto* x = static_cast<const uint8_t*>(input.raw_data());
  auto* out = static_cast<uint8_t*>(output->raw_data());

  // Gather: weights[group_indices] -> [M*S, K, N].
  for (int64_t p = 0; p < pairs; ++p) {
    std::memcpy(gathered + p * matrix_bytes, w + IndexAt(indices, p) * matrix_bytes, matrix_bytes);
  }
  // Unsqueeze + Expand: input [M, 1, 1, K] -> [M, S, 1, K], i.e. [M*S, 1, K].
  for (int64_t p = 0; p < pairs; ++p) {
    std::memcpy(expanded + p * row_bytes, x + (p / s) * row_bytes, row_bytes);
  }
  // MatMul [M*S, 1, K] x [M*S, K, N] -> [M*S, 1, N], which is [M, S, N].
  for (int64_t p = 0; p < pairs; ++p) {
    GEMMSERVE_RETURN_IF_ERROR(GemmRowMajor(type, 1, n, k, expanded + p * row_bytes, k,
                                           gathered + p * matrix_bytes, n, out + p * n * element, n,
                                           threads));
  }
  return absl::OkStatus();
}

}  // namespace gemmserve
