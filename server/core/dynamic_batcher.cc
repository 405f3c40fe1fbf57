#include "server/core/dynamic_batcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/core/overload.h"

namespace gemmserve {
namespace {

std::vector<int64_t> Ascending(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

DynamicBatcher::DynamicBatcher(BatchingOptions options, Clock* clock, Executor executor,
                               absl::AnyInvocable<void()> wake_timer)
    : options_(std::move(options)),
      preferred_rows_(Ascending(options_.preferred_batch_rows)),
      clock_(clock),
      executor_(std::move(executor)),
      wake_timer_(std::move(wake_timer)) {
  std::lock_guard<std::mutex> lock(mu_);
  levels_.resize(std::clamp(options_.priority_levels, 1, kMaxPriorityLevels));
}

absl::Status DynamicBatcher::Enqueue(std::unique_ptr<BatchTask>& task, uint64_t priority,
                                     absl::Time deadline, absl::Duration timeout) {
  int level = 0;
  if (options_.priority_levels > 0) {
    if (priority > static_cast<uint64_t>(options_.priority_levels)) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter 'priority': expected 0 (the default) or 1 to ",
                       options_.priority_levels, ", got ", priority));
    }
    const int chosen = priority == 0 ? options_.default_priority_level : static_cast<int>(priority);
    level = (chosen <= 0 ? options_.priority_levels : chosen) - 1;
  }
  const absl::Time now = clock_->Now();
  if (timeout <= absl::ZeroDuration()) timeout = options_.default_timeout;
  if (timeout != absl::InfiniteDuration()) deadline = std::min(deadline, now + timeout);
  const int64_t rows = task->rows();

  std::vector<Batch> batches;
  std::vector<Rejection> rejected;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return ModelClosedError();
    if (options_.max_queue_size > 0 && queued_ >= options_.max_queue_size) {
      return QueueFullError(
          absl::StrCat("queue full (", queued_, " requests waiting); retry later"));
    }
    // Allocation first (either may throw), the task moved last: on a throw
    // the queue is as it was and the task still the caller's.
    std::multiset<absl::Time>::iterator tracked = deadlines_.end();
    if (deadline != absl::InfiniteFuture()) tracked = deadlines_.insert(deadline);
    try {
      levels_[level].push_back(Entry{nullptr, rows, now, deadline});
    } catch (...) {
      if (tracked != deadlines_.end()) deadlines_.erase(tracked);
      throw;
    }
    levels_[level].back().task = std::move(task);
    ++queued_;
    ++arrived_since_idle_;
    queued_rows_ += rows;
    CollectDue(now, &batches, &rejected);
    const absl::Time next = NextDue();
    if (next < promised_poll_) {
      promised_poll_ = next;
      wake = true;
    }
  }
  Dispatch(std::move(batches), std::move(rejected));
  if (wake && wake_timer_) wake_timer_();
  return absl::OkStatus();
}

void DynamicBatcher::BatchDone(absl::Time answers_began) {
  std::vector<Batch> batches;
  std::vector<Rejection> rejected;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const absl::Time now = clock_->Now();
    if (--in_flight_ == 0) {
      idle_since_ = now;
      arrived_since_idle_ = 0;
      // The batch's clients come back from its first answer on: those
      // already queued count as back (each level is in arrival order).
      if (answers_began != absl::InfiniteFuture()) {
        const absl::Time since = std::min(answers_began, now);
        for (const std::deque<Entry>& level : levels_) {
          for (auto it = level.rbegin(); it != level.rend() && it->enqueued >= since; ++it) {
            ++arrived_since_idle_;
          }
        }
      }
    }
    CollectDue(now, &batches, &rejected);
    const absl::Time next = NextDue();
    if (next < promised_poll_) {
      promised_poll_ = next;
      wake = true;
    }
  }
  Dispatch(std::move(batches), std::move(rejected));
  if (wake && wake_timer_) wake_timer_();
}

