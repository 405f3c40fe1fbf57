// Minimal logging to stderr (bookworm's Abseil has no absl/log). One line per
// message, written with a single write so lines from threads do not interleave.
//
//   GEMMSERVE_LOG(INFO) << "listening on " << address;
#ifndef GEMMSERVE_SERVER_COMMON_LOGGING_H_
#define GEMMSERVE_SERVER_COMMON_LOGGING_H_

#include <sstream>

namespace gemmserve {

enum class LogSeverity { kInfo, kWarning, kError };

class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

}  // namespace gemmserve

#define GEMMSERVE_LOG_SEVERITY_INFO ::gemmserve::LogSeverity::kInfo
#define GEMMSERVE_LOG_SEVERITY_WARNING ::gemmserve::LogSeverity::kWarning
#define GEMMSERVE_LOG_SEVERITY_ERROR ::gemmserve::LogSeverity::kError
#define GEMMSERVE_LOG(severity) \
  ::gemmserve::LogMessage(GEMMSERVE_LOG_SEVERITY_##severity, __FILE__, __LINE__).stream()

#endif  // GEMMSERVE_SERVER_COMMON_LOGGING_H_
