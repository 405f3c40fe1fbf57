#include "server/repository/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/common/client_text.h"
#include "server/common/allocation.h"
#include "server/common/logging.h"
#include "server/common/model_name.h"
#include "server/common/status_macros.h"
#include "server/repository/configured_model.h"
#include "server/repository/model_files.h"
#include "server/repository/onnx_model_loader.h"
#include "server/repository/triton_config.h"
#include "server/repository/warmup_config.h"

namespace gemmserve {
namespace {

// expert_range (a shard) and shards (a router) from the config's parameters,
// their grammar checked before any file is read (ranges against G at load).
absl::Status ShardingFromConfig(const inference::ModelConfig& config, OnnxLoadOptions* options) {
  const auto& parameters = config.parameters();
  if (auto it = parameters.find(kExpertRangeParameter); it != parameters.end()) {
    absl::StatusOr<ExpertRange> range = ParseExpertRange(it->second.string_value());
    if (!range.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("config: parameter '", kExpertRangeParameter,
                                                     "': ", range.status().message()));
    }
    options->expert_range = *range;
  }
  if (auto it = parameters.find(kShardsParameter); it != parameters.end()) {
    if (it->second.string_value().empty()) {
      return absl::InvalidArgumentError("config: parameter 'shards' is empty");
    }
    options->shards = it->second.string_value();
  }
  return absl::OkStatus();
}

namespace fs = std::filesystem;

constexpr char kConfigFile[] = "config.pbtxt";
constexpr char kDefaultModelFile[] = "model.onnx";

// Loads waiting for the loader thread (each may hold uploaded files).
constexpr size_t kMaxQueuedLoads = 16;

// The limits of config.pbtxt's numeric fields (docs/models.md: config.pbtxt).
constexpr uint64_t kMaxQueueDelayUs = 10'000'000;  // 10 s
constexpr uint64_t kMaxBatchRows = uint64_t{1} << 24;
constexpr uint64_t kMaxQueueSize = 1'000'000;
constexpr uint64_t kMaxDefaultTimeoutUs = 3'600'000'000;  // 1 h
constexpr uint32_t kMaxConcurrentBatches = kMaxInstanceCount;  // one limit, triton_config.h
constexpr size_t kMaxModelFilenameLength = 255;

absl::Status OverLimit(const char* field, uint64_t value, uint64_t limit) {
  return absl::InvalidArgumentError(absl::StrCat("config.pbtxt: dynamic_batching.", field, " ",
                                                 value, " is over the limit of ", limit));
}

absl::StatusOr<std::string> ReadConfigText(const ModelFiles& files) {
  GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<ModelFile> file, files.Open("", kConfigFile));
  if (file->size() > kMaxModelConfigBytes) {
    return absl::InvalidArgumentError(absl::StrCat("config.pbtxt: ", file->size(),
                                                   " bytes, over the limit of ", kMaxModelConfigBytes));
  }
  std::string text(static_cast<size_t>(file->size()), '\0');
  GEMMSERVE_RETURN_IF_ERROR(file->Read(0, file->size(), text.data()));
  return text;
}

}  // namespace

