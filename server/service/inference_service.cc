#include "server/service/inference_service.h"

#include <chrono>
#include <optional>
#include <utility>

#include <google/protobuf/descriptor.h>

#include "absl/time/time.h"
#include "server/service/infer_codec.h"
#include "server/service/status_util.h"

namespace gemmserve {
namespace {

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context, const absl::Status& status) {
  return FinishNow(context, ToGrpcStatus(status));
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

// The index of `method` among the service's methods, as the generated code
// numbers them (their order in grpc_service.proto).
int MethodIndex(const char* method) {
  const google::protobuf::ServiceDescriptor* service =
      inference::ModelInferRequest::descriptor()->file()->FindServiceByName("GRPCInferenceService");
  return service->FindMethodByName(method)->index();
}

}  // namespace

InferenceService::InferenceService(Serving* serving, int max_stream_inflight)
    : serving_(serving), max_stream_inflight_(max_stream_inflight) {
  // Triton's bidirectional stream of inferences, on raw messages.
  MarkMethodRawCallback(MethodIndex("ModelStreamInfer"),
                        new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
                            [this](grpc::CallbackServerContext* context) {
                              return StartStreamInfer(serving_, &streams_, context,
                                                      max_stream_inflight_);
                            }));
}

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  serving_->ServerLive(response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* context,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  serving_->ServerReady(response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  serving_->ModelReady(*request, response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  return Finish(context, serving_->ServerMetadata(Authorization(*context), response));
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  return Finish(context, serving_->ModelMetadata(Authorization(*context), *request, response));
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

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* context, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  return Finish(context, serving_->ModelConfig(Authorization(*context), *request, response));
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  return Finish(context, serving_->ModelStatistics(Authorization(*context), *request, response));
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* context, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  return Finish(context, serving_->RepositoryIndex(Authorization(*context), *request, response));
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse*) {
  // Answered from the repository's thread once the load is done.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  serving_->RepositoryModelLoad(Authorization(*context), *request,
                                [reactor](absl::Status s) { reactor->Finish(ToGrpcStatus(s)); });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse*) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  serving_->RepositoryModelUnload(Authorization(*context), *request,
                                  [reactor](absl::Status s) { reactor->Finish(ToGrpcStatus(s)); });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  return Finish(context,
                serving_->SystemSharedMemoryStatus(Authorization(*context), *request, response));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse*) {
  return Finish(context, serving_->SystemSharedMemoryRegister(Authorization(*context), *request));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse*) {
  return Finish(context,
                serving_->SystemSharedMemoryUnregister(Authorization(*context), *request));
}

grpc::ServerUnaryReactor* InferenceService::LogSettings(
    grpc::CallbackServerContext* context, const inference::LogSettingsRequest* request,
    inference::LogSettingsResponse* response) {
  return Finish(context, serving_->LogSettings(Authorization(*context), *request, response));
}

grpc::ServerUnaryReactor* InferenceService::TraceSetting(
    grpc::CallbackServerContext* context, const inference::TraceSettingRequest* request,
    inference::TraceSettingResponse* response) {
  return Finish(context, serving_->TraceSetting(Authorization(*context), *request, response));
}

}  // namespace gemmserve
