// Clock: where the batcher reads the time, so tests can inject a fake one
// and drive queue delays and timeouts without sleeping.
//
//   FakeClock clock;
//   DynamicBatcher batcher(options, &clock, run_batch);
//   clock.Advance(absl::Microseconds(500));
//   batcher.Poll();  // cuts the batches that are now due
#ifndef GEMMSERVE_SERVER_CORE_CLOCK_H_
#define GEMMSERVE_SERVER_CORE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gemmserve {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
};

class RealClock final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  static RealClock* Get() {
    static RealClock clock;
    return &clock;
  }
};

// Time stands still until a test advances it.
class FakeClock final : public Clock {
 public:
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1000000);
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_CLOCK_H_