absl::StatusOr<std::optional<BatchingOptions>> BatchingFromConfig(
    const inference::ModelConfig& config) {
  if (!config.has_dynamic_batching()) return std::optional<BatchingOptions>();
  const inference::ModelDynamicBatching& db = config.dynamic_batching();
  const inference::ModelQueuePolicy& queue = db.default_queue_policy();
  GEMMSERVE_ASSIGN_OR_RETURN(const uint64_t max_batch_rows,
                             SettingParameter(config, kMaxBatchRowsParameter));
  GEMMSERVE_ASSIGN_OR_RETURN(const int max_concurrent_batches, ConcurrentBatches(config));
  if (db.max_queue_delay_microseconds() > kMaxQueueDelayUs) {
    return OverLimit("max_queue_delay_microseconds", db.max_queue_delay_microseconds(),
                     kMaxQueueDelayUs);
  }
  if (max_batch_rows > kMaxBatchRows) {
    return OverLimit("max_batch_rows", max_batch_rows, kMaxBatchRows);
  }
  if (queue.max_queue_size() > kMaxQueueSize) {
    return OverLimit("max_queue_size", queue.max_queue_size(), kMaxQueueSize);
  }
  if (queue.default_timeout_microseconds() > kMaxDefaultTimeoutUs) {
    return OverLimit("default_timeout_microseconds", queue.default_timeout_microseconds(),
                     kMaxDefaultTimeoutUs);
  }
  if (db.priority_levels() > static_cast<uint64_t>(kMaxPriorityLevels)) {
    return OverLimit("priority_levels", db.priority_levels(), kMaxPriorityLevels);
  }
  if (db.default_priority_level() > db.priority_levels()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.pbtxt: dynamic_batching.default_priority_level ", db.default_priority_level(),
        " is above priority_levels ", db.priority_levels()));
  }
  if (static_cast<uint32_t>(max_concurrent_batches) > kMaxConcurrentBatches) {
    return OverLimit("max_concurrent_batches", max_concurrent_batches, kMaxConcurrentBatches);
  }
  // Every value is now small enough for the types it goes into.
  BatchingOptions o;
  o.max_queue_delay = absl::Microseconds(static_cast<int64_t>(db.max_queue_delay_microseconds()));
  o.max_batch_rows = static_cast<int64_t>(max_batch_rows);
  // With a batch dimension the batcher counts batch items (ConfiguredModel):
  // a batch holds at most max_batch_size of them.
  if (config.max_batch_size() > 0 &&
      (o.max_batch_rows == 0 || o.max_batch_rows > config.max_batch_size())) {
    o.max_batch_rows = config.max_batch_size();
  }
  o.preferred_batch_rows.assign(db.preferred_batch_size().begin(), db.preferred_batch_size().end());
  o.max_queue_size = static_cast<int64_t>(queue.max_queue_size());
  o.default_timeout =
      queue.default_timeout_microseconds() == 0
          ? absl::InfiniteDuration()
          : absl::Microseconds(static_cast<int64_t>(queue.default_timeout_microseconds()));
  o.priority_levels = static_cast<int>(db.priority_levels());
  o.default_priority_level = static_cast<int>(db.default_priority_level());
  o.max_concurrent_batches = max_concurrent_batches;
  return std::optional<BatchingOptions>(o);
}

ModelRepository::ModelRepository(std::string root, InferenceEngine* engine,
                                 std::vector<std::string> builtin,
                                 RemoteExpertsFactory remote_experts)
    : root_(std::move(root)),
      engine_(engine),
      builtin_(std::move(builtin)),
      remote_experts_(std::move(remote_experts)) {
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
    Job job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || !jobs_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (jobs_.empty()) return;  // stopping, and nothing left to answer
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    std::move(job)(/*stopped=*/false);
  }
}

void ModelRepository::LoadAll() {
  if (root_.empty()) return;
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    if (entry.is_directory(ec)) names.push_back(entry.path().filename().string());
  }
  if (ec) {
    GEMMSERVE_LOG(ERROR) << "cannot list the model repository " << root_ << ": " << ec.message();
    return;
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (absl::Status valid = ValidateModelName(name); !valid.ok()) {
      GEMMSERVE_LOG(ERROR) << "model directory skipped: " << valid.message();
      continue;
    }
    absl::Status s = Load(name, {});
    if (s.ok()) {
      GEMMSERVE_LOG(INFO) << "loaded model '" << name << "'";
    } else {
      GEMMSERVE_LOG(ERROR) << "model '" << name << "' not loaded: " << s.message();
    }
  }
}

