// WorkerPool: the threads that compute, so that gRPC threads do not (but for
// the tiniest requests, which the engine computes inline, where a hand-off
// would cost more).
//
// The pool owns a budget of `compute_threads` cores. A task starts only when
// at least one core is free and is handed a share of the free cores (the
// rest are left for the tasks queued behind it); it gives that count to its
// compute (the GEMM scheduler's OpenMP regions, whose threads each run BLIS
// on one thread) and returns the cores when it ends. So the compute threads
// of all running tasks together never exceed the budget.
//
// Schedule never blocks. Tasks run in FIFO order. The destructor runs every
// task already scheduled, then joins.
//
//   WorkerPool pool(/*compute_threads=*/2);
//   pool.Schedule([](int threads) { RunGemm(..., threads); });
#ifndef GEMMSERVE_SERVER_CORE_WORKER_POOL_H_
#define GEMMSERVE_SERVER_CORE_WORKER_POOL_H_

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace gemmserve {

class WorkerPool {
 public:
  using Task = absl::AnyInvocable<void(int threads) &&>;

  explicit WorkerPool(int compute_threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Schedule(Task task);
  int compute_threads() const { return budget_; }

 private:
  void WorkerLoop();

  const int budget_;
  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  int cores_in_use_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_WORKER_POOL_H_
