#include "server/ops/matmul.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/ops/kernels/gemm_testing.h"
#include "server/ops/kernels/reference_gemm.h"

namespace gemmserve {
namespace {

using ops_testing::ElementToString;
using ops_testing::ExactGemm;
using ops_testing::FillRandom;
using ops_testing::SameBits;
using ops_testing::ValueAt;
using ops_testing::WithinRoundingOfExact;
using ops_testing::WithinTolerance;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

MatMulPlan MustPlan(const Shape& a, const Shape& b) {
  absl::StatusOr<MatMulPlan> plan = PlanMatMul(a, b);
  EXPECT_TRUE(plan.ok()) << ShapeToString(a) << " x " << ShapeToString(b) << ": " << plan.status();
  return plan.ok() ? *plan : MatMulPlan{};
}

std::string PlanError(const Shape& a, const Shape& b) {
  absl::StatusOr<MatMulPlan> plan = PlanMatMul(a, b);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument)
      << ShapeToString(a) << " x " << ShapeToString(b);
  return std::string(plan.status().message());
}

// --- PlanMatMul -------------------------------------------------------------------

TEST(PlanMatMulTest, PlainMatrices) {
  const MatMulPlan p = MustPlan({2, 3}, {3, 4});
  EXPECT_EQ(p.m, 2);
  EXPECT_EQ(p.n, 4);
  EXPECT_EQ(p.k, 3);
  EXPECT_THAT(p.batch_shape, IsEmpty());
  EXPECT_EQ(p.batch_count, 1);
  EXPECT_THAT(p.output_shape, ElementsAre(2, 4));
  EXPECT_EQ(p.output_elements, 8);
  EXPECT_EQ(p.flops, 2 * 2 * 4 * 3);
}

TEST(PlanMatMulTest, OneDimensionalAIsPromotedAndTheAddedDimensionDropped) {
  const MatMulPlan p = MustPlan({3}, {3, 4});
  EXPECT_EQ(p.m, 1);
  EXPECT_EQ(p.k, 3);
  EXPECT_EQ(p.n, 4);
  EXPECT_THAT(p.output_shape, ElementsAre(4));
  EXPECT_EQ(p.output_elements, 4);
}

TEST(PlanMatMulTest, OneDimensionalBIsPromotedAndTheAddedDimensionDropped) {
  const MatMulPlan p = MustPlan({2, 3}, {3});
  EXPECT_EQ(p.m, 2);
  EXPECT_EQ(p.k, 3);
  EXPECT_EQ(p.n, 1);
  EXPECT_THAT(p.output_shape, ElementsAre(2));
}

TEST(PlanMatMulTest, TwoVectorsGiveAScalar) {
  const MatMulPlan p = MustPlan({5}, {5});
  EXPECT_EQ(p.m, 1);
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.k, 5);
  EXPECT_THAT(p.output_shape, IsEmpty());
  EXPECT_EQ(p.output_elements, 1);
  EXPECT_EQ(p.flops, 10);
}

TEST(PlanMatMulTest, BatchedAWithSharedB) {
  const MatMulPlan p = MustPlan({5, 2, 3}, {3, 4});
  EXPECT_THAT(p.batch_shape, ElementsAre(5));
  EXPECT_THAT(p.a_batch, ElementsAre(5));
  EXPECT_THAT(p.b_batch, ElementsAre(1));
  EXPECT_EQ(p.batch_count, 5);
  EXPECT_THAT(p.output_shape, ElementsAre(5, 2, 4));
}

TEST(PlanMatMulTest, VectorsAgainstBatches) {
  EXPECT_THAT(MustPlan({3}, {5, 3, 4}).output_shape, ElementsAre(5, 4));
  EXPECT_THAT(MustPlan({5, 2, 3}, {3}).output_shape, ElementsAre(5, 2));
  EXPECT_THAT(MustPlan({3}, {7, 1, 3, 4}).output_shape, ElementsAre(7, 1, 4));
}

