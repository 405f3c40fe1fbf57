#include "server/metrics/metrics.h"

#include <prometheus/registry.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gemmserve {
namespace {

TEST(MetricsTest, BucketsParseOnlyIncreasingPositiveSeconds) {
  auto ok = Metrics::ParseBuckets("0.0001, 0.001,0.5");
  ASSERT_TRUE(ok.ok());
  EXPECT_THAT(*ok, ::testing::ElementsAre(0.0001, 0.001, 0.5));
  EXPECT_TRUE(Metrics::ParseBuckets("")->empty());
  for (const char* bad : {"0.1,0.01", "0,1", "-1", "x", "0.1,0.1"}) {
    EXPECT_EQ(Metrics::ParseBuckets(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(MetricsTest, ReasonsFollowTheStatusTable) {
  RejectReason r;
  ASSERT_TRUE(RejectReasonOf(absl::StatusCode::kInvalidArgument, &r));
  EXPECT_EQ(r, RejectReason::kInvalid);
  ASSERT_TRUE(RejectReasonOf(absl::StatusCode::kResourceExhausted, &r));
  EXPECT_EQ(r, RejectReason::kOverLimit);
  ASSERT_TRUE(RejectReasonOf(absl::StatusCode::kDeadlineExceeded, &r));
  EXPECT_EQ(r, RejectReason::kDeadline);
  ASSERT_TRUE(RejectReasonOf(absl::StatusCode::kCancelled, &r));
  EXPECT_EQ(r, RejectReason::kCancelled);
  EXPECT_FALSE(RejectReasonOf(absl::StatusCode::kOk, &r));
  EXPECT_FALSE(RejectReasonOf(absl::StatusCode::kNotFound, &r));
}

TEST(MetricsTest, ModelMetricsAreCreatedOnceAndServedOnAFreePort) {
  auto metrics = Metrics::Start("127.0.0.1:0", {});
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_GT((*metrics)->port(), 0);
  ModelMetrics* a = (*metrics)->ForModel("a");
  EXPECT_EQ((*metrics)->ForModel("a"), a);
  EXPECT_NE((*metrics)->ForModel("b"), a);
  EXPECT_NE((*metrics)->Unknown(), nullptr);
  // Recording on every path must not crash, whatever the values.
  a->RecordResponse(absl::StatusCode::kOk, absl::Microseconds(30));
  a->RecordResponse(absl::StatusCode::kUnauthenticated, absl::Seconds(100));
  a->RecordBatch(3, 12, absl::Milliseconds(2));
  a->RecordFlops(DataType::kBF16, 1 << 20);
  a->RecordBytes(10, 0);
  a->RecordRejected(RejectReason::kQueueFull);
  a->SetQueueDepth(4);
  (*metrics)->AddInflight(1);
  (*metrics)->AddInflight(-1);
}

TEST(MetricsTest, ABusyPortIsAClearError) {
  auto first = Metrics::Start("127.0.0.1:0", {});
  ASSERT_TRUE(first.ok());
  auto second = Metrics::Start("127.0.0.1:" + std::to_string((*first)->port()), {});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gemmserve
