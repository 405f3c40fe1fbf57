#include "server/serving/tracer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/common/client_text.h"
#include "server/common/logging.h"
#include "server/common/status_macros.h"

namespace gemmserve {
namespace {

constexpr char kKeys[] =
    "trace_file, trace_level, trace_rate, trace_count, log_frequency, trace_mode";

absl::Status CheckSettings(const TraceSettings& s, const std::string& file) {
  if (s.rate && *s.rate < 1) {
    return absl::InvalidArgumentError("trace_rate must be at least 1 (1: every request)");
  }
  if (s.count && *s.count < -1) {
    return absl::InvalidArgumentError("trace_count must be -1 (no limit) or more");
  }
  if (s.log_frequency && *s.log_frequency < 0) {
    return absl::InvalidArgumentError("log_frequency must not be negative");
  }
  if (s.timestamps.value_or(false) && file.empty()) {
    return absl::FailedPreconditionError(
        "tracing needs a trace file; start the server with --trace_file");
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> OneNumber(const std::string& key,
                                  const inference::TraceSettingRequest::SettingValue& value) {
  int64_t n;
  if (value.value_size() != 1 || !absl::SimpleAtoi(value.value(0), &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("trace setting '", key, "' takes one integer, as a string"));
  }
  return n;
}

// Applies one key of a TraceSetting request to `scope`; `start` holds the
// values a cleared global key returns to (nullptr for a model's scope,
// whose cleared keys fall back to the global ones).
absl::Status Apply(const std::string& key,
                   const inference::TraceSettingRequest::SettingValue& value,
                   const std::string& file, const TraceSettings* start, TraceSettings* scope) {
  const bool clear = value.value_size() == 0;
  if (key == "trace_file") {
    if (!clear && (value.value_size() != 1 || value.value(0) != file)) {
      return absl::InvalidArgumentError(
          "trace_file is fixed when the server starts (--trace_file) and cannot be set by a "
          "client");
    }
  } else if (key == "trace_mode") {
    if (!clear && (value.value_size() != 1 || value.value(0) != "triton")) {
      return absl::InvalidArgumentError("trace_mode: only 'triton' is served");
    }
  } else if (key == "trace_level") {
    std::optional<bool> on;
    if (!clear) {
      on = false;
      for (const std::string& level : value.value()) {
        if (level == "TIMESTAMPS") {
          on = true;
        } else if (level != "OFF") {
          return absl::InvalidArgumentError(
              absl::StrCat("trace_level '", ClientText(level),
                           "' is not served; use TIMESTAMPS or OFF"));
        }
      }
    }
    scope->timestamps = clear ? (start ? start->timestamps : std::nullopt) : on;
  } else if (key == "trace_rate" || key == "trace_count" || key == "log_frequency") {
    std::optional<int64_t>* field = key == "trace_rate"    ? &scope->rate
                                    : key == "trace_count" ? &scope->count
                                                           : &scope->log_frequency;
    const std::optional<int64_t>* reset = start == nullptr      ? nullptr
                                          : key == "trace_rate" ? &start->rate
                                          : key == "trace_count" ? &start->count
                                                                 : &start->log_frequency;
    if (clear) {
      *field = reset ? *reset : std::nullopt;
    } else {
      GEMMSERVE_ASSIGN_OR_RETURN(*field, OneNumber(key, value));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown trace setting '", ClientText(key),
                                                   "'; expected one of: ", kKeys));
  }
  return absl::OkStatus();
}

absl::Status CheckBounds(const TraceFileBounds& b) {
  if (b.max_files < 1 || b.max_files > kMaxTraceFiles) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trace_max_files must be 1 to ", kMaxTraceFiles, ", got ", b.max_files));
  }
  if (b.max_bytes / b.max_files < kMinTraceFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trace_max_bytes must be at least ", kMinTraceFileBytes, " bytes a file (",
                     b.max_files * kMinTraceFileBytes, " for --trace_max_files=", b.max_files,
                     "), got ", b.max_bytes));
  }
  return absl::OkStatus();
}

// The directory of --trace_file (the operator's), opened once: the files
// are made in it by name, without following a link. Sets `base`, the
// file's name in it.
absl::StatusOr<int> OpenDirectory(const std::string& trace_file, std::string* base) {
  const size_t slash = trace_file.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : trace_file.substr(0, slash);
  *base = slash == std::string::npos ? trace_file : trace_file.substr(slash + 1);
  if (base->empty() || *base == "." || *base == "..") {
    return absl::InvalidArgumentError("--trace_file must name a file");
  }
  const int fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--trace_file's directory ", dir,
                                                   " cannot be opened: ", std::strerror(errno)));
  }
  return fd;
}