TEST(PlanMatMulTest, BatchDimensionsBroadcast) {
  const MatMulPlan p = MustPlan({2, 1, 2, 3}, {5, 3, 4});
  EXPECT_THAT(p.batch_shape, ElementsAre(2, 5));
  EXPECT_THAT(p.a_batch, ElementsAre(2, 1));
  EXPECT_THAT(p.b_batch, ElementsAre(1, 5));
  EXPECT_EQ(p.batch_count, 10);
  EXPECT_THAT(p.output_shape, ElementsAre(2, 5, 2, 4));
  EXPECT_EQ(p.output_elements, 80);

  EXPECT_THAT(MustPlan({1, 2, 3}, {4, 3, 5}).output_shape, ElementsAre(4, 2, 5));
  EXPECT_THAT(MustPlan({4, 2, 3}, {1, 3, 5}).output_shape, ElementsAre(4, 2, 5));
  EXPECT_THAT(MustPlan({6, 1, 2, 3}, {1, 7, 3, 5}).output_shape, ElementsAre(6, 7, 2, 5));
}

TEST(PlanMatMulTest, ZeroSizeDimensions) {
  const MatMulPlan m0 = MustPlan({0, 3}, {3, 4});
  EXPECT_THAT(m0.output_shape, ElementsAre(0, 4));
  EXPECT_EQ(m0.output_elements, 0);
  const MatMulPlan n0 = MustPlan({2, 3}, {3, 0});
  EXPECT_THAT(n0.output_shape, ElementsAre(2, 0));
  EXPECT_EQ(n0.output_elements, 0);
  const MatMulPlan k0 = MustPlan({2, 0}, {0, 4});
  EXPECT_EQ(k0.k, 0);
  EXPECT_THAT(k0.output_shape, ElementsAre(2, 4));
  EXPECT_EQ(k0.output_elements, 8);
  EXPECT_EQ(k0.flops, 0);
  const MatMulPlan batch0 = MustPlan({0, 2, 3}, {3, 4});
  EXPECT_THAT(batch0.output_shape, ElementsAre(0, 2, 4));
  EXPECT_EQ(batch0.batch_count, 0);
  EXPECT_EQ(batch0.output_elements, 0);
  // 1 broadcasts against 0, as in numpy.
  EXPECT_THAT(MustPlan({0, 2, 3}, {1, 3, 4}).output_shape, ElementsAre(0, 2, 4));
  EXPECT_THAT(MustPlan({1, 2, 3}, {0, 3, 4}).output_shape, ElementsAre(0, 2, 4));
  EXPECT_THAT(MustPlan({0}, {0}).output_shape, IsEmpty());
  EXPECT_EQ(MustPlan({0}, {0}).output_elements, 1);  // an empty dot product is one zero
}

TEST(PlanMatMulTest, RejectsMismatchedContractedDimensions) {
  EXPECT_THAT(PlanError({2, 3}, {4, 5}),
              AllOf(HasSubstr("K=3"), HasSubstr("K=4"), HasSubstr("[2,3]"), HasSubstr("[4,5]")));
  // Also after 1-D promotion.
  EXPECT_THAT(PlanError({3}, {4}), AllOf(HasSubstr("K=3"), HasSubstr("K=4")));
  EXPECT_THAT(PlanError({3}, {4, 5}), AllOf(HasSubstr("K=3"), HasSubstr("K=4")));
  EXPECT_THAT(PlanError({2, 3}, {4}), AllOf(HasSubstr("K=3"), HasSubstr("K=4")));
  PlanError({2, 0}, {1, 4});
  PlanError({5, 2, 3}, {5, 2, 3});
}

TEST(PlanMatMulTest, RejectsRankZeroOperandsNamingThem) {
  EXPECT_THAT(PlanError({}, {3, 4}), AllOf(HasSubstr("'A'"), HasSubstr("rank >= 1")));
  EXPECT_THAT(PlanError({3, 4}, {}), AllOf(HasSubstr("'B'"), HasSubstr("rank >= 1")));
  PlanError({}, {});
}

TEST(PlanMatMulTest, RejectsBatchDimensionsThatDoNotBroadcast) {
  EXPECT_THAT(PlanError({2, 3, 4}, {3, 4, 5}),
              AllOf(HasSubstr("[2]"), HasSubstr("[3]"), HasSubstr("broadcast")));
  PlanError({2, 2, 3, 4}, {3, 4, 5});
  PlanError({0, 2, 3}, {2, 3, 4});  // 0 against 2 does not broadcast
}

