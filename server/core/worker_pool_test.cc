#include "server/core/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace gemmserve {
namespace {

// Records how many cores the running tasks hold together, and lets the test
// wait (without sleeping) until a given number of tasks are running.
class CoreLedger {
 public:
  explicit CoreLedger(int budget) : budget_(budget) {}

  void Enter(int threads) {
    absl::MutexLock lock(&mu_);
    held_ += threads;
    ++running_;
    ++started_;
    max_held_ = std::max(max_held_, held_);
    if (threads < 1 || threads > budget_) bad_thread_count_ = true;
  }
  void Leave(int threads) {
    absl::MutexLock lock(&mu_);
    held_ -= threads;
    --running_;
  }
  void AwaitRunning(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ >= n; };
    mu_.Await(absl::Condition(&enough));
  }
  void AwaitHeld(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return held_ >= n; };
    mu_.Await(absl::Condition(&enough));
  }
  int max_held() {
    absl::MutexLock lock(&mu_);
    return max_held_;
  }
  int started() {
    absl::MutexLock lock(&mu_);
    return started_;
  }
  int held() {
    absl::MutexLock lock(&mu_);
    return held_;
  }
  bool bad_thread_count() {
    absl::MutexLock lock(&mu_);
    return bad_thread_count_;
  }

 private:
  const int budget_;
  absl::Mutex mu_;
  int held_ ABSL_GUARDED_BY(mu_) = 0;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  int max_held_ ABSL_GUARDED_BY(mu_) = 0;
  bool bad_thread_count_ ABSL_GUARDED_BY(mu_) = false;
};

TEST(WorkerPoolTest, RunsEveryTaskBeforeDestructionCompletes) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(2);
    for (int i = 0; i < 1000; ++i) pool.Schedule([&ran](int) { ran.fetch_add(1); });
  }  // the destructor drains the queue
  EXPECT_EQ(ran.load(), 1000);
}

TEST(WorkerPoolTest, DestructorDrainsTasksQueuedBehindABlockedOne) {
  std::atomic<int> ran{0};
  absl::Notification started, release;
  auto pool = std::make_unique<WorkerPool>(1);
  pool->Schedule([&](int) {
    started.Notify();
    release.WaitForNotification();
    ran.fetch_add(1);
  });
  started.WaitForNotification();
  for (int i = 0; i < 50; ++i) pool->Schedule([&ran](int) { ran.fetch_add(1); });
  release.Notify();
  pool.reset();
  EXPECT_EQ(ran.load(), 51);
}

TEST(WorkerPoolTest, TasksScheduledByRunningTasksAlsoRun) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(2);
    for (int i = 0; i < 20; ++i) {
      pool.Schedule([&pool, &ran](int) {
        ran.fetch_add(1);
        pool.Schedule([&ran](int) { ran.fetch_add(1); });
      });
    }
  }
  EXPECT_EQ(ran.load(), 40);
}

TEST(WorkerPoolTest, RunsTasksInFifoOrder) {
  std::vector<int> order;
  absl::Mutex mu;
  {
    WorkerPool pool(1);
    for (int i = 0; i < 200; ++i) {
      pool.Schedule([i, &order, &mu](int) {
        absl::MutexLock lock(&mu);
        order.push_back(i);
      });
    }
  }
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[i], i);
}

