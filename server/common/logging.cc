#include "server/common/logging.h"

#include <unistd.h>

#include <cstring>
#include <ctime>
#include <iomanip>

namespace gemmserve {

LogMessage::LogMessage(LogSeverity severity, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  tm utc;
  gmtime_r(&now.tv_sec, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &utc);
  const char letter = severity == LogSeverity::kInfo      ? 'I'
                      : severity == LogSeverity::kWarning ? 'W'
                                                          : 'E';
  stream_ << letter << " " << when << "." << std::setw(3) << std::setfill('0')
          << now.tv_nsec / 1000000 << "Z " << (base ? base + 1 : file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string text = stream_.str();
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

}  // namespace gemmserve