TEST(PlanMatMulTest, RejectsBadShapes) {
  PlanError({-1, 3}, {3, 4});
  PlanError({2, 3}, {3, std::numeric_limits<int64_t>::min()});
  PlanError(Shape(33, 1), {1, 1});
  PlanError({kInt64Max, 2}, {2, 1});  // A's own element count overflows
}

TEST(PlanMatMulTest, RejectsOutputElementCountOverflow) {
  PlanError({int64_t{1} << 32, 1}, {1, int64_t{1} << 32});
  // Each operand fits, but the broadcast batch does not.
  PlanError({int64_t{1} << 32, 1, 1, 1}, {1, int64_t{1} << 32, 1, 1});
}

TEST(PlanMatMulTest, FlopsSaturate) {
  const MatMulPlan p =
      MustPlan({int64_t{1} << 20, int64_t{1} << 22}, {int64_t{1} << 22, int64_t{1} << 20});
  EXPECT_EQ(p.flops, kInt64Max);
  EXPECT_EQ(p.output_elements, int64_t{1} << 40);
}

// --- RunMatMul against a per-batch-entry ReferenceGemm ------------------------------

Tensor RandomTensor(DataType type, const Shape& shape, std::mt19937_64& rng) {
  absl::StatusOr<Tensor> t = Tensor::Allocate(type, shape);
  EXPECT_TRUE(t.ok()) << t.status();
  FillRandom(type, t->raw_data(), t->num_elements(), rng);
  return std::move(*t);
}

// numpy.matmul by its definition: for every output batch index, pick each
// operand's matrix (index modulo its own dim, i.e. broadcasting) and multiply
// with ReferenceGemm. Also returns |A| * |B| for the tolerance.
struct Expected {
  std::vector<uint8_t> values;
  std::vector<double> exact;
  std::vector<double> abs_dot;
};

Expected ReferenceMatMul(const Shape& a_shape, const Shape& b_shape, const Tensor& a,
                         const Tensor& b) {
  const DataType type = a.type();
  const int64_t es = DataTypeSize(type);
  const bool a_vec = a_shape.size() == 1, b_vec = b_shape.size() == 1;
  const int64_t m = a_vec ? 1 : a_shape[a_shape.size() - 2];
  const int64_t k = a_shape.back();
  const int64_t n = b_vec ? 1 : b_shape.back();
  Shape a_batch(a_shape.begin(), a_shape.end() - (a_vec ? 1 : 2));
  Shape b_batch(b_shape.begin(), b_shape.end() - (b_vec ? 1 : 2));
  const size_t rank = std::max(a_batch.size(), b_batch.size());
  a_batch.insert(a_batch.begin(), rank - a_batch.size(), 1);
  b_batch.insert(b_batch.begin(), rank - b_batch.size(), 1);
  Shape batch(rank);
  int64_t count = 1;
  for (size_t d = 0; d < rank; ++d) {
    batch[d] = a_batch[d] == 1 ? b_batch[d] : a_batch[d];
    count *= batch[d];
  }
  Expected out;
  out.values.resize(static_cast<size_t>(count * m * n * es));
  out.exact.resize(static_cast<size_t>(count * m * n));
  out.abs_dot.resize(static_cast<size_t>(count * m * n));
  for (int64_t e = 0; e < count; ++e) {
    // Unravel e over `batch`, then ravel into each operand's own batch.
    int64_t rest = e, a_index = 0, b_index = 0, a_scale = 1, b_scale = 1;
    for (size_t d = rank; d-- > 0;) {
      const int64_t i = rest % batch[d];
      rest /= batch[d];
      a_index += (a_batch[d] == 1 ? 0 : i) * a_scale;
      b_index += (b_batch[d] == 1 ? 0 : i) * b_scale;
      a_scale *= a_batch[d];
      b_scale *= b_batch[d];
    }
    const auto* a_mat = static_cast<const uint8_t*>(a.raw_data()) + a_index * m * k * es;
    const auto* b_mat = static_cast<const uint8_t*>(b.raw_data()) + b_index * k * n * es;
    ReferenceGemm(type, m, n, k, a_mat, k, b_mat, n, out.values.data() + e * m * n * es, n);
    const ops_testing::ExactProduct exact = ExactGemm(type, m, n, k, a_mat, k, b_mat, n);
    std::copy(exact.value.begin(), exact.value.end(), out.exact.begin() + e * m * n);
    std::copy(exact.abs_dot.begin(), exact.abs_dot.end(), out.abs_dot.begin() + e * m * n);
  }
  return out;
}

