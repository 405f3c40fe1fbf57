#include "bench/bench_inputs.h"

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace gemmserve {
namespace {

TEST(MakeRoutingTest, PicksDistinctGroupsPerToken) {
  Tensor idx = *MakeRouting(100, 6, 8, Routing::kUniform, 1);
  for (int64_t m = 0; m < 100; ++m) {
    std::vector<bool> seen(8, false);
    for (int64_t s = 0; s < 6; ++s) {
      const int64_t group = idx.data<int64_t>()[m * 6 + s];
      ASSERT_GE(group, 0);
      ASSERT_LT(group, 8);
      EXPECT_FALSE(seen[group]) << "token " << m << " repeats group " << group;
      seen[group] = true;
    }
  }
  EXPECT_EQ(CountDistinctGroups(idx, 8), 8);
}

TEST(MakeRoutingTest, SkewedSendsEveryEvenTokenToGroupZero) {
  Tensor idx = *MakeRouting(10, 3, 64, Routing::kSkewed, 1);
  for (int64_t m = 0; m < 10; ++m) {
    const int64_t* row = idx.data<int64_t>() + m * 3;
    if (m % 2 == 0) {
      EXPECT_EQ(row[0], 0) << "token " << m;
      EXPECT_NE(row[1], 0);
      EXPECT_NE(row[2], 0);
    }
    EXPECT_NE(row[0], row[1]);
    EXPECT_NE(row[0], row[2]);
    EXPECT_NE(row[1], row[2]);
  }
}

TEST(MakeRoutingTest, RejectsMoreSlotsThanGroups) {
  EXPECT_EQ(MakeRouting(1, 3, 2, Routing::kUniform, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RandomTensorTest, IsDeterministic) {
  Tensor a = *RandomTensor(DataType::kBF16, {3, 5}, 7);
  Tensor b = *RandomTensor(DataType::kBF16, {3, 5}, 7);
  EXPECT_EQ(std::vector<uint8_t>(a.bytes().begin(), a.bytes().end()),
            std::vector<uint8_t>(b.bytes().begin(), b.bytes().end()));
}

}  // namespace
}  // namespace gemmserve
