#include "server/service/inference_service.h"

#include <chrono>
#include <optional>
#include <utility>

#include "absl/time/time.h"
#include "server/service/infer_codec.h"
#include "server/service/raw_messages.h"
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

// ModelInfer's reactor: the parsed request (the engine reads its tensors in
// place), and the answer's bytes counted against --max_inflight_bytes
// (InferResult::held) until gRPC is done sending it, or the call ended
// otherwise.
class InferReactor final : public grpc::ServerUnaryReactor {
 public:
  void OnDone() override { delete this; }
  inference::ModelInferRequest request;
  Reservation held;
};

// The `authorization` header of the call, as it came; nullopt when absent.
std::optional<absl::string_view> Authorization(const grpc::CallbackServerContext& context) {
  return MetadataValue(context, "authorization");
}

}  // namespace

InferenceService::InferenceService(Serving* serving, int max_stream_inflight)
    : serving_(serving), max_stream_inflight_(max_stream_inflight) {
  MarkMethodRawCallback(
      InferenceMethodIndex("ModelInfer"),
      new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
          [this](grpc::CallbackServerContext* context, const grpc::ByteBuffer* message,
                 grpc::ByteBuffer* response) {
            return RawModelInfer(context, message, response);
          }));
  MarkMethodRawCallback(
      InferenceMethodIndex("RepositoryModelLoad"),
      new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
          [this](grpc::CallbackServerContext* context, const grpc::ByteBuffer* message,
                 grpc::ByteBuffer* response) {
            return RawRepositoryModelLoad(context, message, response);
          }));
  // Triton's bidirectional stream of inferences (stream_infer.h).
  MarkMethodRawCallback(InferenceMethodIndex("ModelStreamInfer"),
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

grpc::ServerUnaryReactor* InferenceService::RawModelInfer(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* message,
                                                          grpc::ByteBuffer* response) {
  auto* reactor = new InferReactor;
  // gRPC's until the call is done, and emptied here once read.
  auto* bytes = const_cast<grpc::ByteBuffer*>(message);
  const int64_t size = static_cast<int64_t>(bytes->Length());
  Serving::InferCall call;
  call.authorization = Authorization(*context);
  call.traceparent = MetadataValue(*context, "traceparent");
  // The parsed copy, counted before it is made (and taken over by the
  // engine's admission as the request's message); gRPC's own (in its quota,
  // grpc_server.h) is freed as soon as it is parsed.
  // Nothing is held or parsed for a caller without the token.
  absl::Status refused = serving_->Authenticate(call.authorization);
  absl::StatusOr<Reservation> held =
      refused.ok() ? serving_->Reserve(size, "the request message") : refused;
  if (held.ok()) {
    const bool parsed = ParseRawMessage(*bytes, reactor->request);
    bytes->Clear();
    call.reserved = *std::move(held);
    call.request = parsed ? DecodeInferRequest(reactor->request)
                          : absl::InvalidArgumentError(
                                "the message is not an inference.ModelInferRequest (truncated, "
                                "not protobuf, or a string that is not UTF-8)");
  } else {
    // Refused (and counted, under the model it names) by Serving::Infer.
    reactor->request.set_model_name(PeekModelName(*bytes));
    bytes->Clear();
    call.request = held.status();
  }
  call.model_name = reactor->request.model_name();
  if (call.request.ok() && context->deadline() != std::chrono::system_clock::time_point::max()) {
    call.request->deadline = absl::FromChrono(context->deadline());
  }
  call.is_cancelled = [context] { return context->IsCancelled(); };
  // gRPC owns `response` until the reactor is done, so a worker may fill it.
  serving_->Infer(std::move(call), [reactor, response](absl::StatusOr<InferResult> r) {
    absl::Status status = r.status();
    if (r.ok()) {
      inference::ModelInferResponse encoded;
      status = EncodeInferResponse(*r, reactor->request.id(), &encoded);
      if (status.ok()) status = FromGrpcStatus(SerializeRawMessage(encoded, response));
      reactor->held = std::move(r->held);
    }
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

grpc::ServerUnaryReactor* InferenceService::RawRepositoryModelLoad(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* message,
    grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto finish = [reactor, response](absl::Status s) {
    if (s.ok())
      s = FromGrpcStatus(SerializeRawMessage(inference::RepositoryModelLoadResponse(), response));
    reactor->Finish(ToGrpcStatus(s));
  };
  auto* bytes = const_cast<grpc::ByteBuffer*>(message);  // gRPC's; emptied here
  const int64_t size = static_cast<int64_t>(bytes->Length());
  // The parsed copy, counted before it is made; gRPC's own (in its quota,
  // grpc_server.h) is freed as soon as it is parsed.
  // Nothing is held or parsed for a caller without the token.
  absl::Status refused = serving_->Authenticate(Authorization(*context));
  absl::StatusOr<Reservation> held = refused.ok() ? serving_->ReserveLoad(size) : refused;
  inference::RepositoryModelLoadRequest request;
  const bool parsed = held.ok() && ParseRawMessage(*bytes, request);
  bytes->Clear();
  if (!held.ok()) {
    finish(held.status());
  } else if (!parsed) {
    finish(absl::InvalidArgumentError(
        "the message is not an inference.RepositoryModelLoadRequest (truncated, not protobuf, "
        "or a string that is not UTF-8)"));
  } else {
    serving_->RepositoryModelLoad(Authorization(*context), std::move(request), *std::move(held),
                                  std::move(finish));
  }
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