void CheckRunMatMul(DataType type, const Shape& a_shape, const Shape& b_shape,
                    std::mt19937_64& rng) {
  const std::string where =
      absl::StrCat(DataTypeName(type), " ", ShapeToString(a_shape), " x ", ShapeToString(b_shape));
  const MatMulPlan plan = MustPlan(a_shape, b_shape);
  const Tensor a = RandomTensor(type, a_shape, rng);
  const Tensor b = RandomTensor(type, b_shape, rng);
  const Expected want = ReferenceMatMul(a_shape, b_shape, a, b);
  ASSERT_EQ(static_cast<int64_t>(want.abs_dot.size()), plan.output_elements) << where;
  for (int threads : {1, 2}) {
    absl::StatusOr<Tensor> y = Tensor::Allocate(type, plan.output_shape);
    ASSERT_TRUE(y.ok()) << where;
    if (y->byte_size() > 0) std::memset(y->raw_data(), 0xff, static_cast<size_t>(y->byte_size()));
    absl::Status status = RunMatMul(plan, a, b, &*y, threads);
    ASSERT_TRUE(status.ok()) << where << ": " << status;
    int reported = 0;
    for (int64_t i = 0; i < plan.output_elements && reported < 5; ++i) {
      const double got = ValueAt(type, y->raw_data(), i);
      const bool ok =
          IsFloatingPoint(type)
              ? WithinTolerance(type, got, ValueAt(type, want.values.data(), i), want.abs_dot[i],
                                plan.k) &&
                    WithinRoundingOfExact(type, got, want.exact[i], want.abs_dot[i], plan.k)
              : SameBits(type, y->raw_data(), i, want.values.data(), i);
      if (!ok) {
        ++reported;
        ADD_FAILURE() << where << " threads=" << threads << " element " << i << ": got "
                      << ElementToString(type, y->raw_data(), i) << ", want "
                      << ElementToString(type, want.values.data(), i);
      }
    }
  }
}

const std::vector<std::pair<Shape, Shape>>& RunCases() {
  static const std::vector<std::pair<Shape, Shape>> cases = {
      // plain, 1-D promotions
      {{2, 3}, {3, 4}},
      {{1, 1}, {1, 1}},
      {{3}, {3, 5}},
      {{7, 3}, {3}},
      {{13}, {13}},
      {{17, 31}, {31, 13}},
      {{65, 129}, {129, 7}},
      // B shared: the batch folds into M (B 2-D, 1-D, or with all-1 batch dims)
      {{5, 2, 3}, {3, 4}},
      {{3, 4, 7, 5}, {5, 2}},
      {{4, 3, 8}, {8}},
      {{2, 3, 5, 6}, {1, 1, 6, 3}},
      {{3, 17, 13}, {1, 13, 16}},
      {{2, 129, 17}, {17, 3}},
      // batched B, A broadcast (A 2-D, 1-D or with 1s)
      {{2, 3}, {4, 3, 5}},
      {{3}, {4, 3, 5}},
      {{1, 2, 3}, {4, 3, 5}},
      {{7, 3}, {2, 1, 3, 3}},
      // both batched, same batch
      {{4, 2, 3}, {4, 3, 5}},
      {{2, 3, 4, 5}, {2, 3, 5, 6}},
      // broadcast on both sides, mixed
      {{2, 1, 3, 4}, {5, 4, 2}},
      {{6, 1, 2, 3}, {1, 7, 3, 5}},
      {{3, 1, 2, 7}, {1, 4, 7, 3}},
      {{1, 5, 1, 2, 3}, {4, 1, 3, 3, 2}},
      // zero sizes: M, N, K, batch
      {{0, 3}, {3, 4}},
      {{2, 3}, {3, 0}},
      {{2, 0}, {0, 4}},
      {{3, 2, 0}, {0, 5}},
      {{3, 2, 0}, {3, 0, 5}},
      {{0, 2, 3}, {3, 4}},
      {{0, 2, 3}, {1, 3, 4}},
      {{2, 3}, {0, 3, 4}},
      {{0}, {0}},
      {{0}, {0, 5}},
  };
  return cases;
}

