// ModelRepository: Triton's model repository layout, loaded into the engine.
//
//   DIR/<model>/config.pbtxt        optional, Triton's ModelConfig (triton_config.h)
//   DIR/<model>/<version>/model.onnx  (version_policy chooses; default the highest)
//
// Models load at start-up (a model that fails is listed UNAVAILABLE with its
// reason; the server runs on) and on request: Load replaces a served model
// atomically (requests in flight finish on the old weights), Unload removes
// it. Loads run one at a time on the repository's own thread, never on the
// caller's: LoadAsync returns at once and reports through its callback.
//
// A load may bring its own config text and files (Triton's RepositoryModelLoad
// parameters "config" and "file:<path>"): they are loaded from memory, with
// the same path rules as a directory (ModelFiles). Model names follow
// ValidateModelName everywhere; config.pbtxt's numeric fields are
// range-checked (BatchingFromConfig). Unloading a model removes its index
// entry; a model of the repository's directory is then listed as not loaded.
//
//   ModelRepository repo("/models", &engine);
//   repo.LoadAll();
//   repo.LoadAsync("moe", {}, [](absl::Status s) { ... });
#ifndef GEMMSERVE_SERVER_REPOSITORY_MODEL_REPOSITORY_H_
#define GEMMSERVE_SERVER_REPOSITORY_MODEL_REPOSITORY_H_

#include <atomic>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "model_config.pb.h"
#include "server/core/dynamic_batcher.h"
#include "server/core/inference_engine.h"
#include "server/models/sharded_layer.h"
#include "server/repository/model_files.h"
#include "server/repository/triton_config.h"

namespace gemmserve {

struct ModelLoadRequest {
  // config.pbtxt text, or Triton's JSON form of a ModelConfig
  // (ParseLoadConfig, triton_config.h).
  std::optional<std::string> config;
  std::map<std::string, std::string> files;  // path inside the model directory -> bytes
};

// The batcher options of a config; nullopt without a dynamic_batching block.
// INVALID_ARGUMENT naming the field for a value over its limit (docs/models.md).
absl::StatusOr<std::optional<BatchingOptions>> BatchingFromConfig(
    const inference::ModelConfig& config);

class ModelRepository {
 public:
  // `root` may be empty: no repository, only the built-in models.
  // `remote_experts` reaches the shards of a sharded layer's router (a
  // config with parameter 'shards'); without it such a model is refused.
  ModelRepository(std::string root, InferenceEngine* engine, std::vector<std::string> builtin,
                  RemoteExpertsFactory remote_experts = nullptr);
  ~ModelRepository();

  // Loads every model directory under the root, one by one; failures are
  // recorded (and logged), not fatal.
  void LoadAll();

  // NOT_FOUND: no such model directory; INVALID_ARGUMENT: a model file or
  // config error (the previous version, if any, keeps serving).
  absl::Status Load(const std::string& name, const ModelLoadRequest& request);
  // Load on the repository's thread, after the loads and unloads queued
  // before; UNAVAILABLE at once (through `done`) when too many wait.
  void LoadAsync(std::string name, ModelLoadRequest request,
                 absl::AnyInvocable<void(absl::Status) &&> done);
  // Stops serving `name`: INVALID_ARGUMENT for a built-in model or a name no
  // model can have, NOT_FOUND for a name the server does not know. Unload
  // waits for a load in progress; UnloadAsync never waits: it answers those
  // errors at once and queues the unload behind the loads like LoadAsync, so
  // front ends call it from their I/O threads.
  absl::Status Unload(const std::string& name);
  void UnloadAsync(std::string name, absl::AnyInvocable<void(absl::Status) &&> done);

  // Shutdown: from now on no load or unload runs. The one running stops its
  // warmup between runs (InferenceEngine::Install) and fails; those queued,
  // and any asked for later, fail at once. Each fails with UNAVAILABLE, and
  // every model stays as it was. Idempotent; any thread.
  void StopLoads();

  // Every model known: built in, in the repository, or loaded by request,
  // by name. Where each stands is the engine's (InferenceEngine::States);
  // directories of the repository it does not know are kUnloaded, "not
  // loaded".
  std::vector<ModelStatus> Index() const;

 private:
  void WorkerLoop();
  // A queued load or unload: run with `stopped` false on the worker, or with
  // true by StopLoads, which answers it Stopped() without running it.
  using Job = absl::AnyInvocable<void(bool stopped) &&>;
  // Queues `job` (taking it); else the refusal to answer it with: loads
  // stopped, or kMaxQueuedLoads jobs waiting already.
  absl::Status TryEnqueue(Job& job);
  static absl::Status TooManyWaiting();
  static absl::Status Stopped();
  bool loads_stopped() const;
  absl::Status CheckUnloadable(const std::string& name) const;
  absl::Status LoadOrThrow(const std::string& name, const ModelLoadRequest& request);
  absl::Status LoadFrom(const std::string& name, const ModelFiles& files,
                        const std::optional<std::string>& config_text);

  const std::string root_;
  InferenceEngine* const engine_;
  const std::vector<std::string> builtin_;
  const RemoteExpertsFactory remote_experts_;

  absl::Mutex load_mu_;  // one load or unload at a time
  mutable absl::Mutex mu_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> loads_stopped_{false};  // StopLoads
  std::thread worker_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_REPOSITORY_MODEL_REPOSITORY_H_
