#include "server/ops/grouped_matmul.h"

#include <cstdint>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <tuple>
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
using ops_testing::FillRandom;
using ops_testing::SetValue;
using ops_testing::ValueAt;
using ops_testing::WithinRoundingOfExact;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr DataType kFloatTypes[] = {DataType::kFP32, DataType::kFP64, DataType::kFP16,
                                    DataType::kBF16};

absl::Status PlanStatus(const Shape& input, const Shape& weights, const Shape& indices,
                        const Shape* bias = nullptr) {
  return PlanGroupedMatMul(input, weights, indices, bias).status();
}

// --- PlanGroupedMatMul --------------------------------------------------------------

TEST(PlanGroupedMatMulTest, ComputesTheOutputShape) {
  const Shape bias = {4, 5};
  absl::StatusOr<GroupedMatMulPlan> plan = PlanGroupedMatMul({3, 7}, {4, 7, 5}, {3, 2}, &bias);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->m, 3);
  EXPECT_EQ(plan->k, 7);
  EXPECT_EQ(plan->n, 5);
  EXPECT_EQ(plan->g, 4);
  EXPECT_EQ(plan->s, 2);
  EXPECT_TRUE(plan->has_bias);
  EXPECT_THAT(plan->output_shape, ElementsAre(3, 2, 5));
  EXPECT_EQ(plan->output_elements, 30);
  EXPECT_EQ(plan->flops, 2 * 3 * 2 * 7 * 5);
  absl::StatusOr<GroupedMatMulPlan> no_bias = PlanGroupedMatMul({3, 7}, {4, 7, 5}, {3, 2}, nullptr);
  ASSERT_TRUE(no_bias.ok());
  EXPECT_FALSE(no_bias->has_bias);
}

