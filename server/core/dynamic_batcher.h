// DynamicBatcher: the queue in front of one model that merges concurrent
// requests into one kernel call, so each expert's weights are read once for
// the tokens of many requests.
//
// Contract:
//   - Enqueue never blocks and never computes. It takes ownership of the task
//     and returns OK, or returns UNAVAILABLE at once when the queue holds
//     `max_queue_size` requests (or the batcher is closed), in which case the
//     task is left with the caller, unanswered: the caller answers with the
//     returned status.
//   - Memory running out inside the batcher (a queue node, a batch's list)
//     leaves its state consistent: the exception propagates, and a task it
//     was moving is destroyed with the container that held it (a task must
//     answer itself when destroyed unanswered).
//   - Every task accepted is answered exactly once: either it is handed to
//     the executor inside a batch, or it is rejected without compute
//     (DEADLINE_EXCEEDED when its deadline or queue timeout passes while
//     queued, CANCELLED when its client has gone).
//   - At most `max_concurrent_batches` batches of the model run at once
//     (default 1: one batch gets all the compute threads, and everything that
//     arrives while it runs leaves together as the next batch, which is what
//     makes each expert's weights be read once for many requests).
//   - When no batch runs, a batch is cut as soon as waiting would not help:
//     when as many requests have arrived since the last batch began to answer
//     as it held (its clients are back: the executor says when its answers
//     began, since clients answered early in a batch come back before it
//     ends), when the cores have been idle for `max_queue_delay`, or when the
//     rows reach `max_batch_rows`. A lone client is served at once;
//     closed-loop clients are not split into two alternating half-size
//     batches.
//   - While fewer than max_concurrent_batches run but at least one does, a
//     batch is cut when its rows reach `max_batch_rows` or when the oldest
//     request has waited `max_queue_delay`.
//   - Whenever the queued requests, taken in batch order, add up to exactly
//     one of `preferred_batch_rows` (Triton's preferred_batch_size) before
//     they pass the largest of them or max_batch_rows, a batch of the largest
//     such total is cut at once, whatever the two rules above say, provided
//     fewer than max_concurrent_batches run. Otherwise those rules cut it
//     (so 3 + 3 rows with preferred size 4 wait and leave together). A
//     cancelled request counts until a batch reaches it.
//   - So a request waits for at most the batch running when it arrived, then
//     max_queue_delay, then its own batch.
//   - Batches take requests by priority level (1 is the highest), first in
//     first out within a level, up to a limit: the preferred total above (if
//     any), never more than `max_batch_rows` (if set). A batch stops before
//     the request that would pass the limit; a single request larger than it
//     runs alone.
//   - The executor is called outside the batcher's lock with the tasks of one
//     batch; it must run them (typically on the worker pool, never inline on
//     the caller's thread if that is a gRPC thread) and then call BatchDone().
//   - Time comes from the injected Clock. Nothing here sleeps: Poll() cuts
//     whatever is due now and says when it next needs to be called; in the
//     server a BatcherTimer thread calls it, in tests the test does.
//
//   DynamicBatcher batcher(options, RealClock::Get(),
//       [&](std::vector<std::unique_ptr<BatchTask>> batch) {
//         pool.Schedule([&, b = std::move(batch)](int threads) mutable {
//           const absl::Time answered = RunTogether(std::move(b), threads);
//           batcher.BatchDone(answered);
//         });
//       });
//   absl::Status s = batcher.Enqueue(std::move(task), /*priority=*/0, deadline);
#ifndef GEMMSERVE_SERVER_CORE_DYNAMIC_BATCHER_H_
#define GEMMSERVE_SERVER_CORE_DYNAMIC_BATCHER_H_

#include <cstdint>
#include <deque>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/core/clock.h"

namespace gemmserve {

// The most priority levels a batcher has (a queue each); config.pbtxt refuses
// more (docs/models.md: config.pbtxt limits).
inline constexpr int kMaxPriorityLevels = 256;

struct BatchingOptions {
  absl::Duration max_queue_delay = absl::Microseconds(100);
  int64_t max_batch_rows = 0;  // 0: no limit
  // Rows (BatchTask::rows()) at which a batch is cut at once, and which it is
  // cut to: sizes the kernel runs best at (Triton's preferred_batch_size).
  // Each > 0, in any order; a batch still never passes max_batch_rows.
  // Empty: batches are cut by the delay, idle and max_batch_rows rules alone.
  std::vector<int64_t> preferred_batch_rows;
  int max_concurrent_batches = 1;
  int64_t max_queue_size = 0;  // requests; 0: no limit
  absl::Duration default_timeout = absl::InfiniteDuration();
  int priority_levels = 0;         // 0: one level, priorities ignored
  int default_priority_level = 0;  // 0: the lowest level
};

// One queued request as the batcher sees it.
class BatchTask {
 public:
  virtual ~BatchTask() = default;
  // Rows the request adds to a batch (tokens of a GroupedMatMul, rows of A).
  virtual int64_t rows() const = 0;
  // True once the client has gone; polled while queued.
  virtual bool IsCancelled() const = 0;
  // Answers the request without computing it. Called at most once, outside
  // the batcher's lock.
  virtual void Reject(absl::Status status) = 0;
};

class DynamicBatcher {
 public:
  using Batch = std::vector<std::unique_ptr<BatchTask>>;
  using Executor = absl::AnyInvocable<void(Batch)>;

