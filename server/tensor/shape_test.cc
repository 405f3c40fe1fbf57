#include "server/tensor/shape.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"

namespace gemmserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

// --- CheckedMul / CheckedAdd -------------------------------------------------

TEST(CheckedMulTest, MultipliesNonNegativeOperands) {
  EXPECT_EQ(*CheckedMul(0, 0), 0);
  EXPECT_EQ(*CheckedMul(6, 7), 42);
  EXPECT_EQ(*CheckedMul(1, kInt64Max), kInt64Max);
  EXPECT_EQ(*CheckedMul(kInt64Max, 1), kInt64Max);
  EXPECT_EQ(*CheckedMul(0, kInt64Max), 0);
  EXPECT_EQ(*CheckedMul(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
  EXPECT_EQ(*CheckedMul(int64_t{3037000499}, int64_t{3037000499}),
            int64_t{9223372030926249001});  // floor(sqrt(INT64_MAX))^2
}

TEST(CheckedMulTest, RejectsOverflow) {
  for (auto [a, b] :
       std::vector<std::pair<int64_t, int64_t>>{{int64_t{1} << 32, int64_t{1} << 31},
                                                {int64_t{3037000500}, int64_t{3037000500}},
                                                {kInt64Max, 2},
                                                {2, kInt64Max},
                                                {kInt64Max, kInt64Max}}) {
    absl::StatusOr<int64_t> r = CheckedMul(a, b);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << a << " x " << b;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("overflows int64"));
  }
}

TEST(CheckedMulTest, RejectsNegativeOperands) {
  for (auto [a, b] : std::vector<std::pair<int64_t, int64_t>>{{-1, 1},
                                                              {1, -1},
                                                              {-1, -1},
                                                              {-1, 0},
                                                              {0, -1},
                                                              {kInt64Min, 1},
                                                              {1, kInt64Min},
                                                              {kInt64Min, 0},
                                                              {kInt64Min, -1}}) {
    EXPECT_EQ(CheckedMul(a, b).status().code(), absl::StatusCode::kInvalidArgument)
        << a << " x " << b;
  }
}

TEST(CheckedAddTest, AddsAndRejectsOverflowAndNegatives) {
  EXPECT_EQ(*CheckedAdd(0, 0), 0);
  EXPECT_EQ(*CheckedAdd(kInt64Max - 1, 1), kInt64Max);
  EXPECT_EQ(CheckedAdd(kInt64Max, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckedAdd(-1, 5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckedAdd(5, kInt64Min).status().code(), absl::StatusCode::kInvalidArgument);
}

// --- ElementCount --------------------------------------------------------------

TEST(ElementCountTest, EmptyShapeIsOneElement) { EXPECT_EQ(*ElementCount({}), 1); }

TEST(ElementCountTest, IsTheProductOfTheDimensions) {
  EXPECT_EQ(*ElementCount({7}), 7);
  EXPECT_EQ(*ElementCount({2, 3, 4}), 24);
  EXPECT_EQ(*ElementCount({1, 1, 1, 1}), 1);
  EXPECT_EQ(*ElementCount({kInt64Max}), kInt64Max);
  EXPECT_EQ(*ElementCount({int64_t{1} << 31, int64_t{1} << 30, 2}), int64_t{1} << 62);
}

TEST(ElementCountTest, ZeroDimensionGivesZeroElements) {
  EXPECT_EQ(*ElementCount({0}), 0);
  EXPECT_EQ(*ElementCount({5, 0, 7}), 0);
  EXPECT_EQ(*ElementCount({0, kInt64Max}), 0);
  EXPECT_EQ(*ElementCount({kInt64Max, 0}), 0);
  EXPECT_EQ(*ElementCount({int64_t{1} << 31, 0, int64_t{1} << 31}), 0);
}

TEST(ElementCountTest, OverflowIsRejectedEvenWithAZeroDimension) {
  // numpy rejects np.empty((0, 2**62, 2**62)) too: the non-zero dims must fit.
  for (const Shape& shape : std::vector<Shape>{{0, int64_t{1} << 62, int64_t{1} << 62},
                                               {int64_t{1} << 62, int64_t{1} << 62, 0},
                                               {int64_t{1} << 62, 0, 4}}) {
    absl::StatusOr<int64_t> r = ElementCount(shape);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << ShapeToString(shape);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("overflows int64"));
  }
}

TEST(ElementCountTest, OverflowIsRejected) {
  for (const Shape& shape :
       std::vector<Shape>{{int64_t{1} << 32, int64_t{1} << 31},
                          {kInt64Max, 2},
                          {int64_t{3037000500}, int64_t{3037000500}},
                          {1 << 16, 1 << 16, 1 << 16, 1 << 16},
                          Shape(64, 2) /* rank check first: also an error */}) {
    EXPECT_EQ(ElementCount(shape).status().code(), absl::StatusCode::kInvalidArgument)
        << ShapeToString(shape);
  }
  // 2^62 * 2 = 2^63 is one past INT64_MAX.
  EXPECT_EQ(ElementCount({int64_t{1} << 62, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ElementCount({int64_t{1} << 61, 2, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ElementCount({int64_t{1} << 31, int64_t{1} << 31, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ElementCountTest, NegativeDimensionIsRejectedAndNamed) {
  absl::StatusOr<int64_t> r = ElementCount({2, -1, 3});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              AllOf(HasSubstr("negative dimension -1"), HasSubstr("[2,-1,3]")));
}

TEST(ElementCountTest, NegativeDimensionWinsOverAZero) {
  EXPECT_EQ(ElementCount({0, -3}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ElementCount({-3, 0}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ElementCountTest, Int64MinDimensionIsRejected) {
  for (const Shape& shape : std::vector<Shape>{
           {kInt64Min}, {2, kInt64Min}, {kInt64Min, 0}, {kInt64Min, kInt64Min}, {-1, -1}}) {
    absl::StatusOr<int64_t> r = ElementCount(shape);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << ShapeToString(shape);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("negative dimension"));
  }
}

TEST(ElementCountTest, RankUpToMaxRankIsAccepted) {
  EXPECT_EQ(*ElementCount(Shape(kMaxRank, 1)), 1);
  Shape twos(kMaxRank - 1, 2);
  EXPECT_EQ(*ElementCount(twos), int64_t{1} << (kMaxRank - 1));
}

TEST(ElementCountTest, RankOverMaxRankIsRejected) {
  absl::StatusOr<int64_t> r = ElementCount(Shape(kMaxRank + 1, 1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              AllOf(HasSubstr("rank 33"), HasSubstr("maximum rank 32")));
}

TEST(ElementCountTest, MillionDimensionShapeIsRejectedWithAShortMessage) {
  Shape huge(1000000, -1);  // every dimension bad too: the rank check comes first
  absl::StatusOr<int64_t> r = ElementCount(huge);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(r.status().message().size(), 200u);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("rank 1000000"));
}

// --- ByteSize ------------------------------------------------------------------

TEST(ByteSizeTest, IsElementCountTimesElementSize) {
  EXPECT_EQ(*ByteSize({2, 3}, DataType::kFP16), 12);
  EXPECT_EQ(*ByteSize({2, 3}, DataType::kBF16), 12);
  EXPECT_EQ(*ByteSize({2, 3}, DataType::kFP32), 24);
  EXPECT_EQ(*ByteSize({2, 3}, DataType::kINT32), 24);
  EXPECT_EQ(*ByteSize({2, 3}, DataType::kUINT32), 24);
  EXPECT_EQ(*ByteSize({2, 3}, DataType::kFP64), 48);
  EXPECT_EQ(*ByteSize({2, 3}, DataType::kINT64), 48);
  EXPECT_EQ(*ByteSize({2, 3}, DataType::kUINT64), 48);
  EXPECT_EQ(*ByteSize({}, DataType::kFP64), 8);
  EXPECT_EQ(*ByteSize({0, 5}, DataType::kFP64), 0);
}

TEST(ByteSizeTest, RejectsByteCountOverflowOfAValidElementCount) {
  EXPECT_EQ(*ByteSize({kInt64Max / 8}, DataType::kFP64), kInt64Max / 8 * 8);
  EXPECT_EQ(ByteSize({kInt64Max / 8 + 1}, DataType::kFP64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ByteSize({kInt64Max / 2}, DataType::kFP16), kInt64Max / 2 * 2);
  EXPECT_EQ(ByteSize({kInt64Max / 2 + 1}, DataType::kBF16).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<int64_t> r = ByteSize({int64_t{1} << 31, int64_t{1} << 31}, DataType::kFP32);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("overflows int64"));
}

TEST(ByteSizeTest, PropagatesShapeErrors) {
  EXPECT_EQ(ByteSize({-4}, DataType::kFP32).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ByteSize(Shape(kMaxRank + 1, 1), DataType::kFP32).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ByteSize({kInt64Max, 2}, DataType::kFP16).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- ShapeToString ---------------------------------------------------------------

TEST(ShapeToStringTest, FormatsShortShapesInFull) {
  EXPECT_EQ(ShapeToString({}), "[]");
  EXPECT_EQ(ShapeToString({0}), "[0]");
  EXPECT_EQ(ShapeToString({2, 3, 4}), "[2,3,4]");
  EXPECT_EQ(ShapeToString({-1, kInt64Min}), "[-1,-9223372036854775808]");
  EXPECT_EQ(ShapeToString({1, 2, 3, 4, 5, 6, 7, 8}), "[1,2,3,4,5,6,7,8]");
}

TEST(ShapeToStringTest, AbbreviatesLongShapes) {
  EXPECT_EQ(ShapeToString({1, 2, 3, 4, 5, 6, 7, 8, 9}), "[1,2,3,4,5,6,7,8,... (9 dims)]");
  const std::string million = ShapeToString(Shape(1000000, 123456789));
  EXPECT_LT(million.size(), 200u);
  EXPECT_THAT(million, HasSubstr("(1000000 dims)"));
}

// --- BroadcastShapes ---------------------------------------------------------------

struct BroadcastCase {
  Shape a, b, expected;
};

TEST(BroadcastShapesTest, FollowsNumpyRules) {
  const std::vector<BroadcastCase> cases = {
      {{}, {}, {}},
      {{3}, {}, {3}},
      {{}, {3}, {3}},
      {{1}, {1}, {1}},
      {{4}, {4}, {4}},
      {{1}, {5}, {5}},
      {{5}, {1}, {5}},
      {{2, 1}, {1, 3}, {2, 3}},
      {{5, 1, 4}, {3, 1}, {5, 3, 4}},
      {{8, 1, 6, 1}, {7, 1, 5}, {8, 7, 6, 5}},  // numpy docs example
      {{15, 3, 5}, {15, 1, 5}, {15, 3, 5}},
      {{15, 3, 5}, {3, 1}, {15, 3, 5}},
      {{1}, {0}, {0}},  // 1 stretches to 0
      {{0}, {1}, {0}},
      {{0}, {0}, {0}},
      {{2, 0}, {1}, {2, 0}},
      {{1, 1, 1}, {7}, {1, 1, 7}},
  };
  for (const BroadcastCase& c : cases) {
    absl::StatusOr<Shape> out = BroadcastShapes(c.a, c.b);
    ASSERT_TRUE(out.ok()) << ShapeToString(c.a) << " vs " << ShapeToString(c.b) << ": "
                          << out.status();
    EXPECT_EQ(*out, c.expected) << ShapeToString(c.a) << " vs " << ShapeToString(c.b);
  }
}

TEST(BroadcastShapesTest, RejectsIncompatibleDimensionsNamingBothShapes) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2}, {3}}, {{3}, {4, 1, 2}}, {{2, 3}, {3, 3}}, {{0}, {2}}, {{2}, {0}}, {{8, 4, 3}, {2, 1}},
  };
  for (const auto& [a, b] : cases) {
    absl::StatusOr<Shape> out = BroadcastShapes(a, b);
    ASSERT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument)
        << ShapeToString(a) << " vs " << ShapeToString(b);
    EXPECT_THAT(std::string(out.status().message()),
                AllOf(HasSubstr(ShapeToString(a)), HasSubstr(ShapeToString(b)),
                      HasSubstr("do not broadcast")));
  }
}

TEST(BroadcastShapesTest, IsSymmetric) {
  const std::vector<Shape> shapes = {{}, {1}, {3}, {0}, {2, 1}, {1, 3}, {4, 2, 3}, {1, 1, 3}};
  for (const Shape& a : shapes) {
    for (const Shape& b : shapes) {
      absl::StatusOr<Shape> ab = BroadcastShapes(a, b);
      absl::StatusOr<Shape> ba = BroadcastShapes(b, a);
      EXPECT_EQ(ab.ok(), ba.ok()) << ShapeToString(a) << " vs " << ShapeToString(b);
      if (ab.ok() && ba.ok()) {
        EXPECT_EQ(*ab, *ba);
      }
    }
  }
}

TEST(BroadcastShapesTest, EmptyWithEmptyIsEmpty) {
  absl::StatusOr<Shape> out = BroadcastShapes({}, {});
  ASSERT_TRUE(out.ok());
  EXPECT_THAT(*out, IsEmpty());
  EXPECT_THAT(*BroadcastShapes({2, 1, 4}, {}), ElementsAre(2, 1, 4));
}

}  // namespace
}  // namespace gemmserve
