// ServedModel: a model as the engine serves it, with its batcher, its
// statistics (Triton's, model_statistics.h) and its metrics, which it
// records itself as requests go by.
//
//   auto served = std::make_shared<ServedModel>(std::move(model), batching, metrics);
//   served->RecordBatch(requests, rows, weight_bytes, start, end);
//   ModelStatistics now = served->statistics();
#ifndef GEMMSERVE_SERVER_CORE_SERVED_MODEL_H_
#define GEMMSERVE_SERVER_CORE_SERVED_MODEL_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/dynamic_batcher.h"
#include "server/core/model.h"
#include "server/core/model_statistics.h"
#include "server/core/model_warmup.h"
#include "server/metrics/metrics.h"

namespace gemmserve {

// A model as served: the model, its batcher (none: one request at a time),
// its statistics and its metrics, which it records itself.
class ServedModel {
 public:
  // `metrics` may be null (nothing recorded but the statistics).
  ServedModel(std::unique_ptr<Model> model, std::optional<BatchingOptions> batching,
              std::shared_ptr<ModelMetrics> metrics);
  const Model& model() const { return *model_; }
  const ModelMetadata& metadata() const { return model_->metadata(); }
  const std::optional<BatchingOptions>& batching() const { return batching_; }
  ModelStatistics statistics() const;
  ModelMetrics* metrics() const { return metrics_.get(); }
  const std::shared_ptr<ModelMetrics>& shared_metrics() const { return metrics_; }
  // The batcher, once the engine gave it one; null for a model without batching.
  DynamicBatcher* batcher() const { return batcher_.get(); }
  void set_batcher(std::shared_ptr<DynamicBatcher> batcher) { batcher_ = std::move(batcher); }
  // The samples it ran at load (their bytes emptied): what its statistics
  // count before any client's request.
  const std::vector<WarmupSample>& warmup() const { return warmup_; }
  void set_warmup(std::vector<WarmupSample> warmup) { warmup_ = std::move(warmup); }

  // What the engine records as requests go by.
  void RecordAdmitted(int64_t cost) const;
  // Answered without compute (dropped, refused, or failed before its batch).
  void RecordFailure(absl::Duration since_arrival);
  // One kernel call of `requests` requests and `rows` rows.
  void RecordBatch(int64_t requests, int64_t rows, int64_t weight_bytes, absl::Time start,
                   absl::Time end);
  // A request of the batch answered, `ok` or not: its queueing and compute.
  void RecordAnswer(absl::Time arrival, absl::Time start, absl::Time end, bool ok, int64_t rows,
                    DataType type, int64_t flops, int64_t input_bytes, int64_t output_bytes);
  void RecordQueueDepth() const;

 private:
  struct Stat {
    std::atomic<uint64_t> count{0}, ns{0};
    void Add(absl::Duration d, uint64_t n = 1);
    DurationStat Get() const { return {count.load(), ns.load()}; }
  };

  std::unique_ptr<Model> model_;
  std::optional<BatchingOptions> batching_;
  std::shared_ptr<DynamicBatcher> batcher_;
  std::shared_ptr<ModelMetrics> metrics_;  // null when the engine records none
  std::vector<WarmupSample> warmup_;
  std::atomic<uint64_t> last_inference_ms_{0}, inference_count_{0}, execution_count_{0};
  Stat success_, fail_, queue_, compute_infer_;
  mutable absl::Mutex batch_stats_mu_;
  std::map<int64_t, DurationStat> batch_stats_ ABSL_GUARDED_BY(batch_stats_mu_);
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_SERVED_MODEL_H_
