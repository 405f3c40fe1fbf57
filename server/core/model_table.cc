// InferenceEngine's model table: installing (with warmup), removing and
// finding served models, and where each name stands. Admission, accounting
// and dispatch are in inference_engine.cc.
#include "server/core/inference_engine.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <new>
#include <stdexcept>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/common/allocation.h"
#include "server/common/client_text.h"
#include "server/common/logging.h"
#include "server/common/model_name.h"
#include "server/common/status_macros.h"
#include "server/core/input_binding.h"
#include "server/core/overload.h"
#include "server/tensor/datatype.h"
#include "server/tensor/shape.h"

namespace gemmserve {

namespace {

// A version's number: its name as a number (versions are directory names of
// digits); 0 for a model whose version is not one.
int64_t VersionKey(const ModelMetadata& metadata) {
  int64_t v = 0;
  if (metadata.versions.empty() || !absl::SimpleAtoi(metadata.versions.front(), &v)) return 0;
  return v;
}

}  // namespace

void InferenceEngine::Install(std::unique_ptr<Model> model,
                              std::optional<BatchingOptions> batching) {
  absl::Status installed = Install(std::move(model), batching, {});
  (void)installed;  // without warmup, always OK
}

absl::Status InferenceEngine::Install(std::unique_ptr<Model> model,
                                      std::optional<BatchingOptions> batching,
                                      std::vector<WarmupSample> warmup,
                                      std::function<bool()> stopped) {
  const std::string name = model->metadata().name;
  std::vector<ModelVersion> versions;
  versions.push_back(ModelVersion{std::move(model), std::move(batching)});
  return InstallVersions(name, std::move(versions), std::move(warmup), std::move(stopped));
}

std::shared_ptr<ServedModel> InferenceEngine::MakeServed(
    std::unique_ptr<Model> model, const std::optional<BatchingOptions>& batching) {
  std::shared_ptr<ModelMetrics> metrics =
      options_.metrics ? options_.metrics->ForModel(model->metadata().name) : nullptr;
  auto served = std::make_shared<ServedModel>(std::move(model), batching, std::move(metrics));
  if (batching) {
    std::weak_ptr<ServedModel> weak = served;
    // The batcher's executor; it also answers the batch if it cannot be handed on.
    auto batcher = std::make_shared<DynamicBatcher>(
        *batching, clock_,
        [this, weak](DynamicBatcher::Batch batch) { ScheduleBatch(weak, std::move(batch)); },
        [this] { timer_.Wake(); });
    timer_.Register(batcher);
    served->set_batcher(std::move(batcher));
  }
  return served;
}

absl::Status InferenceEngine::InstallVersions(const std::string& name,
                                              std::vector<ModelVersion> versions,
                                              std::vector<WarmupSample> warmup,
                                              std::function<bool()> stopped) {
  std::map<int64_t, std::shared_ptr<ServedModel>> ready;
  for (ModelVersion& v : versions) {
    const int64_t number = VersionKey(v.model->metadata());
    if (ready.count(number) != 0) {
      for (auto& [n, made] : ready) CloseQueue(made.get());
      return absl::InvalidArgumentError(
          absl::StrCat("model '", name, "': version ", number, " given twice"));
    }
    ready[number] = MakeServed(std::move(v.model), v.batching);
  }
  if (ready.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("model '", name, "': no version to serve"));
  }
  const absl::Time deadline = clock_->Now() + kWarmupDeadline;  // the whole load's
  for (auto& [number, served] : ready) {
    if (warmup.empty()) break;
    if (absl::Status warmed = Warm(served, warmup, deadline, stopped); !warmed.ok()) {
      for (auto& [n, made] : ready) CloseQueue(made.get());
      return warmed;
    }
  }
  // What each version ran, for its statistics' readers; the bytes go.
  for (WarmupSample& sample : warmup) {
    for (WarmupInput& input : sample.inputs) std::string().swap(input.bytes);
  }
  for (auto& [number, served] : ready) served->set_warmup(warmup);
  std::map<int64_t, std::shared_ptr<ServedModel>> old;
  {
    absl::MutexLock lock(&mu_);
    Entry& entry = models_[name];
    old.swap(entry.served);
    entry.status = ModelStatus{name, "", ModelState::kReady, ""};
    entry.served = std::move(ready);
  }
  // Their queues still run, on the old weights.
  for (auto& [number, served] : old) CloseQueue(served.get());
  return absl::OkStatus();
}

void InferenceEngine::CloseQueue(ServedModel* served) {
  if (served->batcher() == nullptr) return;
  served->batcher()->Close();
  served->batcher()->Poll();
}