TEST(PlanGroupedMatMulTest, InputMustBeRank2) {
  absl::Status s = PlanStatus({2, 3, 4}, {1, 3, 4}, {2, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("'input'"), HasSubstr("[2,3,4]")));
  EXPECT_EQ(PlanStatus({3}, {1, 3, 4}, {1, 1}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(PlanGroupedMatMulTest, G2GroupIndicesOfWrongRankOrFirstDimension) {
  for (const Shape& idx : std::vector<Shape>{{2}, {2, 1, 1}, {}}) {
    absl::Status s = PlanStatus({2, 3}, {4, 3, 5}, idx);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << ShapeToString(idx);
    EXPECT_THAT(std::string(s.message()), HasSubstr("'group_indices'"));
  }
  absl::Status s = PlanStatus({2, 3}, {4, 3, 5}, {3, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("'group_indices'"), HasSubstr("M=2"), HasSubstr("[3,1]")));
  EXPECT_EQ(PlanStatus({0, 3}, {4, 3, 5}, {1, 1}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(PlanGroupedMatMulTest, G3WeightsOfWrongRankOrK) {
  for (const Shape& w : std::vector<Shape>{{3, 5}, {1, 1, 3, 5}, {3}}) {
    absl::Status s = PlanStatus({2, 3}, w, {2, 1});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << ShapeToString(w);
    EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("'weights'"), HasSubstr("rank 3")));
  }
  absl::Status s = PlanStatus({2, 3}, {4, 5, 5}, {2, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("'weights'"), HasSubstr("K=3"), HasSubstr("[4,5,5]")));
}

TEST(PlanGroupedMatMulTest, G4BiasMustBeGByN) {
  for (const Shape& bias : std::vector<Shape>{{5}, {4, 4}, {3, 5}, {1, 4, 5}, {5, 4}, {}}) {
    absl::Status s = PlanStatus({2, 3}, {4, 3, 5}, {2, 1}, &bias);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << ShapeToString(bias);
    EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("'bias'"), HasSubstr("[4,5]")));
  }
  const Shape ok = {4, 5};
  EXPECT_TRUE(PlanStatus({2, 3}, {4, 3, 5}, {2, 1}, &ok).ok());
}

TEST(PlanGroupedMatMulTest, G5NoGroupsWithTokensToRoute) {
  absl::Status s = PlanStatus({2, 3}, {0, 3, 5}, {2, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("G = 0"));
  // Also when the output would be empty because N == 0.
  EXPECT_EQ(PlanStatus({2, 3}, {0, 3, 0}, {2, 1}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(PlanGroupedMatMulTest, G6EmptyRoutingIsFine) {
  for (const auto& [input, weights, indices] : std::vector<std::tuple<Shape, Shape, Shape>>{
           {{0, 3}, {4, 3, 5}, {0, 2}},     // M = 0
           {{2, 3}, {4, 3, 5}, {2, 0}},     // S = 0
           {{0, 3}, {0, 3, 5}, {0, 2}},     // G = 0 with nothing routed
           {{2, 3}, {0, 3, 5}, {2, 0}},     // G = 0, S = 0
           {{2, 0}, {4, 0, 5}, {2, 1}},     // K = 0
           {{2, 3}, {4, 3, 0}, {2, 1}}}) {  // N = 0
    absl::StatusOr<GroupedMatMulPlan> plan = PlanGroupedMatMul(input, weights, indices, nullptr);
    ASSERT_TRUE(plan.ok()) << ShapeToString(input) << ShapeToString(weights)
                           << ShapeToString(indices) << ": " << plan.status();
    EXPECT_THAT(plan->output_shape, ElementsAre(input[0], indices[1], weights[2]));
  }
}

TEST(PlanGroupedMatMulTest, RejectsBadDimensions) {
  EXPECT_EQ(PlanStatus({-2, 3}, {4, 3, 5}, {-2, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanStatus({2, 3}, {4, 3, std::numeric_limits<int64_t>::min()}, {2, 1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanStatus({2, 3}, {kInt64Max, 3, 5}, {2, 1}).code(),
            absl::StatusCode::kInvalidArgument);
  // Every tensor fits, the [M, S, N] output does not.
  EXPECT_EQ(
      PlanStatus({int64_t{1} << 31, 0}, {1, 0, int64_t{1} << 31}, {int64_t{1} << 31, 4}).code(),
      absl::StatusCode::kInvalidArgument);
}

// --- ValidateGroupIndices -------------------------------------------------------------

template <typename T>
Tensor IndexTensor(DataType type, const Shape& shape, const std::vector<T>& values) {
  absl::StatusOr<Tensor> t = Tensor::Allocate(type, shape);
  EXPECT_TRUE(t.ok());
  EXPECT_EQ(t->num_elements(), static_cast<int64_t>(values.size()));
  if (!values.empty()) std::memcpy(t->raw_data(), values.data(), values.size() * sizeof(T));
  return std::move(*t);
}

TEST(ValidateGroupIndicesTest, AcceptsIndicesInRange) {
  EXPECT_TRUE(
      ValidateGroupIndices(IndexTensor<int32_t>(DataType::kINT32, {2, 3}, {0, 1, 2, 3, 3, 0}), 4)
          .ok());
  EXPECT_TRUE(
      ValidateGroupIndices(IndexTensor<int64_t>(DataType::kINT64, {2, 3}, {0, 1, 2, 3, 3, 0}), 4)
          .ok());
  EXPECT_TRUE(ValidateGroupIndices(IndexTensor<int64_t>(DataType::kINT64, {0, 3}, {}), 0).ok());
  EXPECT_TRUE(ValidateGroupIndices(IndexTensor<int32_t>(DataType::kINT32, {3, 0}, {}), 0).ok());
}

TEST(ValidateGroupIndicesTest, G1NegativeIndexNeverCountsBack) {
  for (DataType type : {DataType::kINT32, DataType::kINT64}) {
    const Tensor t = type == DataType::kINT32
                         ? IndexTensor<int32_t>(type, {2, 3}, {0, 1, 2, 0, 1, -1})
                         : IndexTensor<int64_t>(type, {2, 3}, {0, 1, 2, 0, 1, -1});
    absl::Status s = ValidateGroupIndices(t, 4);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << DataTypeName(type);
    EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("'group_indices'"), HasSubstr("-1"),
                                                HasSubstr("[1,2]"), HasSubstr("G=4")));
  }
}

TEST(ValidateGroupIndicesTest, G1IndexEqualToGIsOutOfRange) {
  for (DataType type : {DataType::kINT32, DataType::kINT64}) {
    const Tensor t = type == DataType::kINT32 ? IndexTensor<int32_t>(type, {3, 1}, {0, 4, 1})
                                              : IndexTensor<int64_t>(type, {3, 1}, {0, 4, 1});
    absl::Status s = ValidateGroupIndices(t, 4);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("value 4"), HasSubstr("[1,0]")));
  }
}

TEST(ValidateGroupIndicesTest, G1ExtremeValuesAreOutOfRange) {
  absl::Status s =
      ValidateGroupIndices(IndexTensor<int64_t>(DataType::kINT64, {1, 2}, {0, kInt64Max}), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("9223372036854775807"));
  EXPECT_EQ(
      ValidateGroupIndices(
          IndexTensor<int64_t>(DataType::kINT64, {1, 1}, {std::numeric_limits<int64_t>::min()}), 3)
          .code(),
      absl::StatusCode::kInvalidArgument);
  // A value that wraps to a valid index when truncated to 32 bits.
  EXPECT_EQ(ValidateGroupIndices(
                IndexTensor<int64_t>(DataType::kINT64, {1, 1}, {(int64_t{1} << 32) + 1}), 3)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ValidateGroupIndices(
          IndexTensor<int32_t>(DataType::kINT32, {1, 1}, {std::numeric_limits<int32_t>::max()}), 3)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ValidateGroupIndices(
          IndexTensor<int32_t>(DataType::kINT32, {1, 1}, {std::numeric_limits<int32_t>::min()}), 3)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(ValidateGroupIndicesTest, AnyIndexIsOutOfRangeWhenGIsZero) {
  EXPECT_EQ(ValidateGroupIndices(IndexTensor<int32_t>(DataType::kINT32, {1, 1}, {0}), 0).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ValidateGroupIndicesTest, G7RejectsOtherDatatypes) {
  for (DataType type : {DataType::kFP32, DataType::kUINT32, DataType::kUINT64, DataType::kFP16}) {
    absl::StatusOr<Tensor> t = Tensor::Zeros(type, {2, 1});
    ASSERT_TRUE(t.ok());
    absl::Status s = ValidateGroupIndices(*t, 4);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << DataTypeName(type);
    EXPECT_THAT(std::string(s.message()), HasSubstr("INT32 or INT64"));
  }
}

// --- RunGroupedMatMul against a naive reference ----------------------------------------

struct GroupedCase {
  std::string name;
  int64_t m, k, n, g, s;
  // Group of (token, slot); called once per pair.
  std::function<int64_t(int64_t m, int64_t s, std::mt19937_64& rng)> route;
};

int64_t RandomGroup(int64_t g, std::mt19937_64& rng) {
  return static_cast<int64_t>(rng() % static_cast<uint64_t>(g));
}

std::vector<GroupedCase> Cases() {
  auto random_route = [](int64_t g) {
    return [g](int64_t, int64_t, std::mt19937_64& rng) { return RandomGroup(g, rng); };
  };
  auto fixed = [](int64_t group) {
    return [group](int64_t, int64_t, std::mt19937_64&) { return group; };
  };
  return {
      {"one", 1, 1, 1, 1, 1, fixed(0)},
      {"small_random", 7, 13, 17, 5, 2, random_route(5)},
      {"primes", 31, 17, 13, 7, 3, random_route(7)},
      {"skewed_all_on_one_group", 31, 16, 8, 4, 3, fixed(2)},
      {"unused_groups", 13, 7, 3, 6, 2,
       [](int64_t m, int64_t, std::mt19937_64&) { return m % 2 == 0 ? int64_t{0} : int64_t{5}; }},
      {"duplicate_group_in_slots", 9, 5, 4, 3, 3,
       [](int64_t m, int64_t, std::mt19937_64&) { return m % 3; }},
      {"many_groups_few_tokens", 3, 8, 5, 64, 2, random_route(64)},
      {"last_group_only", 5, 3, 2, 9, 1, fixed(8)},
      {"block_edges_257_rows_one_group", 257, 3, 5, 2, 1, fixed(1)},
      {"block_edges_258_pairs_one_group", 129, 17, 9, 3, 2, fixed(0)},
      {"block_edges_k129_n257", 5, 129, 257, 2, 2, random_route(2)},
      {"wide", 64, 65, 127, 4, 4, random_route(4)},
      // Each path of the scheduler (see kStreamingMaxRows in gemm_scheduler.h):
      // streaming with K split into slices, a column block edge (1024) and a
      // K remainder; the 16/17-row boundary between streaming and packed;
      // packed groups run side by side and cut into column tiles; both paths
      // in one call.
      {"streaming_k_slices_column_block_edge", 1, 300, 1030, 3, 1, fixed(1)},
      {"streaming_k_remainder", 2, 131, 33, 2, 1, random_route(2)},
      {"streaming_sixteen_rows", 16, 70, 20, 2, 1, fixed(0)},
      {"packed_seventeen_rows", 17, 70, 20, 2, 1, fixed(1)},
      {"packed_one_group_column_tiles", 40, 33, 300, 2, 1, fixed(1)},
      {"packed_across_groups", 120, 40, 24, 5, 1,
       [](int64_t m, int64_t, std::mt19937_64&) { return m % 5; }},
      {"streaming_and_packed_in_one_call", 40, 33, 19, 6, 2,
       [](int64_t, int64_t s, std::mt19937_64& rng) {
         return s == 0 ? int64_t{0} : 1 + RandomGroup(5, rng);
       }},
      {"k_zero", 4, 0, 6, 3, 2, random_route(3)},
      {"m_zero", 0, 4, 6, 3, 2, random_route(3)},
      {"s_zero", 4, 4, 6, 3, 0, random_route(3)},
      {"n_zero", 4, 4, 0, 3, 2, random_route(3)},
  };
}

// output[m, s, :] = input[m, :] @ weights[idx[m, s]] + bias[idx[m, s]], from
// ReferenceGemm of one row in FP64 over the exactly widened operands, so the
// expectation is the exact value rounded once; |.| sums for the tolerance.
void CheckCase(DataType type, DataType index_type, bool with_bias, const GroupedCase& c,
               int threads, std::mt19937_64& rng) {
  const std::string where =
      absl::StrCat(c.name, " ", DataTypeName(type), " indices ", DataTypeName(index_type),
                   with_bias ? " bias" : "", " threads=", threads);
  absl::StatusOr<Tensor> x = Tensor::Allocate(type, {c.m, c.k});
  absl::StatusOr<Tensor> w = Tensor::Allocate(type, {c.g, c.k, c.n});
  absl::StatusOr<Tensor> bias = Tensor::Allocate(type, {c.g, c.n});
  absl::StatusOr<Tensor> idx = Tensor::Allocate(index_type, {c.m, c.s});
  ASSERT_TRUE(x.ok() && w.ok() && bias.ok() && idx.ok()) << where;
  FillRandom(type, x->raw_data(), x->num_elements(), rng);
  FillRandom(type, w->raw_data(), w->num_elements(), rng);
  FillRandom(type, bias->raw_data(), bias->num_elements(), rng);
  std::vector<int64_t> groups(static_cast<size_t>(c.m * c.s));
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.s; ++j) {
      const int64_t g = c.route(i, j, rng);
      groups[i * c.s + j] = g;
      if (index_type == DataType::kINT32) {
        idx->data<int32_t>()[i * c.s + j] = static_cast<int32_t>(g);
      } else {
        idx->data<int64_t>()[i * c.s + j] = g;
      }
    }

  const Shape bias_shape = bias->shape();
  absl::StatusOr<GroupedMatMulPlan> plan =
      PlanGroupedMatMul(x->shape(), w->shape(), idx->shape(), with_bias ? &bias_shape : nullptr);
  ASSERT_TRUE(plan.ok()) << where << ": " << plan.status();
  ASSERT_TRUE(ValidateGroupIndices(*idx, plan->g).ok()) << where;
  absl::StatusOr<Tensor> out = Tensor::Allocate(type, plan->output_shape);
  ASSERT_TRUE(out.ok()) << where;
  if (out->byte_size() > 0)
    std::memset(out->raw_data(), 0xff, static_cast<size_t>(out->byte_size()));
  absl::Status status =
      RunGroupedMatMul(*plan, *x, *w, *idx, with_bias ? &*bias : nullptr, &*out, threads);
  ASSERT_TRUE(status.ok()) << where << ": " << status;

  std::vector<double> xd(static_cast<size_t>(c.k)), wd(static_cast<size_t>(c.k * c.n)),
      dot(static_cast<size_t>(c.n)), abs_x(static_cast<size_t>(c.k)),
      abs_w(static_cast<size_t>(c.k * c.n)), abs_dot(static_cast<size_t>(c.n));
  int reported = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.s; ++j) {
      const int64_t g = groups[i * c.s + j];
      for (int64_t p = 0; p < c.k; ++p) {
        xd[p] = ValueAt(type, x->raw_data(), i * c.k + p);
        abs_x[p] = std::fabs(xd[p]);
      }
      for (int64_t q = 0; q < c.k * c.n; ++q) {
        wd[q] = ValueAt(type, w->raw_data(), g * c.k * c.n + q);
        abs_w[q] = std::fabs(wd[q]);
      }
      ReferenceGemm(DataType::kFP64, 1, c.n, c.k, xd.data(), c.k, wd.data(), c.n, dot.data(), c.n);
      ReferenceGemm(DataType::kFP64, 1, c.n, c.k, abs_x.data(), c.k, abs_w.data(), c.n,
                    abs_dot.data(), c.n);
      for (int64_t col = 0; col < c.n && reported < 5; ++col) {
        double want = dot[col], bound = abs_dot[col];
        if (with_bias) {
          const double b = ValueAt(type, bias->raw_data(), g * c.n + col);
          want += b;
          bound += std::fabs(b);
        }
        const int64_t o = (i * c.s + j) * c.n + col;
        const double got = ValueAt(type, out->raw_data(), o);
        // k + 1 accumulation steps: the bias add is one more.
        if (!WithinRoundingOfExact(type, got, want, bound, c.k + (with_bias ? 1 : 0))) {
          ++reported;
          ADD_FAILURE() << where << " at [" << i << "," << j << "," << col << "] group " << g
                        << ": got " << ElementToString(type, out->raw_data(), o) << ", want "
                        << want;
        }
      }
    }
  }
}

class RunGroupedMatMulTest : public ::testing::TestWithParam<DataType> {};

TEST_P(RunGroupedMatMulTest, MatchesNaiveReference) {
  std::mt19937_64 rng(1000 + static_cast<int>(GetParam()));
  for (const GroupedCase& c : Cases()) {
    for (DataType index_type : {DataType::kINT32, DataType::kINT64}) {
      for (bool with_bias : {false, true}) {
        for (int threads : {1, 2}) CheckCase(GetParam(), index_type, with_bias, c, threads, rng);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, RunGroupedMatMulTest, ::testing::ValuesIn(kFloatTypes),
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return std::string(DataTypeName(info.param));
                         });

TEST(RunGroupedMatMulKnownValuesTest, SelectsEachTokensGroupAndAddsItsBias) {
  // input [[1, 2]], weights: group 0 = I, group 1 = [[0, 1], [1, 0]], group 2 = 2I
  absl::StatusOr<Tensor> x = Tensor::Allocate(DataType::kFP64, {2, 2});
  absl::StatusOr<Tensor> w = Tensor::Allocate(DataType::kFP64, {3, 2, 2});
  absl::StatusOr<Tensor> b = Tensor::Allocate(DataType::kFP64, {3, 2});
  absl::StatusOr<Tensor> idx = Tensor::Allocate(DataType::kINT64, {2, 3});
  ASSERT_TRUE(x.ok() && w.ok() && b.ok() && idx.ok());
  const double xv[] = {1, 2, 3, 4};
  const double wv[] = {1, 0, 0, 1, 0, 1, 1, 0, 2, 0, 0, 2};
  const double bv[] = {0, 0, 10, 20, 100, 200};
  const int64_t iv[] = {2, 1, 1, 0, 0, 2};  // token 0: groups 2, 1, 1; token 1: 0, 0, 2
  std::memcpy(x->raw_data(), xv, sizeof xv);
  std::memcpy(w->raw_data(), wv, sizeof wv);
  std::memcpy(b->raw_data(), bv, sizeof bv);
  std::memcpy(idx->raw_data(), iv, sizeof iv);
  const Shape bias_shape = {3, 2};
  absl::StatusOr<GroupedMatMulPlan> plan =
      PlanGroupedMatMul(x->shape(), w->shape(), idx->shape(), &bias_shape);
  ASSERT_TRUE(plan.ok());
  absl::StatusOr<Tensor> out = Tensor::Allocate(DataType::kFP64, plan->output_shape);
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(RunGroupedMatMul(*plan, *x, *w, *idx, &*b, &*out, 1).ok());
  const double* o = out->data<double>();
  // token 0 = [1, 2]: group 2 -> [2, 4] + [100, 200]; group 1 -> [2, 1] + [10, 20] (twice)
  // token 1 = [3, 4]: group 0 -> [3, 4] + 0 (twice); group 2 -> [6, 8] + [100, 200]
  EXPECT_THAT(std::vector<double>(o, o + 12),
              ElementsAre(102, 204, 12, 21, 12, 21, 3, 4, 3, 4, 106, 208));
}

TEST(RunGroupedMatMulKnownValuesTest, KZeroGivesBiasOrZeros) {
  absl::StatusOr<Tensor> x = Tensor::Allocate(DataType::kFP32, {2, 0});
  absl::StatusOr<Tensor> w = Tensor::Allocate(DataType::kFP32, {2, 0, 3});
  absl::StatusOr<Tensor> b = Tensor::Allocate(DataType::kFP32, {2, 3});
  absl::StatusOr<Tensor> idx = Tensor::Allocate(DataType::kINT32, {2, 1});
  ASSERT_TRUE(x.ok() && w.ok() && b.ok() && idx.ok());
  const float bv[] = {1, 2, 3, 4, 5, 6};
  const int32_t iv[] = {1, 0};
  std::memcpy(b->raw_data(), bv, sizeof bv);
  std::memcpy(idx->raw_data(), iv, sizeof iv);
  const Shape bias_shape = {2, 3};
  for (bool with_bias : {false, true}) {
    absl::StatusOr<GroupedMatMulPlan> plan =
        PlanGroupedMatMul(x->shape(), w->shape(), idx->shape(), with_bias ? &bias_shape : nullptr);
    ASSERT_TRUE(plan.ok());
    absl::StatusOr<Tensor> out = Tensor::Allocate(DataType::kFP32, plan->output_shape);
    ASSERT_TRUE(out.ok());
    std::memset(out->raw_data(), 0xff, static_cast<size_t>(out->byte_size()));
    ASSERT_TRUE(RunGroupedMatMul(*plan, *x, *w, *idx, with_bias ? &*b : nullptr, &*out, 2).ok());
    const float* o = out->data<float>();
    if (with_bias) {
      EXPECT_THAT(std::vector<float>(o, o + 6), ElementsAre(4, 5, 6, 1, 2, 3));
    } else {
      EXPECT_THAT(std::vector<float>(o, o + 6), ElementsAre(0, 0, 0, 0, 0, 0));
    }
  }
}

TEST(RunGroupedMatMulKnownValuesTest, HalfBiasIsAddedBeforeTheOneRounding) {
  // FP16: x = 1 + 2^-10, w = 1 + 2^-9, bias = -1. The exact result
  // 3 * 2^-10 + 2^-19 is representable in FP16. Rounding the product
  // 1 + 3 * 2^-10 + 2^-19 to FP16 before adding the bias would lose the 2^-19.
  absl::StatusOr<Tensor> x = Tensor::Allocate(DataType::kFP16, {1, 1});
  absl::StatusOr<Tensor> w = Tensor::Allocate(DataType::kFP16, {1, 1, 1});
  absl::StatusOr<Tensor> b = Tensor::Allocate(DataType::kFP16, {1, 1});
  absl::StatusOr<Tensor> idx = Tensor::Allocate(DataType::kINT64, {1, 1});
  ASSERT_TRUE(x.ok() && w.ok() && b.ok() && idx.ok());
  x->data<uint16_t>()[0] = 0x3c01;  // 1 + 2^-10
  w->data<uint16_t>()[0] = 0x3c02;  // 1 + 2^-9
  b->data<uint16_t>()[0] = FloatToHalf(-1.0f);
  idx->data<int64_t>()[0] = 0;
  const Shape bias_shape = {1, 1};
  absl::StatusOr<GroupedMatMulPlan> plan =
      PlanGroupedMatMul(x->shape(), w->shape(), idx->shape(), &bias_shape);
  ASSERT_TRUE(plan.ok());
  absl::StatusOr<Tensor> out = Tensor::Allocate(DataType::kFP16, plan->output_shape);
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(RunGroupedMatMul(*plan, *x, *w, *idx, &*b, &*out, 1).ok());
  EXPECT_EQ(HalfToFloat(out->data<uint16_t>()[0]),
            3 * std::ldexp(1.0f, -10) + std::ldexp(1.0f, -19));
}

TEST(RunGroupedMatMulKnownValuesTest, RejectsNonFloatValues) {
  absl::StatusOr<Tensor> x = Tensor::Zeros(DataType::kINT32, {1, 1});
  absl::StatusOr<Tensor> w = Tensor::Zeros(DataType::kINT32, {1, 1, 1});
  absl::StatusOr<Tensor> idx = Tensor::Zeros(DataType::kINT32, {1, 1});
  absl::StatusOr<Tensor> out = Tensor::Zeros(DataType::kINT32, {1, 1, 1});
  ASSERT_TRUE(x.ok() && w.ok() && idx.ok() && out.ok());
  absl::StatusOr<GroupedMatMulPlan> plan =
      PlanGroupedMatMul(x->shape(), w->shape(), idx->shape(), nullptr);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(RunGroupedMatMul(*plan, *x, *w, *idx, nullptr, &*out, 1).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gemmserve
