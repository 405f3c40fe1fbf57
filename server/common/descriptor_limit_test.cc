#include "server/common/descriptor_limit.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gemmserve {
namespace {

using ::testing::HasSubstr;

TEST(DescriptorPlan, EverythingFitsUnderALargeLimit) {
  DescriptorPlan plan = PlanDescriptors(1 << 20, 2048, 1024);
  EXPECT_EQ(plan.shm_max_regions, 1024);
  EXPECT_EQ(plan.warning, "");
}

// The attack run's case: 1010 regions under the usual 1024 left no descriptor
// for an HTTP connection. The regions now get what the connections leave.
TEST(DescriptorPlan, RegionsGetWhatTheConnectionsAndTheReserveLeave) {
  DescriptorPlan plan = PlanDescriptors(3000, 2048, 1024);
  EXPECT_EQ(plan.shm_max_regions, 3000 - 2048 - kReservedDescriptors);
  EXPECT_THAT(plan.warning, HasSubstr("shared memory regions are capped at 696 (of 1024)"));
  // Exactly enough: no warning.
  plan = PlanDescriptors(2048 + 1024 + kReservedDescriptors, 2048, 1024);
  EXPECT_EQ(plan.shm_max_regions, 1024);
  EXPECT_EQ(plan.warning, "");
}

TEST(DescriptorPlan, ALimitBelowTheConnectionCapsIsReportedWithTheNumbers) {
  DescriptorPlan plan = PlanDescriptors(1024, 2048, 1024);
  EXPECT_EQ(plan.shm_max_regions, 0);
  EXPECT_THAT(plan.warning, HasSubstr("is 1024: less than the connection caps"));
  EXPECT_THAT(plan.warning, HasSubstr("2048"));
  plan = PlanDescriptors(10, 2048, 1024);  // below the reserve: nothing negative
  EXPECT_EQ(plan.shm_max_regions, 0);
}

TEST(DescriptorPlan, RaisingTheLimitNeverLowersIt) {
  const int64_t first = RaiseDescriptorLimit();
  EXPECT_GT(first, 0);
  EXPECT_GE(RaiseDescriptorLimit(), first);
}

}  // namespace
}  // namespace gemmserve
