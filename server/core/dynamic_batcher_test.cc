// Deterministic tests of the dynamic batcher: a fake clock, an executor that
// only records the batches it is handed (the "kernel" never runs until the
// test says so), no sleeps.
#include "server/core/dynamic_batcher.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/overload.h"

namespace gemmserve {
namespace {

using ::testing::ElementsAre;

struct Outcome {
  std::vector<std::string> rejected;  // "name:CODE"
};

class FakeTask final : public BatchTask {
 public:
  FakeTask(std::string name, int64_t rows, Outcome* outcome, bool* cancelled = nullptr)
      : name_(std::move(name)), rows_(rows), outcome_(outcome), cancelled_(cancelled) {}
  int64_t rows() const override { return rows_; }
  bool IsCancelled() const override { return cancelled_ && *cancelled_; }
  void Reject(absl::Status status) override {
    outcome_->rejected.push_back(name_ + ":" +
                                 std::string(absl::StatusCodeToString(status.code())));
  }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  int64_t rows_;
  Outcome* outcome_;
  bool* cancelled_;
};

// Records batches as lists of task names; the test finishes them.
class BatcherTest : public ::testing::Test {
 protected:
  void Make(BatchingOptions options) {
    batcher_ = std::make_unique<DynamicBatcher>(
        options, &clock_,
        [this](DynamicBatcher::Batch batch) {
          std::vector<std::string> names;
          for (auto& t : batch) names.push_back(static_cast<FakeTask*>(t.get())->name());
          batches_.push_back(names);
        },
        [this] { ++wakes_; });
  }
  // The running batch ends and nobody comes back: after the queue delay the
  // idle batcher cuts what waits.
  void FinishAndWait() {
    batcher_->BatchDone();
    clock_.Advance(batcher_->options().max_queue_delay);
    batcher_->Poll();
  }
  absl::Status Add(const std::string& name, int64_t rows, uint64_t priority = 0,
                   absl::Time deadline = absl::InfiniteFuture(),
                   absl::Duration timeout = absl::ZeroDuration(), bool* cancelled = nullptr) {
    std::unique_ptr<BatchTask> task = std::make_unique<FakeTask>(name, rows, &outcome_, cancelled);
    absl::Status status = batcher_->Enqueue(task, priority, deadline, timeout);
    // Taken on success, left with the caller on a refusal.
    EXPECT_EQ(status.ok(), task == nullptr) << status;
    return status;
  }

