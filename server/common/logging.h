// Minimal logging to stderr (bookworm's Abseil has no absl/log). One line per
// message, written with a single write so lines from threads do not interleave.
// What is written, where and how can change while the server runs (Triton's
// LogSettings: SetLogConfig), taking effect from the next line.
//
//   GEMMSERVE_LOG(INFO) << "listening on " << address;
#ifndef GEMMSERVE_SERVER_COMMON_LOGGING_H_
#define GEMMSERVE_SERVER_COMMON_LOGGING_H_

#include <cstdint>
#include <sstream>
#include <string>

#include "absl/status/status.h"

namespace gemmserve {

enum class LogSeverity { kInfo, kWarning, kError };

// Triton's log_format values: "default" (gemmserve's own line,
// `I 2026-01-02T03:04:05.678Z file.cc:12] text`) and "ISO8601"
// (`2026-01-02T03:04:05Z I file.cc:12] text`).
enum class LogFormat { kDefault, kIso8601 };

// Triton's log settings. `file` empty: stderr.
struct LogConfig {
  bool info = true;
  bool warning = true;
  bool error = true;
  uint32_t verbose_level = 0;  // kept and reported; gemmserve has no verbose lines
  LogFormat format = LogFormat::kDefault;
  std::string file;
};

// The settings in effect.
LogConfig CurrentLogConfig();
// Applies `config` at once. A new `file` is opened for appending (created
// 0640) before anything changes, without blocking, and only as a file that
// stores a log: an absolute path of printable characters, each directory on
// it reached without a symbolic link and none on a kernel pseudo file system
// (procfs, sysfs, debugfs, cgroup, ...: their files act when written), ending
// at a regular file (or at no file: created) that is not a link. Anything
// else (a FIFO, a device, /proc/self/comm) is INVALID_ARGUMENT, naming the
// path escaped (ClientText), with nothing written and the log unchanged.
absl::Status SetLogConfig(const LogConfig& config);

class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

}  // namespace gemmserve

#define GEMMSERVE_LOG_SEVERITY_INFO ::gemmserve::LogSeverity::kInfo
#define GEMMSERVE_LOG_SEVERITY_WARNING ::gemmserve::LogSeverity::kWarning
#define GEMMSERVE_LOG_SEVERITY_ERROR ::gemmserve::LogSeverity::kError
#define GEMMSERVE_LOG(severity) \
  ::gemmserve::LogMessage(GEMMSERVE_LOG_SEVERITY_##severity, __FILE__, __LINE__).stream()

#endif  // GEMMSERVE_SERVER_COMMON_LOGGING_H_