bool DynamicBatcher::TryBeginInline() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || queued_ > 0 || in_flight_ > 0) return false;
  ++in_flight_;
  last_batch_requests_ = 1;
  return true;
}

absl::Time DynamicBatcher::Poll() {
  std::vector<Batch> batches;
  std::vector<Rejection> rejected;
  absl::Time next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    CollectDue(clock_->Now(), &batches, &rejected);
    next = NextDue();
    promised_poll_ = next;
  }
  Dispatch(std::move(batches), std::move(rejected));
  return next;
}

void DynamicBatcher::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
}

int64_t DynamicBatcher::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_;
}

int64_t DynamicBatcher::in_flight_batches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

absl::Status DynamicBatcher::DropReason(const Entry& e, absl::Time now) {
  if (now >= e.deadline) {
    return absl::DeadlineExceededError("deadline passed while queued; not computed");
  }
  if (e.task->IsCancelled()) return absl::CancelledError("request cancelled while queued");
  return absl::OkStatus();
}

std::deque<DynamicBatcher::Entry>::iterator DynamicBatcher::Remove(
    std::deque<Entry>& level, std::deque<Entry>::iterator it, absl::Status status,
    std::vector<Rejection>* rejected) {
  if (!status.ok()) {
    rejected->emplace_back();
    rejected->back() = Rejection{std::move(it->task), std::move(status)};
  }
  --queued_;
  queued_rows_ -= it->rows;
  if (it->deadline != absl::InfiniteFuture()) deadlines_.erase(deadlines_.find(it->deadline));
  return level.erase(it);
}

bool DynamicBatcher::BatchDue(absl::Time now) const {
  if (options_.max_batch_rows > 0 && queued_rows_ >= options_.max_batch_rows) return true;
  // A batch of a size the kernel runs best at is ready: waiting for more
  // would only delay it (Triton's preferred_batch_size).
  if (PreferredCut() > 0) return true;
  // Closed (unloading or shutting down): nothing more will join.
  if (closed_) return true;
  if (in_flight_ == 0) {
    // The cores are free. Waiting helps only while the requests of the
    // batch that just ended may still come back (closed-loop clients
    // resubmit when answered): cut once they all have, or once the cores
    // have been free for max_queue_delay. Without this wait, clients split
    // into two cohorts that alternate, each batch half the size it could be.
    return arrived_since_idle_ >= last_batch_requests_ ||
           now >= idle_since_ + options_.max_queue_delay;
  }
  absl::Time oldest = absl::InfiniteFuture();
  for (const std::deque<Entry>& level : levels_) {
    if (!level.empty()) oldest = std::min(oldest, level.front().enqueued);
  }
  return now >= oldest + options_.max_queue_delay;
}

int64_t DynamicBatcher::PreferredCut() const {
  if (preferred_rows_.empty()) return 0;
  // Triton's rule: the requests in take order, their rows added up; the
  // largest total that lands on a preferred size, before the total passes
  // the largest preferred size or max_batch_rows. The scan is bounded, so a
  // long queue costs no more than a batch.
  const int64_t largest = preferred_rows_.back();
  int64_t total = 0, best = 0, scanned = 0;
  for (const std::deque<Entry>& level : levels_) {
    for (const Entry& e : level) {
      total += e.rows;
      if (total > largest || (options_.max_batch_rows > 0 && total > options_.max_batch_rows) ||
          ++scanned > kMaxPreferredScan) {
        return best;
      }
      if (std::binary_search(preferred_rows_.begin(), preferred_rows_.end(), total)) best = total;
    }
  }
  return best;
}