absl::Status ModelRepository::LoadFrom(const std::string& name, const ModelFiles& files,
                                       const std::optional<std::string>& config_text) {
  inference::ModelConfig config;
  if (config_text) {
    GEMMSERVE_ASSIGN_OR_RETURN(config, ParseLoadConfig(*config_text));
  } else if (files.Exists("", kConfigFile)) {
    GEMMSERVE_ASSIGN_OR_RETURN(std::string text, ReadConfigText(files));
    GEMMSERVE_ASSIGN_OR_RETURN(config, ParseModelConfigFile(text));
  }
  if (!config.name().empty() && config.name() != name) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.pbtxt: name '", ClientText(config.name()),
                     "' differs from the model directory '", name, "'"));
  }
  config.set_name(name);
  GEMMSERVE_RETURN_IF_ERROR(BatchingFromConfig(config).status());  // before any file is read
  const std::string file =
      config.default_model_filename().empty() ? kDefaultModelFile : config.default_model_filename();
  if (!IsPlainRelativePath(file) || file.size() > kMaxModelFilenameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.pbtxt: default_model_filename must be a relative path of at most ",
                     kMaxModelFilenameLength, " characters without '.' or '..' components"));
  }
  const std::vector<int64_t> available = files.Versions(file);
  if (available.empty()) {
    return absl::NotFoundError(
        absl::StrCat("model '", name, "': no numeric version directory holds ", ClientText(file)));
  }
  absl::StatusOr<std::vector<int64_t>> versions = ServedVersions(config, available);
  if (!versions.ok()) {
    return absl::Status(versions.status().code(),
                        absl::StrCat("model '", name, "': ", versions.status().message()));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(std::vector<WarmupSample> warmup,
                             WarmupFromConfig(config, files, engine_->options().max_message_bytes));
  OnnxLoadOptions options;
  GEMMSERVE_ASSIGN_OR_RETURN(options.accuracy_level, AccuracyLevel(config));
  GEMMSERVE_RETURN_IF_ERROR(ShardingFromConfig(config, &options));
  options.remote_experts = remote_experts_;
  options.metrics = engine_->options().metrics;
  std::vector<ModelVersion> served;
  for (int64_t version : *versions) {
    GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                               LoadOnnxModel(name, absl::StrCat(version), files, file, options));
    GEMMSERVE_RETURN_IF_ERROR(CheckParameters(config, *model));
    GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<ConfiguredModel> configured,
                               ConfiguredModel::Make(std::move(model), config, file));
    ModelVersion v;
    v.model = std::move(configured);
    GEMMSERVE_ASSIGN_OR_RETURN(v.batching, BatchingFromConfig(config));  // each its own batcher
    served.push_back(std::move(v));
  }
  // READY only once every warmup sample ran on every version (what was
  // served serves meanwhile); a sample a version refuses fails the load.
  return engine_->InstallVersions(name, std::move(served), std::move(warmup),
                                  [this] { return loads_stopped(); });
}

absl::Status ModelRepository::LoadOrThrow(const std::string& name,
                                          const ModelLoadRequest& request) {
  if (!request.files.empty()) {
    // Triton's convention: uploaded files come with their config. They are
    // read from memory: nothing is written to disk.
    if (!request.config) {
      return absl::InvalidArgumentError("parameter 'config' is required with 'file:' parameters");
    }
    GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<ModelFiles> files,
                               ModelFiles::InMemory(request.files));
    return LoadFrom(name, *files, request.config);
  }
  GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<ModelFiles> files,
                             ModelFiles::InDirectory(root_, name));
  return LoadFrom(name, *files, request.config);
}

absl::Status ModelRepository::Load(const std::string& name, const ModelLoadRequest& request) {
  GEMMSERVE_RETURN_IF_ERROR(ValidateModelName(name));
  if (std::find(builtin_.begin(), builtin_.end(), name) != builtin_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' is a built-in model; it is always loaded"));
  }
  std::error_code ec;
  if (request.files.empty() && (root_.empty() || !fs::is_directory(fs::path(root_) / name, ec))) {
    return absl::NotFoundError(absl::StrCat("no model '", name, "' in the model repository"));
  }
  absl::MutexLock serial(&load_mu_);
  if (loads_stopped()) return Stopped();  // the model stays as it was
  engine_->MarkLoading(name);  // a model being served keeps serving meanwhile
  absl::Status status;
  try {
    status =
        CatchAllocationFailure("loading the model", [&] { return LoadOrThrow(name, request); });
  } catch (const std::exception& e) {
    GEMMSERVE_LOG(ERROR) << "loading model '" << name << "' failed: " << e.what();
    status = absl::InternalError("loading the model failed; see the server log");
  }
  // A model that was serving keeps serving its previous version.
  if (!status.ok()) engine_->MarkFailed(name, status.message());
  if (!status.ok() && loads_stopped()) return Stopped();
  return status;
}

absl::Status ModelRepository::TryEnqueue(Job& job) {
  absl::MutexLock lock(&mu_);
  // StopLoads sets the mark before it empties the queue: a job queued after
  // that would wait for the load in progress.
  if (loads_stopped()) return Stopped();
  if (jobs_.size() >= kMaxQueuedLoads) return TooManyWaiting();
  jobs_.push_back(std::move(job));
  return absl::OkStatus();
}

