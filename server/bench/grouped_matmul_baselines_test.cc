// The baselines must compute the operator, or the benchmark would compare the
// fused kernel against nonsense: every row against the reference, over shapes
// with primes, single rows and columns, and more groups than pairs.
#include "server/bench/grouped_matmul_baselines.h"

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/bench/bench_inputs.h"
#include "server/bench/row_check.h"
#include "server/ops/grouped_matmul.h"

namespace gemmserve {
namespace {

constexpr DataType kFloatTypes[] = {DataType::kFP32, DataType::kFP64, DataType::kFP16,
                                    DataType::kBF16};

struct Problem {
  GroupedMatMulPlan plan;
  Tensor input, weights, indices, output;
};

Problem MakeProblem(DataType type, int64_t m, int64_t k, int64_t n, int64_t g, int64_t s,
                    DataType index_type = DataType::kINT64) {
  Problem p;
  p.input = *RandomTensor(type, {m, k}, 11);
  p.weights = *RandomTensor(type, {g, k, n}, 12);
  Tensor routing = *MakeRouting(m, s, g, Routing::kUniform, 13);
  if (index_type == DataType::kINT32) {
    p.indices = *Tensor::Allocate(DataType::kINT32, {m, s});
    for (int64_t i = 0; i < m * s; ++i) {
      p.indices.data<int32_t>()[i] = static_cast<int32_t>(routing.data<int64_t>()[i]);
    }
  } else {
    p.indices = std::move(routing);
  }
  p.plan = *PlanGroupedMatMul(p.input.shape(), p.weights.shape(), p.indices.shape(), nullptr);
  p.output = *Tensor::Zeros(type, p.plan.output_shape);
  return p;
}

// Every row, not just the benchmark's sample.
absl::Status CheckAllRows(const Problem& p) {
  const int64_t element = DataTypeSize(p.input.type());
  const auto* x = static_cast<const uint8_t*>(p.input.raw_data());
  const auto* w = static_cast<const uint8_t*>(p.weights.raw_data());
  const auto* out = static_cast<const uint8_t*>(p.output.raw_data());
  for (int64_t pair = 0; pair < p.plan.m * p.plan.s; ++pair) {
    const int64_t group = p.indices.type() == DataType::kINT32
                              ? int64_t{p.indices.data<int32_t>()[pair]}
                              : p.indices.data<int64_t>()[pair];
    absl::Status status =
        CheckGemmRow(p.input.type(), x + (pair / p.plan.s) * p.plan.k * element,
                     w + group * p.plan.k * p.plan.n * element, p.plan.k, p.plan.n,
                     out + pair * p.plan.n * element, absl::StrCat("pair ", pair));
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// Shapes with primes, single rows and a column of one, more groups than pairs.
struct Dims {
  int64_t m, k, n, g, s;
};
constexpr Dims kDims[] = {
    {1, 1, 1, 1, 1}, {5, 7, 3, 4, 2}, {13, 31, 17, 8, 3}, {2, 64, 1, 16, 4}, {37, 5, 9, 3, 3}};

TEST(RunPerGroupLoopTest, MatchesTheReferenceForEveryFloatType) {
  for (DataType type : kFloatTypes) {
    for (const Dims& d : kDims) {
      for (DataType index_type : {DataType::kINT32, DataType::kINT64}) {
        Problem p = MakeProblem(type, d.m, d.k, d.n, d.g, d.s, index_type);
        ASSERT_TRUE(RunPerGroupLoop(p.plan, p.input, p.weights, p.indices, &p.output, 1).ok());
        EXPECT_TRUE(CheckAllRows(p).ok()) << DataTypeName(type) << " " << CheckAllRows(p);
      }
    }
  }
}

TEST(RunOnnxDecompositionTest, MatchesTheReferenceForEveryFloatType) {
  OnnxDecompositionScratch scratch;  // reused across sizes, as the benchmark does
  for (DataType type : kFloatTypes) {
    for (const Dims& d : kDims) {
      for (DataType index_type : {DataType::kINT32, DataType::kINT64}) {
        Problem p = MakeProblem(type, d.m, d.k, d.n, d.g, d.s, index_type);
        ASSERT_TRUE(
            RunOnnxDecomposition(p.plan, p.input, p.weights, p.indices, &scratch, &p.output, 1)
                .ok());
        EXPECT_TRUE(CheckAllRows(p).ok()) << DataTypeName(type) << " " << CheckAllRows(p);
      }
    }
  }
}

TEST(RunOnnxDecompositionTest, GrowsItsScratchToTheGatheredWeights) {
  Problem p = MakeProblem(DataType::kFP32, 3, 4, 5, 2, 2);
  OnnxDecompositionScratch scratch;
  ASSERT_TRUE(
      RunOnnxDecomposition(p.plan, p.input, p.weights, p.indices, &scratch, &p.output, 1).ok());
  EXPECT_EQ(*OnnxGatheredWeightsBytes(p.plan, DataType::kFP32), 3 * 2 * 4 * 5 * 4);
  EXPECT_GE(scratch.gathered_weights.size(), 3 * 2 * 4 * 5 * 4);
}

TEST(BaselinesTest, RejectIntegerInputs) {
  Problem p = MakeProblem(DataType::kINT32, 2, 3, 4, 2, 1);
  EXPECT_EQ(RunPerGroupLoop(p.plan, p.input, p.weights, p.indices, &p.output, 1).code(),
            absl::StatusCode::kInvalidArgument);
  OnnxDecompositionScratch scratch;
  EXPECT_EQ(
      RunOnnxDecomposition(p.plan, p.input, p.weights, p.indices, &scratch, &p.output, 1).code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gemmserve
