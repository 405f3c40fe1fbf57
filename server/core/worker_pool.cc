#include "server/core/worker_pool.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "server/common/logging.h"

namespace gemmserve {

WorkerPool::WorkerPool(int compute_threads) : budget_(std::max(compute_threads, 1)) {
  workers_.reserve(budget_);
  for (int i = 0; i < budget_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

void WorkerPool::Schedule(Task task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
}

void WorkerPool::WorkerLoop() {
  for (;;) {
    Task task;
    int cores = 0;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return (!queue_.empty() && cores_in_use_ < budget_) || (stopping_ && queue_.empty());
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      // Leave one free core for each task still waiting, if there are enough.
      const int free_cores = budget_ - cores_in_use_;
      const int waiting = static_cast<int>(queue_.size());
      cores = std::max(1, free_cores - std::min(waiting, free_cores - 1));
      cores_in_use_ += cores;
    }
    // A task answers its own requests, whatever happens inside it; what
    // escapes here was not an answer's business, and must not end the thread.
    try {
      std::move(task)(cores);
    } catch (const std::exception& e) {
      GEMMSERVE_LOG(ERROR) << "a compute task failed: " << e.what();
    }
    absl::MutexLock lock(&mu_);
    cores_in_use_ -= cores;
  }
}

}  // namespace gemmserve
