#include "server/core/served_model.h"

#include <algorithm>
#include <cstdint>

#include "absl/time/clock.h"

namespace gemmserve {
namespace {

// Counters saturate instead of wrapping.
void SaturatingIncrement(std::atomic<uint64_t>& counter, uint64_t n) {
  uint64_t now = counter.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    next = now > UINT64_MAX - n ? UINT64_MAX : now + n;
  } while (!counter.compare_exchange_weak(now, next, std::memory_order_relaxed));
}

}  // namespace

void ServedModel::Stat::Add(absl::Duration d, uint64_t n) {
  count.fetch_add(n, std::memory_order_relaxed);
  ns.fetch_add(static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Nanoseconds(d))) * n,
               std::memory_order_relaxed);
}

ServedModel::ServedModel(std::unique_ptr<Model> model, std::optional<BatchingOptions> batching,
                         std::shared_ptr<ModelMetrics> metrics)
    : model_(std::move(model)), batching_(batching), metrics_(std::move(metrics)) {}

void ServedModel::RecordAdmitted(int64_t cost) const {
  if (metrics_) metrics_->RecordAdmitted(cost);
}

void ServedModel::RecordFailure(absl::Duration since_arrival) { fail_.Add(since_arrival); }

void ServedModel::RecordQueueDepth() const {
  if (metrics_ && batcher_) metrics_->SetQueueDepth(batcher_->queued());
}

void ServedModel::RecordBatch(int64_t requests, int64_t rows, int64_t weight_bytes,
                              absl::Time start, absl::Time end) {
  execution_count_.fetch_add(1, std::memory_order_relaxed);
  last_inference_ms_.store(static_cast<uint64_t>(absl::ToUnixMillis(end)));
  {
    absl::MutexLock lock(&batch_stats_mu_);
    auto it = batch_stats_.find(rows);
    if (it == batch_stats_.end() && batch_stats_.size() < kMaxBatchSizeStats) {
      try {
        it = batch_stats_.emplace(rows, DurationStat{}).first;
      } catch (const std::bad_alloc&) {
        // The statistics lose a size; the batch, computed, is still answered.
      }
    }
    if (it != batch_stats_.end()) {
      it->second.count += 1;
      it->second.ns +=
          static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Nanoseconds(end - start)));
    }
  }
  if (metrics_) {
    metrics_->RecordBatch(requests, rows, end - start);
    metrics_->RecordWeightBytes(weight_bytes);
  }
  RecordQueueDepth();
}

void ServedModel::RecordAnswer(absl::Time arrival, absl::Time start, absl::Time end, bool ok,
                               int64_t rows, DataType type, int64_t flops, int64_t input_bytes,
                               int64_t output_bytes) {
  queue_.Add(start - arrival);
  compute_infer_.Add(end - start);
  if (metrics_) metrics_->RecordQueue(start - arrival);
  if (!ok) {
    fail_.Add(end - arrival);
    return;
  }
  SaturatingIncrement(inference_count_, static_cast<uint64_t>(rows));
  success_.Add(end - arrival);
  if (metrics_) {
    metrics_->RecordFlops(type, flops);
    metrics_->RecordBytes(input_bytes, output_bytes);
  }
}

ModelStatistics ServedModel::statistics() const {
  ModelStatistics s;
  s.name = model_->metadata().name;
  s.version = model_->metadata().versions.front();
  s.last_inference_ms = last_inference_ms_.load();
  s.inference_count = inference_count_.load();
  s.execution_count = execution_count_.load();
  s.success = success_.Get();
  s.fail = fail_.Get();
  s.queue = queue_.Get();
  s.compute_infer = compute_infer_.Get();
  absl::MutexLock lock(&batch_stats_mu_);
  s.batch_stats.reserve(batch_stats_.size());
  for (const auto& [size, stat] : batch_stats_) {
    s.batch_stats.push_back({static_cast<uint64_t>(size), stat});
  }
  return s;
}

}  // namespace gemmserve