TEST(WorkerPoolTest, ALoneTaskGetsTheWholeBudget) {
  WorkerPool pool(4);
  EXPECT_EQ(pool.compute_threads(), 4);
  std::atomic<int> threads{0};
  absl::Notification done;
  pool.Schedule([&](int t) {
    threads = t;
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(threads.load(), 4);
}

TEST(WorkerPoolTest, BudgetBelowOneMeansOne) {
  for (int budget : {0, -3}) {
    WorkerPool pool(budget);
    EXPECT_EQ(pool.compute_threads(), 1);
    std::atomic<int> threads{0};
    absl::Notification done;
    pool.Schedule([&](int t) {
      threads = t;
      done.Notify();
    });
    done.WaitForNotification();
    EXPECT_EQ(threads.load(), 1);
  }
}

TEST(WorkerPoolTest, NeverHandsOutMoreCoresThanTheBudget) {
  for (int budget : {1, 2, 3, 5}) {
    CoreLedger ledger(budget);
    absl::Notification release;
    constexpr int kTasks = 40;
    {
      WorkerPool pool(budget);
      for (int i = 0; i < kTasks; ++i) {
        pool.Schedule([&ledger, &release](int threads) {
          ledger.Enter(threads);
          release.WaitForNotification();
          ledger.Leave(threads);
        });
      }
      // Tasks block until released, so the pool fills its budget and stops
      // there: wait until every core is held, then let everything go.
      ledger.AwaitHeld(budget);
      EXPECT_EQ(ledger.held(), budget) << "budget " << budget;
      release.Notify();
    }
    EXPECT_EQ(ledger.started(), kTasks);
    EXPECT_LE(ledger.max_held(), budget) << "budget " << budget;
    EXPECT_EQ(ledger.max_held(), budget) << "budget " << budget;
    EXPECT_FALSE(ledger.bad_thread_count()) << "budget " << budget;
    EXPECT_EQ(ledger.held(), 0);
  }
}

TEST(WorkerPoolTest, NeverExceedsTheBudgetUnderChurn) {
  // Short tasks that finish on their own, scheduled from several threads:
  // whatever the interleaving, the cores held together stay within budget.
  constexpr int kBudget = 3;
  CoreLedger ledger(kBudget);
  {
    WorkerPool pool(kBudget);
    std::vector<std::thread> producers;
    for (int p = 0; p < 3; ++p) {
      producers.emplace_back([&pool, &ledger] {
        for (int i = 0; i < 300; ++i) {
          pool.Schedule([&ledger](int threads) {
            ledger.Enter(threads);
            volatile int sink = 0;
            for (int j = 0; j < 1000; ++j) sink += j;
            (void)sink;
            ledger.Leave(threads);
          });
        }
      });
    }
    for (std::thread& t : producers) t.join();
  }
  EXPECT_EQ(ledger.started(), 900);
  EXPECT_LE(ledger.max_held(), kBudget);
  EXPECT_FALSE(ledger.bad_thread_count());
}

TEST(WorkerPoolTest, QueuedTasksAreNotStarvedOfCoresByTheFirst) {
  // A blocker holds all 4 cores; three tasks queue behind it. When it ends,
  // the first of them must leave cores for the other two: all three run at
  // once, sharing the budget.
  constexpr int kBudget = 4;
  CoreLedger ledger(kBudget);
  absl::Notification blocker_started, release_blocker, release_rest;
  std::atomic<int> blocker_threads{0};
  std::vector<std::atomic<int>> threads(3);
  {
    WorkerPool pool(kBudget);
    pool.Schedule([&](int t) {
      blocker_threads = t;
      blocker_started.Notify();
      release_blocker.WaitForNotification();
    });
    blocker_started.WaitForNotification();
    ASSERT_EQ(blocker_threads.load(), kBudget);
    for (int i = 0; i < 3; ++i) {
      pool.Schedule([&, i](int t) {
        threads[i] = t;
        ledger.Enter(t);
        release_rest.WaitForNotification();
        ledger.Leave(t);
      });
    }
    release_blocker.Notify();
    ledger.AwaitRunning(3);  // would hang if the first took every core
    EXPECT_LE(ledger.held(), kBudget);
    // FIFO: the first queued gets the largest share.
    EXPECT_GE(threads[0].load(), threads[1].load());
    EXPECT_GE(threads[0].load(), threads[2].load());
    release_rest.Notify();
  }
  EXPECT_LE(ledger.max_held(), kBudget);
}

}  // namespace
}  // namespace gemmserve
