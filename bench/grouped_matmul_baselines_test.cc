// The baselines must compute the operator, or the benchmark would compare the
// fused kernel against nonsense: every row against the reference, over shapes
// with primes, single rows and columns, and more groups than pairs.
#include "bench/grouped_matmul_baselines.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "bench/bench_inputs.h"
#include "bench/row_check.h"
#include "server/ops/grouped_matmul.h"
#ifdef GEMMSERVE_HAVE_ONEDNN
#include "bench/onednn_baseline.h"
#endif

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

#ifdef GEMMSERVE_HAVE_ONEDNN
// The oneDNN baseline on edge shapes. CheckAllRows compares every row with a
// double-precision reference, within 2*K*2^-24*sum|a*b| (inputs exact, FP32
// accumulation, for BF16 inputs too) plus one rounding to the output type
// (2^-24 FP32, 2^-8 BF16).
enum class Route { kUniform, kSkewed, kAllToLast, kSkipMiddle };

Tensor MakeIndices(int64_t m, int64_t s, int64_t g, Route route, DataType index_type) {
  Tensor routing;
  if (route == Route::kUniform || route == Route::kSkewed) {
    routing =
        *MakeRouting(m, s, g, route == Route::kSkewed ? Routing::kSkewed : Routing::kUniform, 17);
  } else {
    routing = *Tensor::Allocate(DataType::kINT64, {m, s});
    for (int64_t p = 0; p < m * s; ++p) {
      // kAllToLast: one group takes every pair (S must be 1), the others have
      // no rows. kSkipMiddle: group g/2 gets no rows, the others round-robin.
      int64_t group = g - 1;
      if (route == Route::kSkipMiddle) {
        group = p % (g - 1);
        if (group >= g / 2) ++group;
      }
      routing.data<int64_t>()[p] = group;
    }
  }
  if (index_type == DataType::kINT64) return routing;
  Tensor narrow = *Tensor::Allocate(DataType::kINT32, {m, s});
  for (int64_t p = 0; p < m * s; ++p) {
    narrow.data<int32_t>()[p] = static_cast<int32_t>(routing.data<int64_t>()[p]);
  }
  return narrow;
}

struct EdgeCase {
  int64_t m, k, n, g, s;
  Route route;
};
constexpr EdgeCase kEdgeCases[] = {
    {1, 1, 1, 1, 1, Route::kUniform},      {1, 17, 33, 4, 2, Route::kUniform},
    {2, 33, 17, 8, 1, Route::kUniform},    {5, 7, 3, 4, 2, Route::kUniform},
    {13, 31, 17, 8, 3, Route::kUniform},   {2, 64, 1, 16, 4, Route::kUniform},  // unused groups
    {37, 5, 9, 3, 3, Route::kUniform},     {31, 17, 33, 6, 2, Route::kSkewed},
    {64, 33, 65, 8, 2, Route::kSkewed},    {7, 1, 33, 5, 1, Route::kAllToLast},
    {11, 33, 1, 5, 2, Route::kSkipMiddle}, {97, 130, 70, 9, 2, Route::kSkipMiddle},
};

