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
#include "absl/strings/str_cat.h"
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

void InferenceEngine::Install(std::unique_ptr<Model> model,
                              std::optional<BatchingOptions> batching) {
  absl::Status installed = Install(std::move(model), batching, {});
  (void)installed;  // without warmup, always OK
}

absl::Status InferenceEngine::Install(std::unique_ptr<Model> model,
                                      std::optional<BatchingOptions> batching,
                                      std::vector<WarmupSample> warmup,
                                      std::function<bool()> stopped) {
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
  if (!warmup.empty()) {
    if (absl::Status warmed = Warm(served, warmup, stopped); !warmed.ok()) {
      CloseQueue(served.get());
      return warmed;
    }
    for (WarmupSample& sample : warmup) {
      for (WarmupInput& input : sample.inputs) std::string().swap(input.bytes);
    }
    served->set_warmup(std::move(warmup));
  }
  std::shared_ptr<ServedModel> old;
  {
    absl::MutexLock lock(&mu_);
    const ModelMetadata& md = served->metadata();
    Entry& entry = models_[md.name];
    old = std::move(entry.served);
    entry.status = ModelStatus{md.name, md.versions.front(), ModelState::kReady, ""};
    entry.served = std::move(served);
  }
  if (old) CloseQueue(old.get());  // its queue still runs, on the old weights
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
  if (entry.served) return;
  entry.status.name = std::string(name);
  entry.status.state = ModelState::kLoading;
  entry.status.reason.clear();
}

void InferenceEngine::MarkFailed(absl::string_view name, absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  Entry& entry = models_[std::string(name)];
  if (entry.served) return;
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
  std::shared_ptr<ServedModel> old;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(name);
    if (it == models_.end()) {
      return absl::NotFoundError(absl::StrCat("model '", ClientText(name), "' is not known"));
    }
    old = std::move(it->second.served);
    if (forget) {
      models_.erase(it);
    } else {
      it->second.status.state = ModelState::kUnloaded;
      it->second.status.reason = "unloaded";
    }
  }
  if (old) CloseQueue(old.get());
  return absl::OkStatus();
}

std::vector<ModelStatus> InferenceEngine::States() const {
  absl::MutexLock lock(&mu_);
  std::vector<ModelStatus> out;
  for (const auto& [name, entry] : models_) out.push_back(entry.status);
  return out;
}

absl::StatusOr<std::shared_ptr<ServedModel>> InferenceEngine::Find(
    absl::string_view name, absl::string_view version) const {
  GEMMSERVE_RETURN_IF_ERROR(ValidateModelName(name));
  std::shared_ptr<ServedModel> served;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(name);
    if (it == models_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown model '", ClientText(name), "'"));
    }
    const ModelStatus& status = it->second.status;
    switch (status.state) {
      case ModelState::kReady: served = it->second.served; break;
      case ModelState::kLoading:
        return absl::UnavailableError(
            absl::StrCat("model '", status.name, "' is loading; retry later"));
      case ModelState::kFailed:
        return absl::UnavailableError(absl::StrCat(
            "model '", status.name, "' is not available (failed to load); retry later"));
      case ModelState::kUnloaded:
        return absl::UnavailableError(
            absl::StrCat("model '", status.name, "' is not available (unloaded); retry later"));
    }
  }
  const std::vector<std::string>& versions = served->metadata().versions;
  if (!version.empty() && std::find(versions.begin(), versions.end(), version) == versions.end()) {
    return absl::NotFoundError(absl::StrCat("model '", served->metadata().name,
                                            "' has no version '", ClientText(version), "'"));
  }
  return served;
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
  return it != models_.end() && it->second.served ? it->second.served->shared_metrics()
                                                  : options_.metrics->Unknown();
}

std::vector<std::shared_ptr<const ServedModel>> InferenceEngine::models() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<const ServedModel>> out;
  for (const auto& [name, entry] : models_) {
    if (entry.served) out.push_back(entry.served);
  }
  return out;
}

}  // namespace gemmserve
