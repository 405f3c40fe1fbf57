// A served model's statistics as Triton reports them (ModelStatistics:
// counts and total nanoseconds per stage, batch sizes) and where a model name
// stands (ModelStatus). Plain values: the front ends encode them without the
// engine.
//
//   ModelStatistics s = served.statistics();
//   std::cout << s.inference_count << " rows in " << s.execution_count << " calls\n";
#ifndef GEMMSERVE_SERVER_CORE_MODEL_STATISTICS_H_
#define GEMMSERVE_SERVER_CORE_MODEL_STATISTICS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gemmserve {

// Triton's per-model statistics: counts and total nanoseconds.
struct DurationStat {
  uint64_t count = 0;
  uint64_t ns = 0;
};
// Kernel calls of one batch size (rows computed together), as Triton's
// batch_stats: how many, and their compute time.
struct BatchSizeStat {
  uint64_t batch_size = 0;
  DurationStat compute_infer;
};
// Distinct batch sizes a model keeps statistics for: a model without a row
// limit sees as many sizes as its clients choose; beyond this many, new
// sizes are left out of batch_stats (execution_count still counts them).
inline constexpr size_t kMaxBatchSizeStats = 1024;

struct ModelStatistics {
  std::string name, version;
  uint64_t last_inference_ms = 0;  // Unix epoch milliseconds
  uint64_t inference_count = 0;    // rows computed
  uint64_t execution_count = 0;    // kernel calls (batches)
  DurationStat success, fail, queue, compute_infer;
  std::vector<BatchSizeStat> batch_stats;  // by batch size, ascending
};

// Where a model name stands. Triton's repository index shows kFailed and
// kUnloaded as UNAVAILABLE with their reason.
enum class ModelState { kReady, kLoading, kFailed, kUnloaded };

struct ModelStatus {
  std::string name, version;
  ModelState state = ModelState::kReady;
  std::string reason;  // why kFailed (the load's error) or kUnloaded
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_MODEL_STATISTICS_H_
