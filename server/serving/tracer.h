// Tracer: Triton's trace mode ("triton", level TIMESTAMPS) for gemmserve.
// Settings are global, and per model where a client set them (a model's own
// value of a key wins over the global one; clearing it falls back). A
// request is traced when its scope's level is TIMESTAMPS, it is the
// trace_rate-th request of that scope since the last trace, and trace_count
// (-1: no limit) is not spent. Each trace is a JSON object in Triton's form,
//
//   {"id": 7, "model_name": "matmul", "model_version": 1, "batch_size": 12,
//    "traceparent": "00-...-01", "timestamps": [{"name": "REQUEST_START",
//    "ns": 1733500000000000000}, ... "REQUEST_END"]}
//
// (batch_size: the rows of the kernel call the request ran in; traceparent:
// the W3C header the request carried, when it was well formed). Files are
// written as Triton writes them: with log_frequency N > 0, every N traces go
// to `<trace_file>.<k>` (k = 0, 1, ...) as a JSON array; with 0, the traces
// collected go to `<trace_file>` when the server stops (and on Flush). When
// log_frequency changes, what was collected goes to the next numbered file. Writing happens on the tracer's own thread, never on a request's;
// at most kMaxPendingTraceBytes wait to be written, beyond which traces are
// dropped (and counted in the log).
//
// The files are bounded (TraceFileBounds) and never written through a link:
// each is created anew in the trace file's directory (opened at start) with
// O_EXCL and O_NOFOLLOW. A name that holds an earlier run's trace file (a
// regular file of the server's user with no other name) is replaced, as
// Triton replaces it; anything else at the name (a symbolic link, another
// user's file, a file with other names) is left as it is: a numbered file
// takes the next free number, `<trace_file>` is not written (both logged).
//
// Cost when no scope traces: one relaxed atomic load per request.
#ifndef GEMMSERVE_SERVER_SERVING_TRACER_H_
#define GEMMSERVE_SERVER_SERVING_TRACER_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpc_service.pb.h"

namespace gemmserve {

inline constexpr int64_t kMaxPendingTraceBytes = int64_t{64} << 20;

// The trace files kept (--trace_max_files, --trace_max_bytes, `<trace_file>`
// included): before a file is written, the oldest this tracer wrote are
// removed until both hold with it, as a log rotates (a name someone else has
// since put there is not removed, and no longer counted). One file holds at
// most max_bytes / max_files bytes: traces that would pass it go to the next
// numbered file, before log_frequency of them are collected (with
// log_frequency 0 too: `<trace_file>` then holds the traces since).
struct TraceFileBounds {
  int64_t max_files = 16;                  // 1 to kMaxTraceFiles
  int64_t max_bytes = int64_t{256} << 20;  // at least max_files * kMinTraceFileBytes
};
inline constexpr int64_t kMaxTraceFiles = int64_t{1} << 20;
inline constexpr int64_t kMinTraceFileBytes = int64_t{64} << 10;

// What one traced request went through, filled as it goes.
struct RequestTrace {
  uint64_t id = 0;
  std::string model_name, model_version;
  std::string traceparent;  // empty: none
  absl::Time request_start, queue_start, compute_start, compute_end, request_end;
  int64_t batch_rows = 0;
  bool computed = false;  // false: refused or failed before compute (no compute stamps)
};

// One scope's settings; unset fields of a model's fall back to the global ones.
struct TraceSettings {
  std::optional<bool> timestamps;  // trace_level: TIMESTAMPS (true) or OFF
  std::optional<int64_t> rate;     // trace_rate >= 1
  std::optional<int64_t> count;    // trace_count >= -1 (-1: no limit), what is left
  std::optional<int64_t> log_frequency;
};

class Tracer {
 public:
  // `trace_file` empty: tracing cannot be turned on. `initial` is the global
  // scope at start (each field set; --trace_* flags); INVALID_ARGUMENT for a
  // value or a bound out of range, a level on without a file, or a
  // `trace_file` whose directory cannot be opened.
  static absl::StatusOr<std::unique_ptr<Tracer>> Create(std::string trace_file,
                                                        TraceSettings initial,
                                                        TraceFileBounds bounds = {});
  // Create's checks of its values (not of the file): what the composition
  // root checks the --trace_* flags with before it builds anything.
  static absl::Status CheckOptions(const std::string& trace_file, const TraceSettings& initial,
                                   const TraceFileBounds& bounds);
  ~Tracer();  // writes what was collected, then stops the writer