class RunMatMulTest : public ::testing::TestWithParam<DataType> {};

TEST_P(RunMatMulTest, MatchesPerBatchReference) {
  std::mt19937_64 rng(17 + static_cast<int>(GetParam()));
  for (const auto& [a, b] : RunCases()) CheckRunMatMul(GetParam(), a, b, rng);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, RunMatMulTest, ::testing::ValuesIn(kAllDataTypes),
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return std::string(DataTypeName(info.param));
                         });

TEST(RunMatMulTest, KnownBatchedBroadcastValues) {
  // A [2,1,1,2] = [[[[1,2]]],[[[3,4]]]], B [3,2,1] = [[[1],[0]],[[0],[1]],[[1],[1]]]
  absl::StatusOr<Tensor> a = Tensor::Allocate(DataType::kINT64, {2, 1, 1, 2});
  absl::StatusOr<Tensor> b = Tensor::Allocate(DataType::kINT64, {3, 2, 1});
  ASSERT_TRUE(a.ok() && b.ok());
  const int64_t av[] = {1, 2, 3, 4}, bv[] = {1, 0, 0, 1, 1, 1};
  std::memcpy(a->raw_data(), av, sizeof av);
  std::memcpy(b->raw_data(), bv, sizeof bv);
  const MatMulPlan plan = MustPlan(a->shape(), b->shape());
  ASSERT_THAT(plan.output_shape, ElementsAre(2, 3, 1, 1));
  absl::StatusOr<Tensor> y = Tensor::Allocate(DataType::kINT64, plan.output_shape);
  ASSERT_TRUE(y.ok());
  ASSERT_TRUE(RunMatMul(plan, *a, *b, &*y, 1).ok());
  const int64_t* out = y->data<int64_t>();
  // numpy: np.matmul(A, B).ravel() == [1, 2, 3, 3, 4, 7]
  EXPECT_THAT(std::vector<int64_t>(out, out + 6), ElementsAreArray({1, 2, 3, 3, 4, 7}));
}

TEST(RunMatMulTest, ZeroKWritesZerosOnBothPaths) {
  for (const auto& [as, bs] :
       std::vector<std::pair<Shape, Shape>>{{{3, 2, 0}, {0, 4}}, {{3, 2, 0}, {3, 0, 4}}}) {
    for (DataType type : kAllDataTypes) {
      const MatMulPlan plan = MustPlan(as, bs);
      absl::StatusOr<Tensor> a = Tensor::Allocate(type, as), b = Tensor::Allocate(type, bs);
      absl::StatusOr<Tensor> y = Tensor::Allocate(type, plan.output_shape);
      ASSERT_TRUE(a.ok() && b.ok() && y.ok());
      std::memset(y->raw_data(), 0xff, static_cast<size_t>(y->byte_size()));
      ASSERT_TRUE(RunMatMul(plan, *a, *b, &*y, 2).ok());
      for (int64_t i = 0; i < y->byte_size(); ++i) {
        ASSERT_EQ(y->bytes()[i], 0) << DataTypeName(type) << " " << ShapeToString(as);
      }
    }
  }
}

TEST(RunMatMulTest, RejectsOperandsOfDifferentDatatypes) {
  const MatMulPlan plan = MustPlan({2, 2}, {2, 2});
  absl::StatusOr<Tensor> a = Tensor::Zeros(DataType::kFP32, {2, 2});
  absl::StatusOr<Tensor> b = Tensor::Zeros(DataType::kFP64, {2, 2});
  absl::StatusOr<Tensor> y = Tensor::Zeros(DataType::kFP32, {2, 2});
  ASSERT_TRUE(a.ok() && b.ok() && y.ok());
  EXPECT_FALSE(RunMatMul(plan, *a, *b, &*y, 1).ok());
}

}  // namespace
}  // namespace gemmserve
