#include "server/serving/tracer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
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

// Writes `traces` to `path` as a JSON array; false (logged) on failure.
bool WriteTraces(const std::string& path, const std::vector<std::string>& traces) {
  std::string text = "[";
  for (size_t i = 0; i < traces.size(); ++i) absl::StrAppend(&text, i ? ",\n" : "", traces[i]);
  text += "]\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  const int error = errno;
  if (fd >= 0) ::close(fd);
  if (!ok) GEMMSERVE_LOG(ERROR) << "cannot write traces to " << path << ": " << strerror(error);
  return ok;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tracer>> Tracer::Create(std::string trace_file,
                                                       TraceSettings initial) {
  GEMMSERVE_RETURN_IF_ERROR(CheckSettings(initial, trace_file));
  if (!initial.timestamps || !initial.rate || !initial.count || !initial.log_frequency) {
    return absl::InvalidArgumentError("every initial trace setting must be given");
  }
  std::unique_ptr<Tracer> t(new Tracer);
  t->file_ = std::move(trace_file);
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
  absl::MutexLock lock(&mu_);
  if (pending_bytes_ + static_cast<int64_t>(json.size()) > kMaxPendingTraceBytes) {
    ++dropped_;
    if ((dropped_ & (dropped_ - 1)) == 0) {  // 1, 2, 4, ...: logged, not flooded
      GEMMSERVE_LOG(WARNING) << dropped_ << " traces dropped: more than "
                             << kMaxPendingTraceBytes << " bytes wait to be written "
                             << "(raise log_frequency's rate of writing, or trace fewer)";
    }
    return;
  }
  pending_bytes_ += static_cast<int64_t>(json.size());
  collected_.push_back(std::move(json));
  const int64_t frequency = global_.log_frequency.value_or(0);
  if (frequency > 0 && static_cast<int64_t>(collected_.size()) >= frequency) {
    HandOffLocked(/*numbered=*/true);
  }
}

void Tracer::HandOffLocked(bool numbered) {
  if (collected_.empty()) return;
  std::pair<std::string, std::vector<std::string>> job;
  if (numbered) {
    job = {absl::StrCat(file_, ".", next_file_++), std::move(collected_)};
    collected_.clear();
  } else {
    job = {file_, collected_};  // the whole file again: its traces stay collected
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
    auto [path, traces] = std::move(to_write_.front());
    to_write_.pop_front();
    writing_ = true;
    lock.unlock();
    WriteTraces(path, traces);
    const bool rotated = path != file_;
    int64_t bytes = 0;
    for (const std::string& t : traces) bytes += static_cast<int64_t>(t.size());
    if (rotated) {
      absl::MutexLock traces_lock(&mu_);
      pending_bytes_ -= bytes;  // those of a whole-file job stay collected
    }
    lock.lock();
    writing_ = false;
    writer_cv_.notify_all();
  }
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