// `traces` as a trace file holds them: one JSON array.
std::string TraceFileText(const std::vector<std::string>& traces) {
  std::string text = "[";
  for (size_t i = 0; i < traces.size(); ++i) absl::StrAppend(&text, i ? ",\n" : "", traces[i]);
  return text + "]\n";
}

// Whether `name` in `dir` may give way to a new trace file: a regular file
// of the server's user with no other name (an earlier run's trace file, or
// the one being rewritten). A link, another user's file or one with other
// names is someone else's, and stays.
bool Replaceable(int dir, const std::string& name) {
  struct stat st;
  return ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
         st.st_uid == ::geteuid() && st.st_nlink == 1;
}

// Creates `name` in `dir` as a new file: O_EXCL and O_NOFOLLOW, so never
// through a link nor into a file that exists (a replaceable one is unlinked
// first: unlinking removes a name, never writes a file). -1 with errno set
// (EEXIST: the name is someone else's).
int CreateNew(int dir, const std::string& name) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::openat(dir, name.c_str(), kFlags, 0644);
  if (fd < 0 && errno == EEXIST && Replaceable(dir, name)) {
    ::unlinkat(dir, name.c_str(), 0);
    fd = ::openat(dir, name.c_str(), kFlags, 0644);
  }
  return fd;
}

