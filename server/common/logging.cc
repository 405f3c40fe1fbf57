#include "server/common/logging.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <iomanip>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace gemmserve {
namespace {

// The settings and the descriptor lines go to, under one lock, so a file
// being replaced is never written after it was closed.
struct LogState {
  std::mutex mu;
  LogConfig config;
  int fd = STDERR_FILENO;
};

LogState& State() {
  static LogState* state = new LogState;  // never destroyed: threads log at exit
  return *state;
}

char Letter(LogSeverity severity) {
  return severity == LogSeverity::kInfo ? 'I' : severity == LogSeverity::kWarning ? 'W' : 'E';
}

std::string Prefix(LogSeverity severity, LogFormat format, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  tm utc;
  gmtime_r(&now.tv_sec, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &utc);
  std::ostringstream out;
  if (format == LogFormat::kIso8601) {
    out << when << "Z " << Letter(severity) << " ";
  } else {
    out << Letter(severity) << " " << when << "." << std::setw(3) << std::setfill('0')
        << now.tv_nsec / 1000000 << "Z ";
  }
  out << (base ? base + 1 : file) << ":" << line << "] ";
  return out.str();
}

bool Enabled(const LogConfig& c, LogSeverity severity) {
  return severity == LogSeverity::kInfo ? c.info : severity == LogSeverity::kWarning ? c.warning
                                                                                      : c.error;
}

}  // namespace

LogConfig CurrentLogConfig() {
  std::lock_guard<std::mutex> lock(State().mu);
  return State().config;
}

absl::Status SetLogConfig(const LogConfig& config) {
  LogState& state = State();
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(state.mu);
    if (config.file == state.config.file) {
      state.config = config;
      return absl::OkStatus();
    }
  }
  if (!config.file.empty()) {
    // Never blocks the caller (a front end's thread): O_NONBLOCK makes a FIFO
    // without a reader fail at once, and only a regular file is taken.
    fd = ::open(config.file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK,
                0640);
    if (fd < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("log_file '", config.file, "' cannot be opened: ", std::strerror(errno)));
    }
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat("log_file '", config.file, "' is not a regular file"));
    }
    ::fcntl(fd, F_SETFL, O_APPEND);  // blocking writes again, as to stderr
  }
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.fd != STDERR_FILENO) ::close(state.fd);
  state.fd = config.file.empty() ? STDERR_FILENO : fd;
  state.config = config;
  return absl::OkStatus();
}

LogMessage::LogMessage(LogSeverity severity, const char* file, int line)
    : severity_(severity), file_(file), line_(line) {}

LogMessage::~LogMessage() {
  LogState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (!Enabled(state.config, severity_)) return;
  const std::string text =
      absl::StrCat(Prefix(severity_, state.config.format, file_, line_), stream_.str(), "\n");
  ssize_t ignored = ::write(state.fd, text.data(), text.size());
  (void)ignored;
}

}  // namespace gemmserve