DynamicBatcher::Batch DynamicBatcher::TakeBatch(absl::Time now,
                                                std::vector<Rejection>* rejected) {
  // Fixed before any request is taken: queued_rows_ falls as they are.
  const int64_t preferred = PreferredCut();
  int64_t limit = options_.max_batch_rows;  // 0: none
  if (preferred > 0 && (limit == 0 || preferred < limit)) limit = preferred;
  Batch batch;
  int64_t rows = 0;
  for (std::deque<Entry>& level : levels_) {
    while (!level.empty()) {
      auto front = level.begin();
      if (absl::Status status = DropReason(*front, now); !status.ok()) {
        Remove(level, front, std::move(status), rejected);
        continue;
      }
      if (!batch.empty() && limit > 0 && rows + front->rows > limit) break;
      rows += front->rows;
      batch.push_back(std::move(front->task));
      Remove(level, front, absl::OkStatus(), rejected);
    }
    // Strict priority: a lower level only fills what the higher left.
    if (!level.empty()) break;
  }
  return batch;
}

void DynamicBatcher::CollectDue(absl::Time now, std::vector<Batch>* batches,
                                std::vector<Rejection>* rejected) {
  // Requests that can no longer be answered usefully leave without compute.
  // The full scan runs only when a deadline is due (the timer polls then);
  // cancellations are also caught as requests are taken into a batch.
  if (!deadlines_.empty() && *deadlines_.begin() <= now) {
    for (std::deque<Entry>& level : levels_) {
      for (auto it = level.begin(); it != level.end();) {
        absl::Status status = DropReason(*it, now);
        it = status.ok() ? std::next(it) : Remove(level, it, std::move(status), rejected);
      }
    }
  }
  while (queued_ > 0) {
    if (in_flight_ >= std::max(options_.max_concurrent_batches, 1) && !closed_) return;
    if (!BatchDue(now)) return;
    Batch batch = TakeBatch(now, rejected);
    if (batch.empty()) continue;  // everything left had gone
    // On a throw the batch (its tasks out of the queue) is destroyed
    // unanswered-but-answering, and no batch slot is taken for it.
    const int64_t size = static_cast<int64_t>(batch.size());
    batches->push_back(std::move(batch));
    ++in_flight_;
    last_batch_requests_ = size;
  }
}

absl::Time DynamicBatcher::NextDue() const {
  absl::Time next = deadlines_.empty() ? absl::InfiniteFuture() : *deadlines_.begin();
  // The queue delay can cut a batch only while another may start.
  if (queued_ == 0 || in_flight_ >= std::max(options_.max_concurrent_batches, 1)) return next;
  if (in_flight_ == 0) return std::min(next, idle_since_ + options_.max_queue_delay);
  for (const std::deque<Entry>& level : levels_) {
    if (!level.empty()) next = std::min(next, level.front().enqueued + options_.max_queue_delay);
  }
  return next;
}

void DynamicBatcher::Dispatch(std::vector<Batch> batches, std::vector<Rejection> rejected) {
  for (Rejection& r : rejected) r.task->Reject(std::move(r.status));
  for (Batch& b : batches) executor_(std::move(b));
}

BatcherTimer::BatcherTimer() : thread_([this] { Loop(); }) {}

BatcherTimer::~BatcherTimer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void BatcherTimer::Register(std::weak_ptr<DynamicBatcher> batcher) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    batchers_.push_back(std::move(batcher));
    woken_ = true;
  }
  cv_.notify_one();
}

void BatcherTimer::Wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
}

void BatcherTimer::Loop() {
  while (true) {
    std::vector<std::weak_ptr<DynamicBatcher>> batchers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      woken_ = false;
      batchers_.erase(std::remove_if(batchers_.begin(), batchers_.end(),
                                     [](const auto& w) { return w.expired(); }),
                      batchers_.end());
      batchers = batchers_;
    }
    absl::Time next = absl::InfiniteFuture();
    for (const auto& weak : batchers) {
      if (std::shared_ptr<DynamicBatcher> b = weak.lock()) next = std::min(next, b->Poll());
    }
    std::unique_lock<std::mutex> lock(mu_);
    auto woken = [this] { return woken_ || stopping_; };
    if (next == absl::InfiniteFuture()) {
      cv_.wait(lock, woken);
    } else {
      cv_.wait_until(lock, absl::ToChronoTime(next), woken);
    }
  }
}

}  // namespace gemmserve