  // `clock` must outlive the batcher. `wake_timer` (may be empty) is called,
  // outside the lock, when the next time Poll() is due moves earlier.
  // `options` must be in range (priority_levels <= kMaxPriorityLevels, each
  // preferred_batch_rows > 0).
  DynamicBatcher(BatchingOptions options, Clock* clock, Executor executor,
                 absl::AnyInvocable<void()> wake_timer = nullptr);
  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  // `priority` as the request sent it: 0 for the default level, else 1 (the
  // highest) to priority_levels; INVALID_ARGUMENT outside that range.
  // `deadline` is the client's (absl::InfiniteFuture() for none); the
  // request's queue timeout (`timeout`, or the model's default) is applied
  // here. UNAVAILABLE when full (QueueFullError) or closed (ModelClosedError).
  // On OK `task` has been taken (it is null); on an error it is untouched.
  absl::Status Enqueue(std::unique_ptr<BatchTask>& task, uint64_t priority, absl::Time deadline,
                       absl::Duration timeout = absl::ZeroDuration());

  // The executor's batch has finished. `answers_began`: when it started to
  // answer its requests (their clients may resubmit from then on, before the
  // batch ends); InfiniteFuture() counts only the requests arriving after now.
  void BatchDone(absl::Time answers_began = absl::InfiniteFuture());

  // For a request so small that handing it to a worker costs more than
  // computing it: true (and counted as a running batch, so later requests
  // queue behind it) when nothing is queued or running; the caller then
  // computes it itself and calls BatchDone().
  bool TryBeginInline();

  // Cuts the batches and rejects the requests that are due now; returns when
  // it should next be called (absl::InfiniteFuture() when nothing waits).
  absl::Time Poll();

  // Stops accepting: later Enqueue calls get UNAVAILABLE. What is queued still
  // runs.
  void Close();

  int64_t queued() const;
  int64_t in_flight_batches() const;
  const BatchingOptions& options() const { return options_; }

 private:
  struct Entry {
    std::unique_ptr<BatchTask> task;
    int64_t rows;
    absl::Time enqueued;
    absl::Time deadline;
  };
  struct Rejection {
    std::unique_ptr<BatchTask> task;
    absl::Status status;
  };

  // Removes expired and cancelled entries and cuts what is due.
  void CollectDue(absl::Time now, std::vector<Batch>* batches, std::vector<Rejection>* rejected)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CollectDue's steps. Why a queued request can no longer be answered
  // usefully (deadline passed, cancelled), or OK.
  static absl::Status DropReason(const Entry& e, absl::Time now);
  // Takes an entry out of the queue, into `rejected` with `status` unless it
  // is OK. The only allocation (the rejection's slot) comes first, so a throw
  // leaves the entry queued and counted.
  std::deque<Entry>::iterator Remove(std::deque<Entry>& level, std::deque<Entry>::iterator it,
                                     absl::Status status, std::vector<Rejection>* rejected)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a batch should be cut now: the rows are full or reach a preferred
  // size, or the wait is over.
  bool BatchDue(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The largest preferred size that the queued requests' rows, added up in
  // batch order, land on exactly (looking at most kMaxPreferredScan
  // requests); 0 when none is.
  int64_t PreferredCut() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr int64_t kMaxPreferredScan = 4096;
  // The next batch in priority order, up to PreferredCut() (when one is) and
  // max_batch_rows (when set); empty when everything left had gone.
  Batch TakeBatch(absl::Time now, std::vector<Rejection>* rejected)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time NextDue() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs the executor and the rejections gathered under the lock.
  void Dispatch(std::vector<Batch> batches, std::vector<Rejection> rejected);

  const BatchingOptions options_;
  // options_.preferred_batch_rows ascending, for a binary search per cut.
  const std::vector<int64_t> preferred_rows_;
  Clock* const clock_;
  Executor executor_;
  absl::AnyInvocable<void()> wake_timer_;

  // std::mutex rather than absl::Mutex: ThreadSanitizer sees pthread locks,
  // and Debian's Abseil is not built with TSan, so the batcher's TSan test
  // (tests/run.sh) would otherwise report its own locking as races.
  mutable std::mutex mu_;
  std::vector<std::deque<Entry>> levels_ ABSL_GUARDED_BY(mu_);  // [0] highest
  std::multiset<absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);    // finite ones, of queued entries
  int64_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t queued_rows_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time promised_poll_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // Since when no batch runs, how many requests came since the last batch
  // began to answer, and how many it held: while fewer have come back than
  // it held, an idle batcher waits (up to max_queue_delay) for them.
  absl::Time idle_since_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t arrived_since_idle_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_batch_requests_ ABSL_GUARDED_BY(mu_) = 0;
};

// The thread that calls Poll() on every registered batcher when it is due.
// Batchers are held weakly: one that is destroyed simply drops out.
class BatcherTimer {
 public:
  BatcherTimer();
  ~BatcherTimer();
  void Register(std::weak_ptr<DynamicBatcher> batcher);
  // Makes the thread recompute its next wake-up now.
  void Wake();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::weak_ptr<DynamicBatcher>> batchers_ ABSL_GUARDED_BY(mu_);
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_DYNAMIC_BATCHER_H_