  // Whether this request of `model` is traced: its id (> 0), else 0.
  uint64_t Sample(absl::string_view model) {
    if (!any_on_.load(std::memory_order_relaxed)) return 0;
    return SampleSlow(model);
  }
  // Hands a finished trace over to be written.
  void Record(const RequestTrace& trace);

  // Triton's TraceSetting: applies the request's settings to its scope
  // (model_name empty: global; else a model `exists` says is served), all
  // or none, and fills `response` with the scope's settings in effect.
  // An empty value list clears a key (a model's falls back to the global
  // value, the global one to its value at start). INVALID_ARGUMENT for an
  // unknown key or a bad value; trace_file only as it is (fixed at start by
  // --trace_file); FAILED_PRECONDITION turning tracing on without a file.
  absl::Status Update(const inference::TraceSettingRequest& request, bool model_exists,
                      inference::TraceSettingResponse* response);

  // A W3C traceparent value as it may be recorded: "00-" 32 hex "-" 16 hex
  // "-" 2 hex, lowercase; anything else is not recorded.
  static bool ValidTraceparent(absl::string_view value);

  // Triton's trace JSON object of one trace.
  static std::string TraceJson(const RequestTrace& trace);

  // Writes what was collected now (log_frequency 0: to `<trace_file>`), and
  // waits until the writer has written everything handed to it.
  void Flush();

 private:
  Tracer() = default;
  uint64_t SampleSlow(absl::string_view model);
  TraceSettings EffectiveLocked(const std::string& model) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefreshAnyOnLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands the collected traces to the writer: numbered, moved into the
  // next `<trace_file>.<k>`; else copied into `<trace_file>` whole (they stay
  // collected, as the file is rewritten with every flush).
  void HandOffLocked(bool numbered) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriterLoop();
  // The writer's, on its thread: writes one file (numbered: the next free
  // `<trace_file>.<k>`; else `<trace_file>`), within the bounds. Logged on
  // failure.
  void WriteFile(bool numbered, const std::vector<std::string>& traces);
  // Creates the file `numbered` names (CreateNew), passing over names that
  // are someone else's; its name in dir_, or "" (logged).
  std::string CreateNextFile(bool numbered, int* fd);
  std::string PathOf(const std::string& name) const {  // a name in dir_, as logged
    return file_ + name.substr(base_.size());
  }
  // Removes the oldest kept files until one of `bytes` more fits the bounds.
  void MakeRoom(int64_t bytes);
  // Stops counting `name` (removing it too when `remove` and it is still
  // the file written).
  void Forget(const std::string& name, bool remove);

  std::string file_;
  int dir_ = -1;      // file_'s directory, opened at start (O_PATH)
  std::string base_;  // file_'s name in it
  TraceFileBounds bounds_;
  int64_t file_bytes_ = 0;  // one file's bound: bounds_.max_bytes / bounds_.max_files
  TraceSettings start_;  // the global scope at start, every field set
  std::atomic<bool> any_on_{false};

  mutable absl::Mutex mu_;
  TraceSettings global_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, TraceSettings> models_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> seen_ ABSL_GUARDED_BY(mu_);  // per scope ("" global)
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> collected_ ABSL_GUARDED_BY(mu_);  // not yet handed to the writer
  int64_t collected_bytes_ ABSL_GUARDED_BY(mu_) = 0;         // their file's size, less its "["
  int64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;           // collected and handed, unwritten
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;

  // The writer: (numbered, traces) to write, in order.
  std::mutex writer_mu_;
  std::condition_variable writer_cv_;
  std::deque<std::pair<bool, std::vector<std::string>>> to_write_;
  bool writing_ = false;
  bool stop_ = false;
  std::thread writer_;

  // The writer thread's own: the files it wrote and keeps, oldest first.
  struct KeptFile {
    std::string name;                 // in dir_
    std::array<int64_t, 5> identity;  // device, inode, size, mtime (s, ns) once written
    int64_t bytes = 0;
  };
  std::deque<KeptFile> kept_;
  int64_t kept_bytes_ = 0;
  int64_t next_file_ = 0;     // k of the next `<trace_file>.<k>`
  int64_t names_passed_ = 0;  // names someone else's, logged 1, 2, 4, ...
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVING_TRACER_H_