TEST(OneDnnGroupedMatMulTest, MatchesTheReferenceOnEdgeShapes) {
  for (DataType type : {DataType::kFP32, DataType::kBF16}) {
    for (const EdgeCase& e : kEdgeCases) {
      for (int threads : {1, 2}) {
        const DataType index_type = threads == 1 ? DataType::kINT64 : DataType::kINT32;
        const std::string what =
            absl::StrCat(DataTypeName(type), " m=", e.m, " k=", e.k, " n=", e.n, " g=", e.g,
                         " s=", e.s, " route=", static_cast<int>(e.route), " threads=", threads);
        Problem p = MakeProblem(type, e.m, e.k, e.n, e.g, e.s);
        p.indices = MakeIndices(e.m, e.s, e.g, e.route, index_type);
        ASSERT_TRUE(ValidateGroupIndices(p.indices, e.g).ok()) << what;
        absl::StatusOr<OneDnnGroupedMatMul> dnnl = OneDnnGroupedMatMul::Create(p.weights, threads);
        ASSERT_TRUE(dnnl.ok()) << what << " " << dnnl.status();
        ASSERT_TRUE(dnnl->Prepare(p.plan, p.indices).ok()) << what;
        // Poisoned (NaN): a row the baseline does not write fails the check.
        std::memset(p.output.raw_data(), 0xff, static_cast<size_t>(p.output.byte_size()));
        absl::Status run = dnnl->Run(p.plan, p.input, p.indices, &p.output);
        ASSERT_TRUE(run.ok()) << what << " " << run;
        absl::Status check = CheckAllRows(p);
        EXPECT_TRUE(check.ok()) << what << " " << check;
        // The same weights on another routing, whose row counts Prepare did
        // not see (primitives made during Run), as the benchmark's cases do.
        if (e.route != Route::kAllToLast) {
          p.indices = MakeIndices(e.m, e.s, e.g, Route::kSkewed, index_type);
          std::memset(p.output.raw_data(), 0xff, static_cast<size_t>(p.output.byte_size()));
          ASSERT_TRUE(dnnl->Run(p.plan, p.input, p.indices, &p.output).ok()) << what;
          check = CheckAllRows(p);
          EXPECT_TRUE(check.ok()) << what << " (second routing) " << check;
        }
      }
    }
  }
}

TEST(OneDnnGroupedMatMulTest, ZeroTokensAndZeroSelectionsWriteNothing) {
  for (DataType type : {DataType::kFP32, DataType::kBF16}) {
    for (auto [m, s] : {std::pair<int64_t, int64_t>{0, 2}, {3, 0}}) {
      Problem p = MakeProblem(type, m, 5, 7, 3, s);
      absl::StatusOr<OneDnnGroupedMatMul> dnnl = OneDnnGroupedMatMul::Create(p.weights, 1);
      ASSERT_TRUE(dnnl.ok()) << dnnl.status();
      ASSERT_TRUE(dnnl->Prepare(p.plan, p.indices).ok());
      EXPECT_TRUE(dnnl->Run(p.plan, p.input, p.indices, &p.output).ok());
    }
  }
}

TEST(OneDnnGroupedMatMulTest, RunsOnlyFp32AndBf16) {
  for (DataType type : {DataType::kFP16, DataType::kFP64, DataType::kINT32}) {
    Problem p = MakeProblem(type, 2, 3, 4, 2, 1);
    EXPECT_EQ(OneDnnGroupedMatMul::Create(p.weights, 1).status().code(),
              absl::StatusCode::kInvalidArgument)
        << DataTypeName(type);
  }
  Problem fp32 = MakeProblem(DataType::kFP32, 2, 3, 4, 2, 1);
  Problem bf16 = MakeProblem(DataType::kBF16, 2, 3, 4, 2, 1);
  absl::StatusOr<OneDnnGroupedMatMul> dnnl = OneDnnGroupedMatMul::Create(fp32.weights, 1);
  ASSERT_TRUE(dnnl.ok());
  EXPECT_EQ(dnnl->Run(fp32.plan, bf16.input, fp32.indices, &fp32.output).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(OneDnnGroupedMatMulTest, NamesItsImplementationAndExposesItsWeights) {
  Problem p = MakeProblem(DataType::kBF16, 4, 33, 17, 3, 1);
  absl::StatusOr<OneDnnGroupedMatMul> dnnl = OneDnnGroupedMatMul::Create(p.weights, 1);
  ASSERT_TRUE(dnnl.ok());
  absl::StatusOr<std::string> impl = dnnl->ImplementationName(4);
  ASSERT_TRUE(impl.ok());
  EXPECT_FALSE(impl->empty());
  EXPECT_GE(dnnl->group_bytes(), 33 * 17 * 2);
  EXPECT_EQ(static_cast<const char*>(dnnl->group_weights(2)) -
                static_cast<const char*>(dnnl->group_weights(0)),
            2 * dnnl->group_bytes());
}
#endif  // GEMMSERVE_HAVE_ONEDNN

}  // namespace
}  // namespace gemmserve