// What tells the file written from one put at its name since: its inode
// (which a new file may reuse), size and time of its last change.
std::array<int64_t, 5> Identity(const struct stat& st) {
  return {static_cast<int64_t>(st.st_dev), static_cast<int64_t>(st.st_ino),
          static_cast<int64_t>(st.st_size), st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
}

bool WriteAll(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

absl::Status Tracer::CheckOptions(const std::string& trace_file, const TraceSettings& initial,
                                  const TraceFileBounds& bounds) {
  GEMMSERVE_RETURN_IF_ERROR(CheckSettings(initial, trace_file));
  GEMMSERVE_RETURN_IF_ERROR(CheckBounds(bounds));
  if (!initial.timestamps || !initial.rate || !initial.count || !initial.log_frequency) {
    return absl::InvalidArgumentError("every initial trace setting must be given");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Tracer>> Tracer::Create(std::string trace_file,
                                                       TraceSettings initial,
                                                       TraceFileBounds bounds) {
  GEMMSERVE_RETURN_IF_ERROR(CheckOptions(trace_file, initial, bounds));
  std::string base;
  int dir = -1;
  if (!trace_file.empty()) {
    GEMMSERVE_ASSIGN_OR_RETURN(dir, OpenDirectory(trace_file, &base));
  }
  std::unique_ptr<Tracer> t(new Tracer);
  t->dir_ = dir;
  t->base_ = std::move(base);
  t->file_ = std::move(trace_file);
  t->bounds_ = bounds;
  t->file_bytes_ = bounds.max_bytes / bounds.max_files;
  t->start_ = initial;
  {
    absl::MutexLock lock(&t->mu_);
    t->global_ = initial;
    t->RefreshAnyOnLocked();
  }
  t->writer_ = std::thread([p = t.get()] { p->WriterLoop(); });
  return t;
}

Tracer::~Tracer() {
  Flush();
  {
    std::lock_guard<std::mutex> lock(writer_mu_);
    stop_ = true;
  }
  writer_cv_.notify_all();
  writer_.join();
  if (dir_ >= 0) ::close(dir_);
}

bool Tracer::ValidTraceparent(absl::string_view v) {
  if (v.size() != 55 || v.substr(0, 3) != "00-" || v[35] != '-' || v[52] != '-') return false;
  for (size_t i = 3; i < v.size(); ++i) {
    if (i == 35 || i == 52) continue;
    const char c = v[i];
    if (!absl::ascii_isdigit(c) && !(c >= 'a' && c <= 'f')) return false;
  }
  return true;
}

std::string Tracer::TraceJson(const RequestTrace& t) {
  // By hand: RapidJSON's Writer offsets a null pointer on its first push
  // (UBSan). Every byte outside printable ASCII is escaped, so the text is
  // JSON whatever a client named.
  auto quoted = [](absl::string_view text) {
    std::string out = "\"";
    for (const unsigned char c : text) {
      if (c == '"' || c == '\\') {
        out.push_back('\\');
        out.push_back(static_cast<char>(c));
      } else if (c < 0x20 || c >= 0x7f) {
        absl::StrAppend(&out, "\\u00", absl::Hex(c, absl::kZeroPad2));
      } else {
        out.push_back(static_cast<char>(c));
      }
    }
    return out + "\"";
  };
  int64_t version;
  std::string json = absl::StrCat(
      "{\"id\":", t.id, ",\"model_name\":", quoted(t.model_name), ",\"model_version\":",
      absl::SimpleAtoi(t.model_version, &version) ? absl::StrCat(version)  // a number, as Triton's
                                                 : quoted(t.model_version));
  if (t.computed) absl::StrAppend(&json, ",\"batch_size\":", t.batch_rows);
  if (!t.traceparent.empty()) absl::StrAppend(&json, ",\"traceparent\":", quoted(t.traceparent));
  json += ",\"timestamps\":[";
  auto stamp = [&](const char* name, absl::Time at) {
    absl::StrAppend(&json, json.back() == '[' ? "" : ",", "{\"name\":\"", name, "\",\"ns\":",
                    absl::ToUnixNanos(at), "}");
  };
  stamp("REQUEST_START", t.request_start);
  if (t.computed) {
    stamp("QUEUE_START", t.queue_start);
    stamp("COMPUTE_START", t.compute_start);
    stamp("COMPUTE_INPUT_END", t.compute_start);  // inputs are read in place: no copy-in phase
    stamp("COMPUTE_OUTPUT_START", t.compute_end);
    stamp("COMPUTE_END", t.compute_end);
  }
  stamp("REQUEST_END", t.request_end);
  return json + "]}";
}

TraceSettings Tracer::EffectiveLocked(const std::string& model) const {
  TraceSettings e = global_;
  auto it = models_.find(model);
  if (it == models_.end()) return e;
  const TraceSettings& m = it->second;
  if (m.timestamps) e.timestamps = m.timestamps;
  if (m.rate) e.rate = m.rate;
  if (m.count) e.count = m.count;
  if (m.log_frequency) e.log_frequency = m.log_frequency;
  return e;
}

void Tracer::RefreshAnyOnLocked() {
  bool on = global_.timestamps.value_or(false);
  for (const auto& [model, settings] : models_) on |= settings.timestamps.value_or(false);
  any_on_.store(on, std::memory_order_relaxed);
}

uint64_t Tracer::SampleSlow(absl::string_view model_name) {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(std::string(model_name));
  const std::string scope = it == models_.end() ? std::string() : it->first;
  const TraceSettings e = EffectiveLocked(scope);
  if (!e.timestamps.value_or(false)) return 0;
  int64_t& seen = seen_[scope];
  if (++seen < e.rate.value_or(1)) return 0;
  seen = 0;
  // The count is spent where it was set: the model's own, else the global one.
  std::optional<int64_t>& count =
      it != models_.end() && it->second.count ? it->second.count : global_.count;
  if (count.value_or(-1) == 0) return 0;
  if (count.value_or(-1) > 0) --*count;
  return ++next_id_;
}

void Tracer::Record(const RequestTrace& trace) {
  std::string json = TraceJson(trace);
  const int64_t entry = static_cast<int64_t>(json.size()) + 2;  // with its ",\n" or "]\n"
  absl::MutexLock lock(&mu_);
  // A trace longer than a file may hold (64 KiB at least) cannot be made;
  // it would be dropped too.
  if (pending_bytes_ + static_cast<int64_t>(json.size()) > kMaxPendingTraceBytes ||
      1 + entry > file_bytes_) {
    ++dropped_;
    if ((dropped_ & (dropped_ - 1)) == 0) {  // 1, 2, 4, ...: logged, not flooded
      GEMMSERVE_LOG(WARNING) << dropped_ << " traces dropped: more than "
                             << kMaxPendingTraceBytes << " bytes wait to be written "
                             << "(raise log_frequency's rate of writing, or trace fewer)";
    }
    return;
  }
  if (1 + collected_bytes_ + entry > file_bytes_) HandOffLocked(/*numbered=*/true);  // full
  pending_bytes_ += static_cast<int64_t>(json.size());
  collected_bytes_ += entry;
  collected_.push_back(std::move(json));
  const int64_t frequency = global_.log_frequency.value_or(0);
  if (frequency > 0 && static_cast<int64_t>(collected_.size()) >= frequency) {
    HandOffLocked(/*numbered=*/true);
  }
}

void Tracer::HandOffLocked(bool numbered) {
  if (collected_.empty()) return;
  std::pair<bool, std::vector<std::string>> job;
  if (numbered) {
    job = {true, std::move(collected_)};
    collected_.clear();
    collected_bytes_ = 0;
  } else {
    job = {false, collected_};  // the whole file again: its traces stay collected
  }
  {
    std::lock_guard<std::mutex> lock(writer_mu_);
    to_write_.push_back(std::move(job));
  }
  writer_cv_.notify_all();
}

void Tracer::WriterLoop() {
  std::unique_lock<std::mutex> lock(writer_mu_);
  while (true) {
    writer_cv_.wait(lock, [&] { return stop_ || !to_write_.empty(); });
    if (to_write_.empty()) return;  // stopped, and everything written
    auto [numbered, traces] = std::move(to_write_.front());
    to_write_.pop_front();
    writing_ = true;
    lock.unlock();
    WriteFile(numbered, traces);
    int64_t bytes = 0;
    for (const std::string& t : traces) bytes += static_cast<int64_t>(t.size());
    if (numbered) {
      absl::MutexLock traces_lock(&mu_);
      pending_bytes_ -= bytes;  // those of a whole-file job stay collected
    }
    lock.lock();
    writing_ = false;
    writer_cv_.notify_all();
  }
}

void Tracer::WriteFile(bool numbered, const std::vector<std::string>& traces) {
  const std::string text = TraceFileText(traces);
  if (!numbered) Forget(base_, /*remove=*/false);  // rewritten: replaced below
  MakeRoom(static_cast<int64_t>(text.size()));
  int fd = -1;
  const std::string name = CreateNextFile(numbered, &fd);
  if (name.empty()) return;
  const bool ok = WriteAll(fd, text);
  const int error = errno;
  struct stat st = {};
  ::fstat(fd, &st);
  ::close(fd);
  if (!ok) {
    GEMMSERVE_LOG(ERROR) << "cannot write traces to " << PathOf(name) << ": "
                         << std::strerror(error);
  }
  kept_.push_back({name, Identity(st), static_cast<int64_t>(text.size())});
  kept_bytes_ += static_cast<int64_t>(text.size());
}

std::string Tracer::CreateNextFile(bool numbered, int* fd) {
  // A name planted ahead of the writer costs it one open: after 64 in a
  // row, the file's traces are dropped rather than more names tried.
  constexpr int kTries = 64;
  for (int i = 0; i < (numbered ? kTries : 1); ++i) {
    const std::string name = numbered ? absl::StrCat(base_, ".", next_file_++) : base_;
    *fd = CreateNew(dir_, name);
    if (*fd >= 0) return name;
    if (errno != EEXIST) {
      GEMMSERVE_LOG(ERROR) << "cannot create trace file " << PathOf(name) << ": "
                           << std::strerror(errno);
      return "";
    }
    ++names_passed_;
    if ((names_passed_ & (names_passed_ - 1)) == 0) {  // 1, 2, 4, ...: logged, not flooded
      GEMMSERVE_LOG(WARNING) << "trace file " << PathOf(name) << " is not the server's to "
                             << "replace (a link, another user's file, a file with other "
                             << "names): left as it is, "
                             << (numbered ? "the traces take the next number"
                                          : "the traces are not written")
                             << " (names passed over so far: " << names_passed_ << ")";
    }
  }
  if (numbered) GEMMSERVE_LOG(ERROR) << "traces dropped: " << kTries << " names taken in a row";
  return "";
}

void Tracer::MakeRoom(int64_t bytes) {
  while (!kept_.empty() && (static_cast<int64_t>(kept_.size()) >= bounds_.max_files ||
                            bytes > bounds_.max_bytes - kept_bytes_)) {
    Forget(kept_.front().name, /*remove=*/true);
  }
}

void Tracer::Forget(const std::string& name, bool remove) {
  auto it =
      std::find_if(kept_.begin(), kept_.end(), [&](const KeptFile& f) { return f.name == name; });
  if (it == kept_.end()) return;
  struct stat st;
  // Only the file written, as it was written: a name someone else put there
  // since stays (unlinkat removes a name, never follows it).
  if (remove && ::fstatat(dir_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      Identity(st) == it->identity) {
    ::unlinkat(dir_, name.c_str(), 0);
  }
  kept_bytes_ -= it->bytes;
  kept_.erase(it);
}

void Tracer::Flush() {
  {
    absl::MutexLock lock(&mu_);
    if (!file_.empty()) HandOffLocked(/*numbered=*/global_.log_frequency.value_or(0) > 0);
  }
  std::unique_lock<std::mutex> lock(writer_mu_);
  writer_cv_.wait(lock, [&] { return to_write_.empty() && !writing_; });
}

absl::Status Tracer::Update(const inference::TraceSettingRequest& request, bool model_exists,
                            inference::TraceSettingResponse* response) {
  const std::string& model = request.model_name();
  if (!model.empty() && !model_exists) {
    return absl::NotFoundError(absl::StrCat("unknown model '", ClientText(model), "'"));
  }
  absl::MutexLock lock(&mu_);
  TraceSettings scope = global_;
  if (!model.empty()) {
    auto it = models_.find(model);
    scope = it == models_.end() ? TraceSettings() : it->second;
  }
  for (const auto& [key, value] : request.settings()) {
    GEMMSERVE_RETURN_IF_ERROR(
        Apply(key, value, file_, model.empty() ? &start_ : nullptr, &scope));
  }
  TraceSettings after_global = model.empty() ? scope : global_;
  TraceSettings effective = after_global;
  if (!model.empty()) {
    if (scope.timestamps) effective.timestamps = scope.timestamps;
    if (scope.rate) effective.rate = scope.rate;
    if (scope.count) effective.count = scope.count;
  }
  GEMMSERVE_RETURN_IF_ERROR(CheckSettings(scope, file_));
  GEMMSERVE_RETURN_IF_ERROR(CheckSettings(effective, file_));
  if (after_global.log_frequency != global_.log_frequency && !file_.empty()) {
    // What was collected goes out first, to a numbered file of its own (so
    // that FILE, rewritten by a later scheme of 0, never loses it).
    HandOffLocked(/*numbered=*/true);
  }
  if (model.empty()) {
    global_ = scope;
  } else if (!scope.timestamps && !scope.rate && !scope.count && !scope.log_frequency) {
    models_.erase(model);
    seen_.erase(model);
  } else {
    models_[model] = scope;
  }
  RefreshAnyOnLocked();
  const TraceSettings e = EffectiveLocked(model);
  response->Clear();
  auto& out = *response->mutable_settings();
  out["trace_file"].add_value(file_);
  out["trace_level"].add_value(e.timestamps.value_or(false) ? "TIMESTAMPS" : "OFF");
  out["trace_rate"].add_value(absl::StrCat(e.rate.value_or(1)));
  out["trace_count"].add_value(absl::StrCat(e.count.value_or(-1)));
  out["log_frequency"].add_value(absl::StrCat(e.log_frequency.value_or(0)));
  out["trace_mode"].add_value("triton");
  return absl::OkStatus();
}

}  // namespace gemmserve