void InferenceEngine::MarkLoading(absl::string_view name) {
  absl::MutexLock lock(&mu_);
  Entry& entry = models_[std::string(name)];
  if (!entry.served.empty()) return;
  entry.status.name = std::string(name);
  entry.status.state = ModelState::kLoading;
  entry.status.reason.clear();
}

void InferenceEngine::MarkFailed(absl::string_view name, absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  Entry& entry = models_[std::string(name)];
  if (!entry.served.empty()) return;
  entry.status.name = std::string(name);
  entry.status.state = ModelState::kFailed;
  entry.status.reason = std::string(reason);
}

absl::Status InferenceEngine::Remove(absl::string_view name) {
  return Retire(name, /*forget=*/false);
}

absl::Status InferenceEngine::Forget(absl::string_view name) {
  return Retire(name, /*forget=*/true);
}

absl::Status InferenceEngine::Retire(absl::string_view name, bool forget) {
  std::map<int64_t, std::shared_ptr<ServedModel>> old;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(name);
    if (it == models_.end()) {
      return absl::NotFoundError(absl::StrCat("model '", ClientText(name), "' is not known"));
    }
    old.swap(it->second.served);
    if (forget) {
      models_.erase(it);
    } else {
      it->second.status.state = ModelState::kUnloaded;
      it->second.status.reason = "unloaded";
    }
  }
  for (auto& [number, served] : old) CloseQueue(served.get());
  return absl::OkStatus();
}

std::vector<ModelStatus> InferenceEngine::States() const {
  absl::MutexLock lock(&mu_);
  std::vector<ModelStatus> out;
  for (const auto& [name, entry] : models_) {
    if (entry.served.empty()) out.push_back(entry.status);
    for (const auto& [number, served] : entry.served) {
      out.push_back(ModelStatus{name, served->metadata().versions.front(), ModelState::kReady, ""});
    }
  }
  return out;
}

absl::StatusOr<std::shared_ptr<ServedModel>> InferenceEngine::Find(
    absl::string_view name, absl::string_view version) const {
  GEMMSERVE_RETURN_IF_ERROR(ValidateModelName(name));
  absl::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown model '", ClientText(name), "'"));
  }
  const Entry& entry = it->second;
  if (entry.served.empty()) return NotServing(entry.status);
  if (version.empty()) return entry.served.rbegin()->second;
  int64_t number = 0;
  auto found = absl::SimpleAtoi(version, &number) ? entry.served.find(number) : entry.served.end();
  if (found != entry.served.end() && found->second->metadata().versions.front() == version) {
    return found->second;
  }
  std::vector<std::string> served;
  for (const auto& [n, model] : entry.served) served.push_back(model->metadata().versions.front());
  return absl::NotFoundError(absl::StrCat("model '", entry.status.name, "' has no version '",
                                          ClientText(version), "' (it serves ",
                                          absl::StrJoin(served, ", "), ")"));
}

absl::Status InferenceEngine::NotServing(const ModelStatus& status) {
  switch (status.state) {
    case ModelState::kLoading:
      return absl::UnavailableError(
          absl::StrCat("model '", status.name, "' is loading; retry later"));
    case ModelState::kFailed:
      return absl::UnavailableError(
          absl::StrCat("model '", status.name, "' is not available (failed to load); retry later"));
    case ModelState::kReady:  // not with no version served; as unloaded
    case ModelState::kUnloaded: break;
  }
  return absl::UnavailableError(
      absl::StrCat("model '", status.name, "' is not available (unloaded); retry later"));
}

std::vector<std::string> InferenceEngine::Versions(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  auto it = models_.find(name);
  if (it == models_.end()) return out;
  for (const auto& [n, model] : it->second.served)
    out.push_back(model->metadata().versions.front());
  return out;
}

absl::StatusOr<std::shared_ptr<const ServedModel>> InferenceEngine::FindModel(
    absl::string_view name, absl::string_view version) const {
  GEMMSERVE_ASSIGN_OR_RETURN(std::shared_ptr<ServedModel> served, Find(name, version));
  return std::shared_ptr<const ServedModel>(std::move(served));
}

std::shared_ptr<ModelMetrics> InferenceEngine::MetricsFor(absl::string_view model_name) const {
  if (options_.metrics == nullptr) return nullptr;
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model_name);
  return it != models_.end() && !it->second.served.empty()
             ? it->second.served.rbegin()->second->shared_metrics()
             : options_.metrics->Unknown();
}

std::vector<std::shared_ptr<const ServedModel>> InferenceEngine::models() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<const ServedModel>> out;
  for (const auto& [name, entry] : models_) {
    for (const auto& [number, served] : entry.served) out.push_back(served);
  }
  return out;
}

}  // namespace gemmserve
