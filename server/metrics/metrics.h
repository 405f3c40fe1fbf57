// Prometheus metrics of the server (prometheus-cpp, Debian's
// prometheus-cpp-dev), served on --metrics_port at /metrics by
// MetricsEndpoint on the library's own HTTP threads: a scrape never runs on a
// gRPC or compute thread.
//
// Recording takes no global lock: every model gets its metric objects once,
// when it is installed (ModelMetrics), and the data path only touches those
// (atomic counters and gauges; a histogram's own small mutex).
//
//   gemmserve_requests_total{model,code}           counter, every gRPC status code
//   gemmserve_request_duration_seconds{model}      histogram, arrival to response
//   gemmserve_queue_duration_seconds{model}        histogram, arrival to compute start
//   gemmserve_compute_duration_seconds{model}      histogram, the kernel call of the batch
//   gemmserve_batch_requests{model}                histogram, requests per kernel call
//   gemmserve_batch_rows{model}                    histogram, rows per kernel call
//   gemmserve_queue_depth{model}                   gauge, requests waiting in the batcher
//   gemmserve_inflight_requests                    gauge, accepted and not yet answered
//   gemmserve_flops_total{model,datatype}          counter, 2*M*N*K of computed requests
//   gemmserve_bytes_total{model,direction}         counter, tensor bytes in and out
//   gemmserve_rejected_total{model,reason}         counter, queue_full, deadline, cancelled,
//                                                  invalid, over_limit
//   gemmserve_admitted_bytes_total{model}          counter, what accepted requests were
//                                                  counted at against --max_inflight_bytes
//   gemmserve_weight_bytes_total{model}            counter, weight bytes the kernel calls
//                                                  used (each expert once per call)
//   gemmserve_inflight_bytes                       gauge, bytes accepted requests hold now
//   gemmserve_build_info{version}                  gauge, 1
//
// The model label is a served model's name; requests naming no served model
// are counted under model="_unknown" (a reserved name), so a client cannot
// grow the label set. A model's series go when its last user lets go of its
// ModelMetrics (it was unloaded and its last request answered), so loading
// and unloading many names does not grow a scrape either.
//
//   std::unique_ptr<Metrics> metrics = Metrics::Create({});
//   std::shared_ptr<ModelMetrics> m = metrics->ForModel("matmul");
//   m->RecordQueue(absl::Microseconds(40));
#ifndef GEMMSERVE_SERVER_METRICS_METRICS_H_
#define GEMMSERVE_SERVER_METRICS_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/tensor/datatype.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace gemmserve {

enum class RejectReason { kQueueFull, kDeadline, kCancelled, kInvalid, kOverLimit };

// The reason a final status code counts under, if any.
bool RejectReasonOf(absl::StatusCode code, RejectReason* reason);

// Every metric of one model label. Thread-safe; never blocks on a scrape.
class ModelMetrics {
 public:
  void RecordResponse(absl::StatusCode code, absl::Duration since_arrival);
  void RecordQueue(absl::Duration d);
  void RecordBatch(int64_t requests, int64_t rows, absl::Duration compute);
  void RecordFlops(DataType type, int64_t flops);
  void RecordBytes(int64_t in, int64_t out);
  void RecordRejected(RejectReason reason);
  void SetQueueDepth(int64_t depth);
  void RecordAdmitted(int64_t bytes);
  void RecordWeightBytes(int64_t bytes);

 private:
  friend class Metrics;
  std::string name_;
  static constexpr int kCodes = 17;
  static constexpr int kDataTypes = 8;
  static constexpr int kReasons = 5;
  std::array<prometheus::Counter*, kCodes> requests_{};
  prometheus::Histogram* request_duration_ = nullptr;
  prometheus::Histogram* queue_duration_ = nullptr;
  prometheus::Histogram* compute_duration_ = nullptr;
  prometheus::Histogram* batch_requests_ = nullptr;
  prometheus::Histogram* batch_rows_ = nullptr;
  prometheus::Gauge* queue_depth_ = nullptr;
  std::array<prometheus::Counter*, kDataTypes> flops_{};
  prometheus::Counter* bytes_in_ = nullptr;
  prometheus::Counter* bytes_out_ = nullptr;
  std::array<prometheus::Counter*, kReasons> rejected_{};
  prometheus::Counter* admitted_bytes_ = nullptr;
  prometheus::Counter* weight_bytes_ = nullptr;
};

struct MetricsOptions {
  // Upper bounds of the latency histograms, in seconds; empty: 25 us to
  // about 52 s, doubling.
  std::vector<double> latency_buckets;
  std::string version = "unknown";
};

class Metrics {
 public:
  // The registry of every metric, recorded and not served: /metrics is
  // MetricsEndpoint's (metrics_endpoint.h), which the composition root starts.
  static std::unique_ptr<Metrics> Create(MetricsOptions options);
  ~Metrics();

  // The metrics of a model label, created on first use (under a lock: call
  // it when a model is installed, not per request) and shared by every
  // holder of the name; its series are removed from /metrics when the last
  // holder lets go. The Metrics must outlive every ModelMetrics.
  std::shared_ptr<ModelMetrics> ForModel(absl::string_view model);
  // For requests naming no served model; lives as long as the Metrics.
  const std::shared_ptr<ModelMetrics>& Unknown() const { return unknown_; }
  // Model labels with series now (the "_unknown" one included).
  size_t model_label_count() const;

  void AddInflight(int64_t delta);
  void AddInflightBytes(int64_t delta);

  // What a scrape would show now, for tests.
  const prometheus::Registry& registry() const { return *registry_; }
  // The registry, for the endpoint that serves it (shared: a scrape in
  // progress keeps it).
  std::shared_ptr<prometheus::Registry> shared_registry() const { return registry_; }

  // Parses --latency_buckets: comma-separated increasing seconds.
  static absl::StatusOr<std::vector<double>> ParseBuckets(absl::string_view text);

 private:
  Metrics();
  // The deleter of a ModelMetrics: removes its series unless the name has
  // been taken up again meanwhile (the series are then the new holder's).
  void Release(ModelMetrics* metrics);
  struct Families;
  // The per-model metric families, registered in `registry`.
  static std::unique_ptr<Families> RegisterFamilies(prometheus::Registry& registry);

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> families_;
  MetricsOptions options_;
  mutable absl::Mutex mu_;
  struct Entry {
    std::weak_ptr<ModelMetrics> metrics;
    ModelMetrics* raw;  // which object the entry is, once `metrics` expired
  };
  std::map<std::string, Entry, std::less<>> models_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<ModelMetrics> unknown_;
  prometheus::Gauge* inflight_ = nullptr;
  prometheus::Gauge* inflight_bytes_ = nullptr;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_METRICS_METRICS_H_