  FakeClock clock_;
  Outcome outcome_;
  std::vector<std::vector<std::string>> batches_;
  int wakes_ = 0;
  std::unique_ptr<DynamicBatcher> batcher_;
};

BatchingOptions Options(int64_t delay_us, int64_t max_rows, int64_t max_queue = 0,
                        int concurrent = 1) {
  BatchingOptions o;
  o.max_queue_delay = absl::Microseconds(delay_us);
  o.max_batch_rows = max_rows;
  o.max_queue_size = max_queue;
  o.max_concurrent_batches = concurrent;
  return o;
}

TEST_F(BatcherTest, IdleWorkersTakeTheFirstRequestAtOnce) {
  Make(Options(1000, 64));
  ASSERT_TRUE(Add("a", 1).ok());
  EXPECT_THAT(batches_, ElementsAre(ElementsAre("a")));
  EXPECT_EQ(batcher_->in_flight_batches(), 1);
}

TEST_F(BatcherTest, RequestsArrivingDuringABatchFormTheNextOne) {
  Make(Options(1000, 64));
  ASSERT_TRUE(Add("a", 1).ok());
  ASSERT_TRUE(Add("b", 2).ok());
  ASSERT_TRUE(Add("c", 3).ok());
  EXPECT_EQ(batches_.size(), 1u);  // b and c wait: a batch is running
  batcher_->BatchDone();
  // The cores are free, but a's client may come back: wait for it (at most
  // the queue delay) rather than split the clients into two cohorts.
  EXPECT_EQ(batches_.size(), 1u);
  EXPECT_EQ(batcher_->Poll(), clock_.Now() + absl::Microseconds(1000));
  ASSERT_TRUE(Add("a2", 1).ok());  // as many back as the last batch held: cut
  EXPECT_THAT(batches_, ElementsAre(ElementsAre("a"), ElementsAre("b", "c", "a2")));
}

TEST_F(BatcherTest, ClientsAnsweredBeforeTheBatchEndsCountAsBack) {
  // A batch answers its requests before it ends (BatchDone comes after the
  // last answer), and closed-loop clients resubmit at once: those already
  // queued when the batch ends are back, and nothing waits for them.
  Make(Options(1000, 64));
  ASSERT_TRUE(Add("a", 1).ok());
  ASSERT_TRUE(Add("b", 1).ok());
  ASSERT_TRUE(Add("c", 1).ok());
  batcher_->BatchDone();
  clock_.Advance(absl::Microseconds(1000));
  batcher_->Poll();  // no one came back within the delay: b and c go
  ASSERT_THAT(batches_, ElementsAre(ElementsAre("a"), ElementsAre("b", "c")));
  clock_.Advance(absl::Microseconds(300));
  ASSERT_TRUE(Add("d", 1).ok());  // another client, while b and c compute
  clock_.Advance(absl::Microseconds(300));
  const absl::Time answers_began = clock_.Now();
  ASSERT_TRUE(Add("b2", 1).ok());  // b and c answered, and back
  clock_.Advance(absl::Microseconds(10));
  ASSERT_TRUE(Add("c2", 1).ok());
  batcher_->BatchDone(answers_began);
  // Both of the last batch's clients are back: cut at once, with d.
  EXPECT_THAT(batches_.back(), ElementsAre("d", "b2", "c2"));

  // Without the time, only arrivals after the end count: wait for them.
  ASSERT_TRUE(Add("x", 1).ok());
  ASSERT_TRUE(Add("y", 1).ok());
  ASSERT_TRUE(Add("z", 1).ok());
  batcher_->BatchDone();
  EXPECT_EQ(batches_.size(), 3u);
  clock_.Advance(absl::Microseconds(1000));
  batcher_->Poll();
  EXPECT_THAT(batches_.back(), ElementsAre("x", "y", "z"));

  // Only arrivals from the first answer on count: d-like arrivals during the
  // compute are another cohort, and the batcher still waits for the rest.
  clock_.Advance(absl::Microseconds(100));
  ASSERT_TRUE(Add("other", 1).ok());  // during the compute
  clock_.Advance(absl::Microseconds(100));
  const absl::Time began = clock_.Now();
  ASSERT_TRUE(Add("x2", 1).ok());
  batcher_->BatchDone(began);
  EXPECT_EQ(batches_.size(), 4u);  // 1 of 3 back: wait
  ASSERT_TRUE(Add("y2", 1).ok());
  ASSERT_TRUE(Add("z2", 1).ok());  // all 3 back: cut
  EXPECT_THAT(batches_.back(), ElementsAre("other", "x2", "y2", "z2"));
}

TEST_F(BatcherTest, AnIdleBatcherWaitsNoLongerThanTheQueueDelay) {
  Make(Options(1000, 64));
  ASSERT_TRUE(Add("a", 1).ok());
  ASSERT_TRUE(Add("b", 1).ok());
  batcher_->BatchDone();
  clock_.Advance(absl::Microseconds(999));
  batcher_->Poll();
  EXPECT_EQ(batches_.size(), 1u);
  clock_.Advance(absl::Microseconds(1));
  batcher_->Poll();
  EXPECT_THAT(batches_, ElementsAre(ElementsAre("a"), ElementsAre("b")));
  // A lone client is never kept waiting: its next request goes at once.
  batcher_->BatchDone();
  ASSERT_TRUE(Add("b2", 1).ok());
  EXPECT_THAT(batches_.back(), ElementsAre("b2"));
}

TEST_F(BatcherTest, WhileTheOnlyBatchSlotIsTakenNeitherDelayNorRowsCut) {
  Make(Options(500, 4));
  ASSERT_TRUE(Add("a", 1).ok());
  ASSERT_TRUE(Add("b", 3).ok());
  ASSERT_TRUE(Add("c", 3).ok());  // 6 rows queued, over max_batch_rows
  // The timer need not wake for the delay: nothing can start before BatchDone.
  EXPECT_EQ(batcher_->Poll(), absl::InfiniteFuture());
  clock_.Advance(absl::Seconds(10));
  batcher_->Poll();
  EXPECT_EQ(batches_.size(), 1u);
  batcher_->BatchDone();  // 6 rows >= 4: cut b at once (c would pass the limit)
  EXPECT_THAT(batches_, ElementsAre(ElementsAre("a"), ElementsAre("b")));
  FinishAndWait();
  EXPECT_THAT(batches_.back(), ElementsAre("c"));
}

TEST_F(BatcherTest, ABatchIsCutWhenTheDelayPassesWhileAnotherRuns) {
  Make(Options(500, 64, 0, /*concurrent=*/2));
  ASSERT_TRUE(Add("a", 1).ok());
  clock_.Advance(absl::Microseconds(100));
  ASSERT_TRUE(Add("b", 1).ok());
  EXPECT_EQ(batcher_->Poll(), clock_.Now() + absl::Microseconds(500));
  clock_.Advance(absl::Microseconds(499));
  batcher_->Poll();
  EXPECT_EQ(batches_.size(), 1u);
  clock_.Advance(absl::Microseconds(1));
  EXPECT_EQ(batcher_->Poll(), absl::InfiniteFuture());
  EXPECT_THAT(batches_, ElementsAre(ElementsAre("a"), ElementsAre("b")));
  EXPECT_EQ(batcher_->in_flight_batches(), 2);
}

TEST_F(BatcherTest, ABatchIsCutWhenRowsReachTheLimit) {
  Make(Options(1000000, 8, 0, /*concurrent=*/2));
  ASSERT_TRUE(Add("a", 1).ok());  // runs at once
  ASSERT_TRUE(Add("b", 4).ok());
  ASSERT_TRUE(Add("c", 3).ok());
  EXPECT_EQ(batches_.size(), 1u);
  ASSERT_TRUE(Add("d", 1).ok());  // 8 rows queued: cut b, c, d
  EXPECT_THAT(batches_, ElementsAre(ElementsAre("a"), ElementsAre("b", "c", "d")));
}

TEST_F(BatcherTest, ABatchNeverExceedsMaxRowsButABigRequestRunsAlone) {
  Make(Options(1000, 4, 0, /*concurrent=*/3));
  ASSERT_TRUE(Add("a", 1).ok());
  ASSERT_TRUE(Add("big", 10).ok());  // over the limit by itself: cut alone
  ASSERT_TRUE(Add("b", 3).ok());
  ASSERT_TRUE(Add("c", 2).ok());  // b + c = 5 > 4
  EXPECT_THAT(batches_, ElementsAre(ElementsAre("a"), ElementsAre("big"), ElementsAre("b")));
  batcher_->BatchDone();
  batcher_->BatchDone();
  FinishAndWait();
  EXPECT_THAT(batches_.back(), ElementsAre("c"));
}

TEST_F(BatcherTest, AFullQueueRefusesAtOnceAndKeepsWhatItAccepted) {
  Make(Options(1000, 0, /*max_queue=*/2));
  ASSERT_TRUE(Add("a", 1).ok());  // running, not queued
  ASSERT_TRUE(Add("b", 1).ok());
  ASSERT_TRUE(Add("c", 1).ok());
  absl::Status full = Add("d", 1);
  EXPECT_EQ(full.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(full.message()), ::testing::HasSubstr("queue full"));
  EXPECT_TRUE(IsQueueFull(full));
  EXPECT_EQ(batcher_->queued(), 2);
  FinishAndWait();
  EXPECT_THAT(batches_, ElementsAre(ElementsAre("a"), ElementsAre("b", "c")));
  EXPECT_TRUE(outcome_.rejected.empty());
}

TEST_F(BatcherTest, ADeadlinePassingWhileQueuedRejectsWithoutCompute) {
  Make(Options(1000000, 0));
  ASSERT_TRUE(Add("a", 1).ok());
  ASSERT_TRUE(Add("late", 1, 0, clock_.Now() + absl::Microseconds(50)).ok());
  ASSERT_TRUE(Add("b", 1).ok());
  // The batcher asks to be polled at the deadline.
  EXPECT_EQ(batcher_->Poll(), clock_.Now() + absl::Microseconds(50));
  clock_.Advance(absl::Microseconds(50));
  batcher_->Poll();
  EXPECT_THAT(outcome_.rejected, ElementsAre("late:DEADLINE_EXCEEDED"));
  FinishAndWait();
  EXPECT_THAT(batches_, ElementsAre(ElementsAre("a"), ElementsAre("b")));
}

TEST_F(BatcherTest, TheTimeoutParameterAndTheDefaultTimeoutApply) {
  BatchingOptions o = Options(1000000, 0);
  o.default_timeout = absl::Microseconds(300);
  Make(o);
  ASSERT_TRUE(Add("a", 1).ok());
  ASSERT_TRUE(Add("default", 1).ok());
  ASSERT_TRUE(Add("short", 1, 0, absl::InfiniteFuture(), absl::Microseconds(100)).ok());
  clock_.Advance(absl::Microseconds(100));
  batcher_->Poll();
  EXPECT_THAT(outcome_.rejected, ElementsAre("short:DEADLINE_EXCEEDED"));
  clock_.Advance(absl::Microseconds(200));
  batcher_->Poll();
  EXPECT_THAT(outcome_.rejected,
              ElementsAre("short:DEADLINE_EXCEEDED", "default:DEADLINE_EXCEEDED"));
}

TEST_F(BatcherTest, ACancelledRequestLeavesTheQueueWithoutCompute) {
  Make(Options(1000000, 0));
  bool cancelled = false;
  ASSERT_TRUE(Add("a", 1).ok());
  ASSERT_TRUE(Add("gone", 1, 0, absl::InfiniteFuture(), absl::ZeroDuration(), &cancelled).ok());
  ASSERT_TRUE(Add("b", 1).ok());
  cancelled = true;
  FinishAndWait();
  EXPECT_THAT(outcome_.rejected, ElementsAre("gone:CANCELLED"));
  EXPECT_THAT(batches_, ElementsAre(ElementsAre("a"), ElementsAre("b")));
}

TEST_F(BatcherTest, HigherPriorityLevelsGoFirst) {
  BatchingOptions o = Options(1000000, 2, 0, /*concurrent=*/3);
  o.priority_levels = 3;
  o.default_priority_level = 2;
  Make(o);
  ASSERT_TRUE(Add("a", 1).ok());
  ASSERT_TRUE(Add("low", 1, 3).ok());
  ASSERT_TRUE(Add("default", 1).ok());  // level 2: 2 rows queued, cut now
  EXPECT_THAT(batches_.back(), ElementsAre("default", "low"));
  ASSERT_TRUE(Add("low2", 1, 3).ok());
  ASSERT_TRUE(Add("high", 1, 1).ok());
  EXPECT_THAT(batches_.back(), ElementsAre("high", "low2"));
  EXPECT_EQ(Add("bad", 1, 4).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(BatcherTest, APreferredSizeIsCutAtOnceWhileAnotherBatchRuns) {
  BatchingOptions o = Options(1000, 0, 0, /*concurrent=*/2);
  o.preferred_batch_rows = {4};
  Make(o);
  ASSERT_TRUE(Add("a", 1).ok());  // runs at once
  ASSERT_TRUE(Add("b", 1).ok());
  ASSERT_TRUE(Add("c", 1).ok());
  ASSERT_TRUE(Add("d", 1).ok());  // 3 rows: short of the preferred size, wait
  EXPECT_EQ(batcher_->Poll(), clock_.Now() + absl::Microseconds(1000));
  EXPECT_EQ(batches_.size(), 1u);
  ASSERT_TRUE(Add("e", 1).ok());  // 4 rows: cut now, the clock never moved
  EXPECT_THAT(batches_, ElementsAre(ElementsAre("a"), ElementsAre("b", "c", "d", "e")));

  // Three rows alone still wait for the delay, no more.
  batcher_->BatchDone();
  ASSERT_TRUE(Add("f", 1).ok());
  ASSERT_TRUE(Add("g", 1).ok());
  ASSERT_TRUE(Add("h", 1).ok());
  clock_.Advance(absl::Microseconds(999));
  batcher_->Poll();
  EXPECT_EQ(batches_.size(), 2u);
  clock_.Advance(absl::Microseconds(1));
  batcher_->Poll();
  EXPECT_THAT(batches_.back(), ElementsAre("f", "g", "h"));
}

TEST_F(BatcherTest, TheLargestPreferredSizeReachedIsCutAndTheRestWaitsForTheDelay) {
  BatchingOptions o = Options(1000, 0);
  o.preferred_batch_rows = {8, 4};  // any order
  Make(o);
  ASSERT_TRUE(Add("a", 1).ok());  // runs at once
  for (int i = 1; i <= 9; ++i) ASSERT_TRUE(Add("q" + std::to_string(i), 1).ok());
  EXPECT_EQ(batches_.size(), 1u);  // the only batch slot is taken
  // 9 rows reach 8: cut at once, without waiting for a's client to come back.
  batcher_->BatchDone();
  ASSERT_EQ(batches_.size(), 2u);
  EXPECT_THAT(batches_[1], ElementsAre("q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8"));
  // One row reaches no preferred size: the idle rules cut it after the delay.
  batcher_->BatchDone();
  EXPECT_EQ(batcher_->Poll(), clock_.Now() + absl::Microseconds(1000));
  clock_.Advance(absl::Microseconds(999));
  batcher_->Poll();
  EXPECT_EQ(batches_.size(), 2u);
  clock_.Advance(absl::Microseconds(1));
  batcher_->Poll();
  EXPECT_THAT(batches_.back(), ElementsAre("q9"));
}

TEST_F(BatcherTest, APreferredSizeNeverPassesMaxBatchRows) {
  BatchingOptions o = Options(1000, 6);
  o.preferred_batch_rows = {8};
  Make(o);
  ASSERT_TRUE(Add("a", 1).ok());
  for (int i = 1; i <= 8; ++i) ASSERT_TRUE(Add("q" + std::to_string(i), 1).ok());
  batcher_->BatchDone();
  EXPECT_THAT(batches_.back(), ElementsAre("q1", "q2", "q3", "q4", "q5", "q6"));
}

TEST_F(BatcherTest, APreferredSizeKeepsStrictPriorityOrder) {
  BatchingOptions o = Options(1000, 0, 0, /*concurrent=*/3);
  o.priority_levels = 3;
  o.preferred_batch_rows = {4};
  Make(o);
  ASSERT_TRUE(Add("a", 1).ok());  // runs at once
  ASSERT_TRUE(Add("low", 1, 3).ok());
  ASSERT_TRUE(Add("mid", 2, 2).ok());
  // In batch order high (3), then mid (5): no total lands on 4, so nothing is
  // cut (6 rows are queued, but low may not jump the level mid waits in).
  ASSERT_TRUE(Add("high", 3, 1).ok());
  EXPECT_EQ(batches_.size(), 1u);
  ASSERT_TRUE(Add("high2", 1, 1).ok());  // high + high2 = 4: cut, highest level first
  EXPECT_THAT(batches_.back(), ElementsAre("high", "high2"));
  clock_.Advance(absl::Microseconds(1000));  // mid + low (3 rows) wait for the delay
  batcher_->Poll();
  EXPECT_THAT(batches_.back(), ElementsAre("mid", "low"));
}

// Triton's rule: a batch is cut early only where the requests' rows add up
// to a preferred size exactly; 3 + 3 rows never make 4, so they wait for the
// delay and leave together rather than in two smaller batches.
TEST_F(BatcherTest, RequestsThatAddUpToNoPreferredSizeWaitAndLeaveTogether) {
  BatchingOptions o = Options(1000, 0, 0, /*concurrent=*/2);
  o.preferred_batch_rows = {4};
  Make(o);
  ASSERT_TRUE(Add("a", 1).ok());  // runs at once
  ASSERT_TRUE(Add("b", 3).ok());
  ASSERT_TRUE(Add("c", 3).ok());
  EXPECT_EQ(batches_.size(), 1u);
  clock_.Advance(absl::Microseconds(1000));
  batcher_->Poll();
  EXPECT_THAT(batches_.back(), ElementsAre("b", "c"));
}

TEST_F(BatcherTest, ClosedBatcherRefusesNewWorkAndRunsWhatIsQueued) {
  Make(Options(1000000, 0));
  ASSERT_TRUE(Add("a", 1).ok());
  ASSERT_TRUE(Add("b", 1).ok());
  batcher_->Close();
  absl::Status closed = Add("c", 1);
  EXPECT_EQ(closed.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(IsQueueFull(closed));  // unloading, not overload
  batcher_->Poll();                   // closed: nothing waits for company any more
  EXPECT_THAT(batches_, ElementsAre(ElementsAre("a"), ElementsAre("b")));
}

TEST_F(BatcherTest, TheTimerIsWokenOnlyWhenTheNextPollMovesEarlier) {
  Make(Options(500, 0, 0, /*concurrent=*/2));
  ASSERT_TRUE(Add("a", 1).ok());  // cut at once, nothing waits
  EXPECT_EQ(wakes_, 0);
  ASSERT_TRUE(Add("b", 1).ok());  // waits: poll due in 500 us
  EXPECT_EQ(wakes_, 1);
  ASSERT_TRUE(Add("c", 1).ok());  // same due time
  EXPECT_EQ(wakes_, 1);
}

// Many threads at once, with the real clock and the timer thread: every
// accepted request is answered exactly once, computed or rejected. Run under
// ThreadSanitizer by tests/run.sh.
class CountingTask final : public BatchTask {
 public:
  CountingTask(std::atomic<int>* answers, std::atomic<int>* dropped, int64_t rows, bool cancelled)
      : answers_(answers), dropped_(dropped), rows_(rows), cancelled_(cancelled) {}
  // Refused tasks are destroyed unanswered (the caller answers them); no task
  // may be answered twice.
  ~CountingTask() override {
    EXPECT_LE(answered_, 1);
    if (answered_ == 0) dropped_->fetch_add(1);
  }
  int64_t rows() const override { return rows_; }
  bool IsCancelled() const override { return cancelled_; }
  void Reject(absl::Status) override { Answer(); }
  void Answer() {
    ++answered_;
    answers_->fetch_add(1);
  }

 private:
  std::atomic<int>* answers_;
  std::atomic<int>* dropped_;
  int64_t rows_;
  bool cancelled_;
  int answered_ = 0;
};

TEST(BatcherThreadsTest, ConcurrentProducersAndWorkersAnswerEveryRequestOnce) {
  std::atomic<int> answers{0}, dropped{0};
  std::mutex mu;
  std::condition_variable cv;
  std::deque<DynamicBatcher::Batch> work;
  bool stop = false;
  BatcherTimer timer;
  BatchingOptions options;
  options.max_queue_delay = absl::Microseconds(200);
  options.max_batch_rows = 16;
  options.max_queue_size = 64;
  options.max_concurrent_batches = 2;
  auto batcher = std::make_shared<DynamicBatcher>(
      options, RealClock::Get(),
      [&](DynamicBatcher::Batch batch) {
        {
          std::lock_guard<std::mutex> lock(mu);
          work.push_back(std::move(batch));
        }
        cv.notify_one();
      },
      [&timer] { timer.Wake(); });
  timer.Register(batcher);
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&] {
      while (true) {
        DynamicBatcher::Batch batch;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return stop || !work.empty(); });
          if (work.empty()) return;
          batch = std::move(work.front());
          work.pop_front();
        }
        for (auto& t : batch) static_cast<CountingTask*>(t.get())->Answer();
        batch.clear();
        batcher->BatchDone();
      }
    });
  }
  std::atomic<int> accepted{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < 4; ++p) {
    producers.emplace_back([&, p] {
      std::mt19937 rng(p);
      for (int i = 0; i < 500; ++i) {
        const bool cancelled = rng() % 10 == 0;
        const absl::Time deadline = rng() % 10 == 0 ? absl::Now() + absl::Microseconds(rng() % 300)
                                                    : absl::InfiniteFuture();
        std::unique_ptr<BatchTask> task =
            std::make_unique<CountingTask>(&answers, &dropped, 1 + rng() % 4, cancelled);
        if (batcher->Enqueue(task, 0, deadline).ok()) accepted.fetch_add(1);
      }
    });
  }
  for (auto& t : producers) t.join();
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (answers.load() < accepted.load() && absl::Now() < deadline) {
    batcher->Poll();
    std::this_thread::yield();
  }
  EXPECT_EQ(answers.load(), accepted.load());
  EXPECT_GT(accepted.load(), 0);
  EXPECT_EQ(dropped.load(), 4 * 500 - accepted.load());  // exactly the refused ones
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  for (auto& t : workers) t.join();
  EXPECT_EQ(batcher->queued(), 0);
  EXPECT_EQ(batcher->in_flight_batches(), 0);
}

}  // namespace
}  // namespace gemmserve