absl::Status ModelRepository::Stopped() {
  return absl::UnavailableError(
      "the server is shutting down: no model is loaded or unloaded any more; retry on another "
      "replica");
}

void ModelRepository::StopLoads() {
  loads_stopped_.store(true, std::memory_order_relaxed);
  // Those queued are answered now, not after the load in progress stops.
  std::deque<Job> queued;
  {
    absl::MutexLock lock(&mu_);
    queued.swap(jobs_);
  }
  for (Job& job : queued) std::move(job)(/*stopped=*/true);
}

bool ModelRepository::loads_stopped() const {
  return loads_stopped_.load(std::memory_order_relaxed);
}

absl::Status ModelRepository::TooManyWaiting() {
  return absl::UnavailableError(absl::StrCat("too many model loads and unloads waiting (",
                                             kMaxQueuedLoads, "); retry later"));
}

void ModelRepository::LoadAsync(std::string name, ModelLoadRequest request,
                                absl::AnyInvocable<void(absl::Status) &&> done) {
  if (loads_stopped()) return std::move(done)(Stopped());
  auto shared = std::make_shared<absl::AnyInvocable<void(absl::Status) &&>>(std::move(done));
  Job job = [this, name = std::move(name), request = std::move(request),
             shared](bool stopped) mutable {
    std::move (*shared)(stopped ? Stopped() : Load(name, request));
  };
  if (absl::Status refused = TryEnqueue(job); !refused.ok()) std::move (*shared)(refused);
}

absl::Status ModelRepository::CheckUnloadable(const std::string& name) const {
  GEMMSERVE_RETURN_IF_ERROR(ValidateModelName(name));
  if (std::find(builtin_.begin(), builtin_.end(), name) != builtin_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' is a built-in model and cannot be unloaded"));
  }
  for (const ModelStatus& s : engine_->States()) {
    if (s.name == name) return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("unknown model '", name, "'"));
}

void ModelRepository::UnloadAsync(std::string name,
                                  absl::AnyInvocable<void(absl::Status) &&> done) {
  if (absl::Status s = CheckUnloadable(name); !s.ok()) return std::move(done)(s);
  if (loads_stopped()) return std::move(done)(Stopped());
  auto shared = std::make_shared<absl::AnyInvocable<void(absl::Status) &&>>(std::move(done));
  Job job = [this, name = std::move(name), shared](bool stopped) mutable {
    std::move (*shared)(stopped ? Stopped() : Unload(name));
  };
  if (absl::Status refused = TryEnqueue(job); !refused.ok()) std::move (*shared)(refused);
}

absl::Status ModelRepository::Unload(const std::string& name) {
  GEMMSERVE_RETURN_IF_ERROR(CheckUnloadable(name));
  absl::MutexLock serial(&load_mu_);
  if (loads_stopped()) return Stopped();
  // A model of the repository's directory stays known (UNAVAILABLE,
  // "unloaded"); an uploaded one, or a failed load's name, leaves nothing.
  std::error_code ec;
  const bool in_directory = !root_.empty() && fs::is_directory(fs::path(root_) / name, ec);
  absl::Status removed = in_directory ? engine_->Remove(name) : engine_->Forget(name);
  if (!removed.ok()) return absl::NotFoundError(absl::StrCat("unknown model '", name, "'"));
  return absl::OkStatus();
}

std::vector<ModelStatus> ModelRepository::Index() const {
  std::vector<ModelStatus> out = engine_->States();
  // Repository directories not loaded (yet) are listed too, as Triton does.
  if (!root_.empty()) {
    std::set<std::string> known;
    for (const ModelStatus& s : out) known.insert(s.name);
    std::error_code ec;
    for (const auto& dir : fs::directory_iterator(root_, ec)) {
      const std::string name = dir.path().filename().string();
      if (dir.is_directory(ec) && ValidateModelName(name).ok() && !known.count(name)) {
        out.push_back(ModelStatus{name, "", ModelState::kUnloaded, "not loaded"});
      }
    }
  }
  // Stable: a model's versions stay in the engine's ascending order.
  std::stable_sort(out.begin(), out.end(),
                   [](const ModelStatus& a, const ModelStatus& b) { return a.name < b.name; });
  return out;
}

}  // namespace gemmserve
