#include "server/repository/model_repository.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/common/client_text.h"
#include "server/common/logging.h"
#include "server/common/status_macros.h"
#include "server/repository/onnx_model_loader.h"

namespace gemmserve {
namespace {

namespace fs = std::filesystem;

constexpr char kConfigFile[] = "config.pbtxt";
constexpr char kDefaultModelFile[] = "model.onnx";

class CollectErrors final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) first_ = absl::StrCat("line ", line + 1, ", column ", column + 1, ": ", message);
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

// A model or file name from a client: one plain path component or a
// relative path without "..".
bool SafeRelativePath(const std::string& path) {
  if (path.empty()) return false;
  const fs::path p(path);
  if (p.is_absolute()) return false;
  for (const auto& part : p) {
    if (part == ".." || part == "." || part.empty()) return false;
  }
  return true;
}

bool SafeModelName(const std::string& name) {
  return SafeRelativePath(name) && name.find('/') == std::string::npos;
}

// The highest numeric version directory holding `file`.
std::optional<std::string> LatestVersion(const fs::path& model_dir, const std::string& file) {
  std::optional<int64_t> best;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(model_dir, ec)) {
    int64_t v;
    if (!entry.is_directory() || !absl::SimpleAtoi(entry.path().filename().string(), &v) || v < 0) {
      continue;
    }
    if (!fs::exists(entry.path() / file)) continue;
    if (!best || v > *best) best = v;
  }
  if (!best) return std::nullopt;
  return absl::StrCat(*best);
}

absl::StatusOr<std::string> ReadText(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read");
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

absl::StatusOr<config::ModelConfigFile> ParseModelConfigFile(absl::string_view text) {
  config::ModelConfigFile config;
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &config)) {
    return absl::InvalidArgumentError(absl::StrCat("config.pbtxt: ", errors.first()));
  }
  return config;
}

absl::StatusOr<std::optional<BatchingOptions>> BatchingFromConfig(
    const config::ModelConfigFile& config) {
  if (!config.has_dynamic_batching()) return std::optional<BatchingOptions>();
  const config::DynamicBatching& db = config.dynamic_batching();
  constexpr uint64_t kMax = uint64_t{1} << 40;
  if (db.max_queue_delay_microseconds() > kMax || db.default_timeout_microseconds() > kMax ||
      db.max_batch_rows() > kMax || db.max_queue_size() > kMax) {
    return absl::InvalidArgumentError("config.pbtxt: dynamic_batching value out of range");
  }
  if (db.default_priority_level() > db.priority_levels()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.pbtxt: default_priority_level ", db.default_priority_level(),
        " is above priority_levels ", db.priority_levels()));
  }
  BatchingOptions o;
  o.max_queue_delay = absl::Microseconds(static_cast<int64_t>(db.max_queue_delay_microseconds()));
  o.max_batch_rows = static_cast<int64_t>(db.max_batch_rows());
  o.max_queue_size = static_cast<int64_t>(db.max_queue_size());
  o.default_timeout = db.default_timeout_microseconds() == 0
                          ? absl::InfiniteDuration()
                          : absl::Microseconds(static_cast<int64_t>(db.default_timeout_microseconds()));
  o.priority_levels = static_cast<int>(db.priority_levels());
  o.default_priority_level = static_cast<int>(db.default_priority_level());
  if (db.max_concurrent_batches() > 64) {
    return absl::InvalidArgumentError("config.pbtxt: max_concurrent_batches above 64");
  }
  o.max_concurrent_batches = std::max<int>(1, static_cast<int>(db.max_concurrent_batches()));
  return std::optional<BatchingOptions>(o);
}

ModelRepository::ModelRepository(std::string root, InferenceEngine* engine,
                                 std::vector<std::string> builtin)
    : root_(std::move(root)), engine_(engine), builtin_(std::move(builtin)) {
  absl::MutexLock lock(&mu_);
  for (const std::string& name : builtin_) {
    index_[name] = ModelIndexEntry{name, "1", "READY", ""};
  }
  worker_ = std::thread([this] { WorkerLoop(); });
}

ModelRepository::~ModelRepository() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  worker_.join();
}

void ModelRepository::WorkerLoop() {
  for (;;) {
    absl::AnyInvocable<void() &&> job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || !jobs_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (jobs_.empty()) return;  // stopping, and nothing left to answer
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    std::move(job)();
  }
}

void ModelRepository::LoadAll() {
  if (root_.empty()) return;
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  if (ec) {
    GEMMSERVE_LOG(ERROR) << "cannot list the model repository " << root_ << ": " << ec.message();
    return;
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    absl::Status s = Load(name, {});
    if (s.ok()) {
      GEMMSERVE_LOG(INFO) << "loaded model '" << name << "'";
    } else {
      GEMMSERVE_LOG(ERROR) << "model '" << name << "' not loaded: " << s.message();
    }
  }
}

void ModelRepository::Record(const std::string& name, ModelIndexEntry entry,
                             std::optional<config::ModelConfigFile> config) {
  absl::MutexLock lock(&mu_);
  index_[name] = std::move(entry);
  if (config) configs_[name] = *std::move(config);
}

