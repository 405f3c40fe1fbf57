#include "server/service/inference_service.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "server/common/allocation.h"
#include "server/common/client_text.h"
#include "server/core/overload.h"
#include "server/service/infer_codec.h"
#include "server/service/status_util.h"

namespace gemmserve {
namespace {

constexpr char kServerName[] = "gemmserve";

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

}  // namespace

// Every RPC but the health ones starts with this.
#define GEMMSERVE_AUTHENTICATE(context)                                              \
  do {                                                                               \
    if (auth_ != nullptr) {                                                          \
      if (absl::Status auth = auth_->Check((context)->client_metadata()); !auth.ok()) \
        return FinishNow((context), ToGrpcStatus(auth));                            \
    }                                                                                \
  } while (false)

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  response->set_live(true);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* context,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  response->set_ready(true);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  GEMMSERVE_AUTHENTICATE(context);
  // As Triton does: an unknown, loading or unloaded model or version is
  // simply not ready.
  response->set_ready(engine_->FindModel(request->name(), request->version()).ok());
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  GEMMSERVE_AUTHENTICATE(context);
  response->set_name(kServerName);
  response->set_version(GEMMSERVE_VERSION);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  GEMMSERVE_AUTHENTICATE(context);
  auto model = engine_->FindModel(request->name(), request->version());
  if (!model.ok()) return FinishNow(context, ToGrpcStatus(model.status()));
  EncodeModelMetadata((*model)->metadata(), response);
  return FinishNow(context, grpc::Status::OK);
}

namespace {

// Counts one answered inference request: by code, its latency, and the
// rejection reason its code stands for.
void RecordAnswer(Metrics* metrics, ModelMetrics* model, absl::Time arrival,
                  const absl::Status& status) {
  if (metrics == nullptr) return;
  metrics->AddInflight(-1);
  if (model == nullptr) return;
  model->RecordResponse(status.code(), absl::Now() - arrival);
  RejectReason reason;
  if (RejectReasonOf(status.code(), &reason)) {
    model->RecordRejected(reason);
  } else if (IsQueueFull(status)) {
    model->RecordRejected(RejectReason::kQueueFull);
  }
}

}  // namespace

void InferenceService::StartDraining() {
  absl::MutexLock lock(&drain_mu_);
  draining_ = true;
}

bool InferenceService::WaitUntilIdle(absl::Time deadline) {
  absl::MutexLock lock(&drain_mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(drain_mu_) { return inflight_ == 0; };
  return drain_mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  const absl::Time arrival = absl::Now();
  {
    absl::MutexLock lock(&drain_mu_);
    if (draining_) {
      return FinishNow(context, ToGrpcStatus(absl::UnavailableError(
                                    "server is shutting down; retry on another replica")));
    }
    ++inflight_;
  }
  if (metrics_) metrics_->AddInflight(1);
  absl::Status auth = auth_ != nullptr ? auth_->Check(context->client_metadata()) : absl::OkStatus();
  std::shared_ptr<ModelMetrics> model_metrics = engine_->MetricsFor(request->model_name());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto finish = [this, reactor, model_metrics, arrival](const absl::Status& status) {
    RecordAnswer(metrics_, model_metrics.get(), arrival, status);
    reactor->Finish(ToGrpcStatus(status));
    absl::MutexLock lock(&drain_mu_);
    --inflight_;
  };
  if (!auth.ok()) {
    finish(auth);
    return reactor;
  }
  // An error here means `done` was never called (Submit's contract); memory
  // running out while decoding is one too.
  absl::Status refused = CatchAllocationFailure("the request", [&]() -> absl::Status {
    absl::StatusOr<InferRequestView> view = DecodeInferRequest(*request);
    if (!view.ok()) return view.status();
    const auto deadline = context->deadline();
    if (deadline != std::chrono::system_clock::time_point::max()) {
      view->deadline = absl::FromChrono(deadline);
    }
    // gRPC owns `request` and `response` until Finish, so the worker may read
    // the one and fill the other.
    return engine_->Submit(
        *std::move(view), [context] { return context->IsCancelled(); },
        [finish, request, response](absl::StatusOr<InferResult> result) {
          absl::Status status = result.status();
          if (result.ok()) {
            status = CatchAllocationFailure("the response", [&] {
              EncodeInferResponse(*result, request->id(), response);
              return absl::OkStatus();
            });
            if (!status.ok()) response->Clear();
          }
          finish(status);
        });
  });
  if (!refused.ok()) finish(refused);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* context, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  GEMMSERVE_AUTHENTICATE(context);
  auto served = engine_->FindModel(request->name(), request->version());
  if (!served.ok()) return FinishNow(context, ToGrpcStatus(served.status()));
  EncodeModelConfig(**served, response->mutable_config());
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  GEMMSERVE_AUTHENTICATE(context);
  if (!request->name().empty()) {
    auto served = engine_->FindModel(request->name(), request->version());
    if (!served.ok()) return FinishNow(context, ToGrpcStatus(served.status()));
    EncodeModelStatistics((*served)->statistics(), response->add_model_stats());
  } else {
    for (const auto& served : engine_->models()) {
      EncodeModelStatistics(served->statistics(), response->add_model_stats());
    }
  }
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* context, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  GEMMSERVE_AUTHENTICATE(context);
  for (const ModelIndexEntry& e : repository_->Index()) {
    if (request->ready() && e.state != "READY") continue;
    auto* m = response->add_models();
    m->set_name(e.name);
    m->set_version(e.version);
    m->set_state(e.state);
    m->set_reason(e.reason);
  }
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse*) {
  GEMMSERVE_AUTHENTICATE(context);
  ModelLoadRequest load;
  for (const auto& [key, param] : request->parameters()) {
    if (key == "config") {
      if (param.parameter_choice_case() != inference::ModelRepositoryParameter::kStringParam) {
        return FinishNow(context, ToGrpcStatus(absl::InvalidArgumentError(
                                      "parameter 'config': expected a string (config.pbtxt text)")));
      }
      load.config = param.string_param();
    } else if (absl::StartsWith(key, "file:")) {
      if (param.parameter_choice_case() != inference::ModelRepositoryParameter::kBytesParam) {
        return FinishNow(context, ToGrpcStatus(absl::InvalidArgumentError(
                                      "'file:' parameters must carry bytes")));
      }
      load.files[key.substr(5)] = param.bytes_param();
    } else {
      return FinishNow(context, ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
                                    "unknown load parameter '", ClientText(key),
                                    "'; expected 'config' or 'file:<path>'"))));
    }
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  repository_->LoadAsync(request->model_name(), std::move(load), [reactor](absl::Status s) {
    reactor->Finish(ToGrpcStatus(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse*) {
  GEMMSERVE_AUTHENTICATE(context);
  return FinishNow(context, ToGrpcStatus(repository_->Unload(request->model_name())));
}

}  // namespace gemmserve
