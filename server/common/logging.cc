#include "server/common/logging.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <iomanip>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"

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

// The kernel's pseudo file systems: their files are the kernel's interfaces
// (a write to /proc/self/comm renames a thread), not stored text. The list
// refuses these rather than accept only the file systems known to store
// files, which would refuse real ones it does not name (Lustre, GPFS, a
// FUSE volume). nullptr for any other.
const char* PseudoFileSystem(uint32_t type) {
  switch (type) {
    case PROC_SUPER_MAGIC: return "procfs";
    case SYSFS_MAGIC: return "sysfs";
    case DEBUGFS_MAGIC: return "debugfs";
    case TRACEFS_MAGIC: return "tracefs";
    case SECURITYFS_MAGIC: return "securityfs";
    case SELINUX_MAGIC: return "selinuxfs";
    case SMACK_MAGIC: return "smackfs";
    case AAFS_MAGIC: return "apparmorfs";
    case CGROUP_SUPER_MAGIC: return "cgroup";
    case CGROUP2_SUPER_MAGIC: return "cgroup2";
    case RDTGROUP_SUPER_MAGIC: return "resctrl";
    case DEVPTS_SUPER_MAGIC: return "devpts";
    case BPF_FS_MAGIC: return "bpf";
    case PSTOREFS_MAGIC: return "pstore";
    case EFIVARFS_MAGIC: return "efivarfs";
    case BINFMTFS_MAGIC: return "binfmt_misc";
    case XENFS_SUPER_MAGIC: return "xenfs";
    case OPENPROM_SUPER_MAGIC: return "openpromfs";
    case USBDEVICE_SUPER_MAGIC: return "usbdevfs";
    case HUGETLBFS_MAGIC: return "hugetlbfs";
    case BINDERFS_SUPER_MAGIC: return "binderfs";
    case NSFS_MAGIC: return "nsfs";
    case 0x62656570: return "configfs";  // not in <linux/magic.h>, as the four below
    case 0x65735543: return "fusectl";
    case 0x19800202: return "mqueue";
    case 0x67596969: return "rpc_pipefs";
    case 0x6e667364: return "nfsd";
    default: return nullptr;
  }
}

constexpr char kLink[] = "is reached through a symbolic link: refused";

absl::Status Refused(const std::string& path, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("log_file '", ClientText(path, 256), "' ", why));
}

// Why `fd` (on the path named `path`) may not hold a log: on a pseudo file
// system; OK else.
absl::Status CheckFileSystem(int fd, const std::string& path) {
  struct statfs fs;
  if (::fstatfs(fd, &fs) != 0) return Refused(path, "cannot be opened: its file system is unknown");
  if (const char* pseudo = PseudoFileSystem(static_cast<uint32_t>(fs.f_type))) {
    return Refused(path, absl::StrCat("is on ", pseudo,
                                      ", a kernel pseudo file system whose "
                                      "files are not stored: refused"));
  }
  return absl::OkStatus();
}

// The directory of `path` (absolute), opened from "/" one component at a
// time with O_NOFOLLOW, each checked to be on a file system that stores
// files; sets `name` to the last component.
absl::StatusOr<int> OpenDirectoryWithoutLinks(const std::string& path, std::string* name) {
  const std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  if (parts.empty() || path.back() == '/') return Refused(path, "names no file");
  int dir = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return Refused(path, absl::StrCat("cannot be opened: ", std::strerror(errno)));
  for (size_t i = 0;; ++i) {
    if (absl::Status s = CheckFileSystem(dir, path); !s.ok()) {
      ::close(dir);
      return s;
    }
    if (i + 1 == parts.size()) break;
    const int next = ::openat(dir, parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int error = errno;
    struct stat st;
    const bool link = next < 0 && ::fstatat(dir, parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                      S_ISLNK(st.st_mode);
    ::close(dir);
    if (link) return Refused(path, kLink);
    if (next < 0) return Refused(path, absl::StrCat("cannot be opened: ", std::strerror(error)));
    dir = next;
  }
  *name = parts.back();
  return dir;
}

// Opens `path` for appending, as LogConfig::file takes it (logging.h), or
// says why not. Each check comes before the file is opened (a pseudo-file
// or a device may act on being opened) and again on what was opened (the
// name may have changed in between).
absl::StatusOr<int> OpenLogFile(const std::string& path) {
  if (path.front() != '/') {
    return Refused(path,
                   "must be an absolute path (the server's working directory is not the "
                   "client's to know)");
  }
  for (const unsigned char c : path) {
    if (c < 0x20 || c == 0x7f) return Refused(path, "has a control character");
  }
  std::string name;
  int dir;
  GEMMSERVE_ASSIGN_OR_RETURN(dir, OpenDirectoryWithoutLinks(path, &name));
  struct stat st;
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
    ::close(dir);
    return Refused(path, S_ISLNK(st.st_mode) ? kLink : "is not a regular file");
  }
  // Never blocks the caller (a front end's thread): O_NONBLOCK makes a FIFO
  // without a reader, were one put there since, fail at once.
  const int fd = ::openat(
      dir, name.c_str(),
      O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0640);
  const int error = errno;
  ::close(dir);
  if (fd < 0) {
    return Refused(
        path, error == ELOOP ? kLink : absl::StrCat("cannot be opened: ", std::strerror(error)));
  }
  absl::Status checked = CheckFileSystem(fd, path);
  if (checked.ok() && (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    checked = Refused(path, "is not a regular file");
  }
  if (!checked.ok()) {
    ::close(fd);
    return checked;
  }
  ::fcntl(fd, F_SETFL, O_APPEND);  // blocking writes again, as to stderr
  return fd;
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
    GEMMSERVE_ASSIGN_OR_RETURN(fd, OpenLogFile(config.file));
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