absl::Status ModelRepository::LoadFrom(const std::string& name, const std::string& model_dir,
                                       const std::optional<std::string>& config_text) {
  config::ModelConfigFile config;
  if (config_text) {
    GEMMSERVE_ASSIGN_OR_RETURN(config, ParseModelConfigFile(*config_text));
  } else if (fs::exists(fs::path(model_dir) / kConfigFile)) {
    GEMMSERVE_ASSIGN_OR_RETURN(std::string text, ReadText(fs::path(model_dir) / kConfigFile));
    GEMMSERVE_ASSIGN_OR_RETURN(config, ParseModelConfigFile(text));
  }
  if (!config.name().empty() && config.name() != name) {
    return absl::InvalidArgumentError(absl::StrCat("config.pbtxt: name '", ClientText(config.name()),
                                                   "' differs from the model directory '", name,
                                                   "'"));
  }
  config.set_name(name);
  GEMMSERVE_ASSIGN_OR_RETURN(std::optional<BatchingOptions> batching, BatchingFromConfig(config));
  const std::string file =
      config.default_model_filename().empty() ? kDefaultModelFile : config.default_model_filename();
  if (!SafeRelativePath(file)) {
    return absl::InvalidArgumentError("config.pbtxt: default_model_filename must be a relative path");
  }
  std::optional<std::string> version = LatestVersion(model_dir, file);
  if (!version) {
    return absl::NotFoundError(absl::StrCat("model '", name, "': no numeric version directory holds ",
                                            file));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(
      std::unique_ptr<Model> model,
      LoadOnnxModel(name, *version, (fs::path(model_dir) / *version).string(), file));
  engine_->Install(std::move(model), batching);
  Record(name, ModelIndexEntry{name, *version, "READY", ""}, std::move(config));
  return absl::OkStatus();
}

absl::Status ModelRepository::Load(const std::string& name, const ModelLoadRequest& request) {
  if (!SafeModelName(name)) {
    return absl::InvalidArgumentError("model name must be one plain path component");
  }
  if (std::find(builtin_.begin(), builtin_.end(), name) != builtin_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' is a built-in model; it is always loaded"));
  }
  if (request.files.empty() &&
      (root_.empty() || !fs::is_directory(fs::path(root_) / name))) {
    return absl::NotFoundError(absl::StrCat("no model '", ClientText(name),
                                            "' in the model repository"));
  }
  absl::MutexLock serial(&load_mu_);
  {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(name);
    if (it == index_.end() || it->second.state != "READY") {
      index_[name] = ModelIndexEntry{name, it == index_.end() ? "" : it->second.version, "LOADING", ""};
      engine_->MarkUnavailable(name, "loading");
    }
  }
  absl::Status status;
  if (!request.files.empty()) {
    // Triton's convention: uploaded files come with their config.
    if (!request.config) {
      status = absl::InvalidArgumentError("parameter 'config' is required with 'file:' parameters");
    }
    std::string tmp = (fs::temp_directory_path() / "gemmserve-load-XXXXXX").string();
    if (status.ok() && ::mkdtemp(tmp.data()) == nullptr) {
      status = absl::InternalError("cannot create a temporary directory for the upload");
    }
    if (status.ok()) {
      const fs::path dir = fs::path(tmp) / name;
      for (const auto& [path, bytes] : request.files) {
        if (!SafeRelativePath(path)) {
          status = absl::InvalidArgumentError(absl::StrCat(
              "parameter 'file:", ClientText(path), "': must be a relative path without '..'"));
          break;
        }
        std::error_code ec;
        fs::create_directories((dir / path).parent_path(), ec);
        std::ofstream out(dir / path, std::ios::binary);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        if (!out) {
          status = absl::InternalError("cannot write an uploaded file to the temporary directory");
          break;
        }
      }
      if (status.ok()) status = LoadFrom(name, dir.string(), request.config);
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
  } else {
    status = LoadFrom(name, (fs::path(root_) / name).string(), request.config);
  }
  if (!status.ok()) {
    absl::MutexLock lock(&mu_);
    ModelIndexEntry& e = index_[name];
    e.name = name;
    // A model that was serving keeps serving its previous version.
    if (!engine_->FindModel(name, "").ok()) {
      e.state = "UNAVAILABLE";
      e.reason = std::string(status.message());
      engine_->MarkUnavailable(name, "failed to load");
    } else {
      e.state = "READY";
    }
  }
  return status;
}

void ModelRepository::LoadAsync(std::string name, ModelLoadRequest request,
                                absl::AnyInvocable<void(absl::Status) &&> done) {
  absl::MutexLock lock(&mu_);
  jobs_.push_back([this, name = std::move(name), request = std::move(request),
                   done = std::move(done)]() mutable { std::move(done)(Load(name, request)); });
}

absl::Status ModelRepository::Unload(const std::string& name) {
  if (std::find(builtin_.begin(), builtin_.end(), name) != builtin_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' is a built-in model and cannot be unloaded"));
  }
  absl::MutexLock serial(&load_mu_);
  absl::Status removed = engine_->Remove(name);
  absl::MutexLock lock(&mu_);
  auto it = index_.find(name);
  if (!removed.ok() && it == index_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown model '", ClientText(name), "'"));
  }
  if (it != index_.end()) {
    it->second.state = "UNAVAILABLE";
    it->second.reason = "unloaded";
  }
  return absl::OkStatus();
}

std::vector<ModelIndexEntry> ModelRepository::Index() const {
  std::vector<ModelIndexEntry> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, entry] : index_) out.push_back(entry);
  // Repository directories not loaded (yet) are listed too, as Triton does.
  if (!root_.empty()) {
    std::error_code ec;
    for (const auto& dir : fs::directory_iterator(root_, ec)) {
      const std::string name = dir.path().filename().string();
      if (dir.is_directory() && index_.find(name) == index_.end()) {
        out.push_back(ModelIndexEntry{name, "", "UNAVAILABLE", "not loaded"});
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ModelIndexEntry& a, const ModelIndexEntry& b) { return a.name < b.name; });
  return out;
}

std::optional<config::ModelConfigFile> ModelRepository::Config(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = configs_.find(name);
  if (it == configs_.end()) return std::nullopt;
  return it->second;
}

}  // namespace gemmserve
