#include "server/service/inference_service.h"

#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "server/common/client_text.h"
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

// A unary reactor that keeps an answer's bytes counted against
// --max_inflight_bytes (InferResult::held) until gRPC is done sending it, or
// the call ended otherwise.
class HoldingReactor final : public grpc::ServerUnaryReactor {
 public:
  void OnDone() override { delete this; }
  Reservation held;
};

// The `authorization` header of the call, as it came; nullopt when absent.
std::optional<absl::string_view> Authorization(const grpc::CallbackServerContext& context) {
  return MetadataValue(context, "authorization");
}

}  // namespace

// Every RPC but the health ones starts with this.
#define GEMMSERVE_AUTHENTICATE(context)                                                    \
  do {                                                                                     \
    if (absl::Status auth = serving_->Authenticate(Authorization(*(context))); !auth.ok()) \
      return FinishNow((context), ToGrpcStatus(auth));                                     \
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
  // No token, as the health checks (Triton counts it with them). As Triton
  // does: an unknown, loading or unloaded model or version is simply not ready.
  response->set_ready(serving_->engine().FindModel(request->name(), request->version()).ok());
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  GEMMSERVE_AUTHENTICATE(context);
  response->set_name(kServerName);
  response->set_version(kServerVersion);
  for (std::string& extension : serving_->Extensions())
    response->add_extensions(std::move(extension));
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  GEMMSERVE_AUTHENTICATE(context);
  auto model = serving_->engine().FindModel(request->name(), request->version());
  if (!model.ok()) return FinishNow(context, ToGrpcStatus(model.status()));
  EncodeModelMetadata((*model)->metadata(), response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  Serving::InferCall call;
  call.model_name = request->model_name();
  call.authorization = Authorization(*context);
  call.traceparent = MetadataValue(*context, "traceparent");
  call.request = DecodeInferRequest(*request);
  if (call.request.ok() && context->deadline() != std::chrono::system_clock::time_point::max()) {
    call.request->deadline = absl::FromChrono(context->deadline());
  }
  call.is_cancelled = [context] { return context->IsCancelled(); };
  auto* reactor = new HoldingReactor;
  // gRPC owns `request` and `response` until the reactor is done, so a
  // worker may read the one and fill the other.
  serving_->Infer(std::move(call), [reactor, request, response](absl::StatusOr<InferResult> r) {
    const absl::Status status =
        r.ok() ? EncodeInferResponse(*r, request->id(), response) : r.status();
    if (r.ok()) reactor->held = std::move(r->held);
    reactor->Finish(ToGrpcStatus(status));
    return status;
  });
  return reactor;
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  return StartStreamInfer(serving_, &streams_, context, max_stream_inflight_);
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* context, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  GEMMSERVE_AUTHENTICATE(context);
  auto served = serving_->engine().FindModel(request->name(), request->version());
  if (!served.ok()) return FinishNow(context, ToGrpcStatus(served.status()));
  EncodeModelConfig(**served, response->mutable_config());
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  GEMMSERVE_AUTHENTICATE(context);
  if (!request->name().empty()) {
    auto served = serving_->engine().FindModel(request->name(), request->version());
    if (!served.ok()) return FinishNow(context, ToGrpcStatus(served.status()));
    EncodeModelStatistics((*served)->statistics(), response->add_model_stats());
  } else {
    for (const auto& served : serving_->engine().models()) {
      EncodeModelStatistics(served->statistics(), response->add_model_stats());
    }
  }
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* context, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  GEMMSERVE_AUTHENTICATE(context);
  for (const ModelStatus& status : serving_->repository().Index()) {
    if (request->ready() && status.state != ModelState::kReady) continue;
    EncodeModelIndexEntry(status, response->add_models());
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
        return FinishNow(context,
                         ToGrpcStatus(absl::InvalidArgumentError(
                             "parameter 'config': expected a string (Triton's JSON form of a ModelConfig, or config.pbtxt text)")));
      }
      load.config = param.string_param();
    } else if (absl::StartsWith(key, "file:")) {
      if (param.parameter_choice_case() != inference::ModelRepositoryParameter::kBytesParam) {
        return FinishNow(
            context,
            ToGrpcStatus(absl::InvalidArgumentError("'file:' parameters must carry bytes")));
      }
      load.files[key.substr(5)] = param.bytes_param();
    } else {
      return FinishNow(context, ToGrpcStatus(absl::InvalidArgumentError(
                                    absl::StrCat("unknown load parameter '", ClientText(key),
                                                 "'; expected 'config' or 'file:<path>'"))));
    }
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  serving_->repository().LoadAsync(request->model_name(), std::move(load),
                                   [reactor](absl::Status s) { reactor->Finish(ToGrpcStatus(s)); });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse*) {
  GEMMSERVE_AUTHENTICATE(context);
  // Queued behind any load in progress, answered from the repository's thread.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  serving_->repository().UnloadAsync(
      request->model_name(), [reactor](absl::Status s) { reactor->Finish(ToGrpcStatus(s)); });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  GEMMSERVE_AUTHENTICATE(context);
  auto regions =
      serving_->shm().Status(serving_->ShmOwner(Authorization(*context)), request->name());
  if (!regions.ok()) return FinishNow(context, ToGrpcStatus(regions.status()));
  for (const SharedMemoryRegionStatus& r : *regions) {
    auto& out = (*response->mutable_regions())[r.name];
    out.set_name(r.name);
    out.set_key(r.key);
    out.set_offset(r.offset);
    out.set_byte_size(r.byte_size);
  }
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse*) {
  GEMMSERVE_AUTHENTICATE(context);
  return FinishNow(context, ToGrpcStatus(serving_->shm().Register(
                                serving_->ShmOwner(Authorization(*context)), request->name(),
                                request->key(), request->offset(), request->byte_size())));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse*) {
  GEMMSERVE_AUTHENTICATE(context);
  return FinishNow(context, ToGrpcStatus(serving_->shm().Unregister(
                                serving_->ShmOwner(Authorization(*context)), request->name())));
}

grpc::ServerUnaryReactor* InferenceService::LogSettings(
    grpc::CallbackServerContext* context, const inference::LogSettingsRequest* request,
    inference::LogSettingsResponse* response) {
  return FinishNow(context, ToGrpcStatus(serving_->LogSettings(Authorization(*context), *request,
                                                               response)));
}

grpc::ServerUnaryReactor* InferenceService::TraceSetting(
    grpc::CallbackServerContext* context, const inference::TraceSettingRequest* request,
    inference::TraceSettingResponse* response) {
  return FinishNow(context, ToGrpcStatus(serving_->TraceSetting(Authorization(*context), *request,
                                                                response)));
}

}  // namespace gemmserve
