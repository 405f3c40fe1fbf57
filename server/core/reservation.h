// Reservation: bytes held against --max_inflight_bytes, released when the
// reservation goes (or shrinks). The engine hands them out (Reserve, Grow):
// a front end reserves a request body's declared size before it reads it, the
// engine's admission takes those bytes over as part of the request's cost,
// and the answer carries the whole cost back to the front end, which drops it
// once the reply is written. So what the server holds for a request is
// counted from its first byte to its last, and the gemmserve_inflight_bytes
// gauge moves with the count.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(Reservation body, engine.Reserve(length, "the request body"));
//   ... read the body ...
//   GEMMSERVE_RETURN_IF_ERROR(engine.Grow(&body, inflated, "the inflated body"));
//   body.Shrink(length);  // the compressed bytes are freed
//
// The count itself is shared (a Ledger) between the engine and every
// reservation, so a reservation may outlive the engine that handed it out
// (an answer still being written at shutdown, a test's result destroyed after
// its engine); the metrics it reports to must outlive every reservation
// (Serving owns them and destroys them last).
#ifndef GEMMSERVE_SERVER_CORE_RESERVATION_H_
#define GEMMSERVE_SERVER_CORE_RESERVATION_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "server/metrics/metrics.h"

namespace gemmserve {

class Reservation {
 public:
  // What the engine counts against --max_inflight_bytes.
  struct Ledger {
    explicit Ledger(Metrics* m) : metrics(m) {}
    std::atomic<int64_t> held{0};
    Metrics* const metrics;  // may be null
  };

  Reservation() = default;
  Reservation(Reservation&& other) noexcept { *this = std::move(other); }
  Reservation& operator=(Reservation&& other) noexcept {
    if (this != &other) {
      Release();
      ledger_ = std::move(other.ledger_);
      bytes_ = other.bytes_;
      other.bytes_ = 0;
    }
    return *this;
  }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  ~Reservation() { Release(); }

  int64_t bytes() const { return bytes_; }

  // Gives back up to `n` bytes (what was freed), keeping the rest.
  void Shrink(int64_t n) {
    n = std::min(std::max<int64_t>(n, 0), bytes_);
    if (n == 0) return;
    ledger_->held.fetch_sub(n, std::memory_order_relaxed);
    if (ledger_->metrics != nullptr) ledger_->metrics->AddInflightBytes(-n);
    bytes_ -= n;
  }
  void Release() { Shrink(bytes_); }

  // Takes `other`'s bytes over (both must come from the same engine, or
  // `other` be empty).
  void Absorb(Reservation&& other) {
    if (other.bytes_ == 0) return;
    if (bytes_ == 0) {
      *this = std::move(other);
      return;
    }
    bytes_ += other.bytes_;
    other.bytes_ = 0;
  }
  // Splits `n` bytes (at most what it holds) off into a reservation of their own.
  Reservation Take(int64_t n) {
    n = std::min(std::max<int64_t>(n, 0), bytes_);
    bytes_ -= n;
    return Reservation(ledger_, n);
  }

 private:
  friend class InferenceEngine;
  Reservation(std::shared_ptr<Ledger> ledger, int64_t bytes)
      : ledger_(std::move(ledger)), bytes_(bytes) {}

  std::shared_ptr<Ledger> ledger_;
  int64_t bytes_ = 0;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_RESERVATION_H_
