#include "server/metrics/metrics.h"
#include "server/metrics/metrics_endpoint.h"

#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>

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

// The value a scrape shows for `family` with exactly these labels, or
// nullopt when there is no such series: counters and gauges give their
// value, histograms their sample count.
std::optional<double> Scraped(const Metrics& metrics, const std::string& family,
                              const std::map<std::string, std::string>& labels) {
  for (const prometheus::MetricFamily& f : metrics.registry().Collect()) {
    if (f.name != family) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      std::map<std::string, std::string> got;
      for (const auto& l : m.label) got[l.name] = l.value;
      if (got != labels) continue;
      switch (f.type) {
        case prometheus::MetricType::Counter: return m.counter.value;
        case prometheus::MetricType::Gauge: return m.gauge.value;
        case prometheus::MetricType::Histogram:
          return static_cast<double>(m.histogram.sample_count);
        default: return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

// Series of `family` carrying model="<model>".
int SeriesOf(const Metrics& metrics, const std::string& family, const std::string& model) {
  int count = 0;
  for (const prometheus::MetricFamily& f : metrics.registry().Collect()) {
    if (f.name != family) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      for (const auto& l : m.label) count += l.name == "model" && l.value == model;
    }
  }
  return count;
}

TEST(MetricsTest, WhatIsRecordedIsWhatAScrapeShows) {
  std::unique_ptr<Metrics> metrics = Metrics::Create({});
  const Metrics& m = *metrics;
  std::shared_ptr<ModelMetrics> a = metrics->ForModel("a");
  EXPECT_EQ(metrics->ForModel("a"), a);
  std::shared_ptr<ModelMetrics> b = metrics->ForModel("b");
  EXPECT_NE(b, a);
  ASSERT_NE(m.Unknown(), nullptr);
  a->RecordResponse(absl::StatusCode::kOk, absl::Microseconds(30));
  a->RecordResponse(absl::StatusCode::kOk, absl::Microseconds(50));
  a->RecordResponse(absl::StatusCode::kUnauthenticated, absl::Seconds(100));
  a->RecordBatch(3, 12, absl::Milliseconds(2));
  a->RecordFlops(DataType::kBF16, 1 << 20);
  a->RecordBytes(10, 0);
  a->RecordRejected(RejectReason::kQueueFull);
  a->SetQueueDepth(4);
  a->RecordAdmitted(4096);
  a->RecordWeightBytes(3 << 20);
  a->RecordWeightBytes(0);
  metrics->AddInflight(1);
  metrics->AddInflightBytes(300);
  EXPECT_EQ(Scraped(m, "gemmserve_requests_total", {{"model", "a"}, {"code", "OK"}}), 2);
  EXPECT_EQ(Scraped(m, "gemmserve_requests_total", {{"model", "a"}, {"code", "UNAUTHENTICATED"}}),
            1);
  EXPECT_EQ(Scraped(m, "gemmserve_requests_total", {{"model", "b"}, {"code", "OK"}}), 0);
  EXPECT_EQ(Scraped(m, "gemmserve_request_duration_seconds", {{"model", "a"}}), 3);
  EXPECT_EQ(Scraped(m, "gemmserve_batch_rows", {{"model", "a"}}), 1);
  EXPECT_EQ(Scraped(m, "gemmserve_flops_total", {{"model", "a"}, {"datatype", "BF16"}}), 1 << 20);
  EXPECT_EQ(Scraped(m, "gemmserve_flops_total", {{"model", "a"}, {"datatype", "FP32"}}), 0);
  EXPECT_EQ(Scraped(m, "gemmserve_bytes_total", {{"model", "a"}, {"direction", "in"}}), 10);
  EXPECT_EQ(Scraped(m, "gemmserve_rejected_total", {{"model", "a"}, {"reason", "queue_full"}}), 1);
  EXPECT_EQ(Scraped(m, "gemmserve_queue_depth", {{"model", "a"}}), 4);
  EXPECT_EQ(Scraped(m, "gemmserve_admitted_bytes_total", {{"model", "a"}}), 4096);
  EXPECT_EQ(Scraped(m, "gemmserve_weight_bytes_total", {{"model", "a"}}), 3 << 20);
  EXPECT_EQ(Scraped(m, "gemmserve_weight_bytes_total", {{"model", "b"}}), 0);
  EXPECT_EQ(Scraped(m, "gemmserve_inflight_requests", {}), 1);
  EXPECT_EQ(Scraped(m, "gemmserve_inflight_bytes", {}), 300);
  metrics->AddInflight(-1);
  metrics->AddInflightBytes(-300);
  EXPECT_EQ(Scraped(m, "gemmserve_inflight_requests", {}), 0);
  EXPECT_EQ(Scraped(m, "gemmserve_inflight_bytes", {}), 0);
}

TEST(MetricsTest, AModelsSeriesGoWithItsLastHolder) {
  std::unique_ptr<Metrics> metrics = Metrics::Create({});
  const Metrics& m = *metrics;
  const int unknown_series = SeriesOf(m, "gemmserve_requests_total", "_unknown");
  ASSERT_GT(unknown_series, 0);
  EXPECT_EQ(m.model_label_count(), 1u);
  std::shared_ptr<ModelMetrics> first = metrics->ForModel("gone");
  std::shared_ptr<ModelMetrics> second = metrics->ForModel("gone");  // an in-flight request
  first->RecordResponse(absl::StatusCode::kOk, absl::Microseconds(1));
  EXPECT_EQ(SeriesOf(m, "gemmserve_requests_total", "gone"), unknown_series);
  EXPECT_EQ(m.model_label_count(), 2u);
  first.reset();  // unloaded, one request still in flight: the series stay
  EXPECT_EQ(Scraped(m, "gemmserve_requests_total", {{"model", "gone"}, {"code", "OK"}}), 1);
  second.reset();
  for (const char* family :
       {"gemmserve_requests_total", "gemmserve_request_duration_seconds",
        "gemmserve_queue_duration_seconds", "gemmserve_compute_duration_seconds",
        "gemmserve_batch_requests", "gemmserve_batch_rows", "gemmserve_queue_depth",
        "gemmserve_flops_total", "gemmserve_bytes_total", "gemmserve_rejected_total",
        "gemmserve_admitted_bytes_total"}) {
    EXPECT_EQ(SeriesOf(m, family, "gone"), 0) << family;
    EXPECT_GT(SeriesOf(m, family, "_unknown"), 0) << family;
  }
  EXPECT_EQ(m.model_label_count(), 1u);
  // A name taken up again starts from zero.
  std::shared_ptr<ModelMetrics> again = metrics->ForModel("gone");
  EXPECT_EQ(Scraped(m, "gemmserve_requests_total", {{"model", "gone"}, {"code", "OK"}}), 0);
}

TEST(MetricsTest, AHundredNamesComeAndGoWithoutGrowingTheScrape) {
  std::unique_ptr<Metrics> metrics = Metrics::Create({});
  const size_t families_before = metrics->registry().Collect().size();
  size_t series_before = 0;
  for (const auto& f : metrics->registry().Collect()) series_before += f.metric.size();
  for (int i = 0; i < 100; ++i) {
    std::shared_ptr<ModelMetrics> m = metrics->ForModel("model_" + std::to_string(i));
    m->RecordResponse(absl::StatusCode::kOk, absl::Microseconds(1));
  }
  size_t series_after = 0;
  for (const auto& f : metrics->registry().Collect()) series_after += f.metric.size();
  EXPECT_EQ(metrics->registry().Collect().size(), families_before);
  EXPECT_EQ(series_after, series_before);
  EXPECT_EQ(metrics->model_label_count(), 1u);
}

TEST(MetricsTest, ABusyPortIsAClearError) {
  std::unique_ptr<Metrics> metrics = Metrics::Create({});
  auto first = MetricsEndpoint::Start(*metrics, "127.0.0.1", 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_GT((*first)->port(), 0);
  EXPECT_EQ((*first)->address(), "127.0.0.1:" + std::to_string((*first)->port()));
  auto second = MetricsEndpoint::Start(*metrics, "127.0.0.1", (*first)->port());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

// civetweb polls its listener with a 2 s timeout and would notice the stop
// only then (exposer_stop.h); knocked on, it stops at once (milliseconds). A
// knock that failed would wait out the rest of the quantum, 0-2 s: 1 s is
// half of it, so a broken knock fails here half the time per host. Under a
// sanitizer, beside other tests, a prompt stop has taken most of a second:
// there the bound is the quantum itself, a guard against a stop that hangs.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr auto kPromptStop = std::chrono::milliseconds(2500);
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr auto kPromptStop = std::chrono::milliseconds(2500);
#else
constexpr auto kPromptStop = std::chrono::milliseconds(1000);
#endif
#else
constexpr auto kPromptStop = std::chrono::milliseconds(1000);
#endif

TEST(MetricsTest, AServingMetricsStopsWithoutWaitingOutThePollQuantum) {
  std::unique_ptr<Metrics> metrics = Metrics::Create({});
  for (const char* host : {"127.0.0.1", "0.0.0.0", "::1"}) {
    auto endpoint = MetricsEndpoint::Start(*metrics, host, 0);
    if (!endpoint.ok() && std::string(host) == "::1") continue;  // no IPv6 here
    ASSERT_TRUE(endpoint.ok()) << host << ": " << endpoint.status();
    ASSERT_GT((*endpoint)->port(), 0);
    const auto start = std::chrono::steady_clock::now();
    endpoint->reset();
    EXPECT_LT(std::chrono::steady_clock::now() - start, kPromptStop) << host;
  }
}

}  // namespace
}  // namespace gemmserve
