#include "server/service/inference_service.h"

#include <utility>

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
  // As Triton does: an unknown model or version is simply not ready.
  response->set_ready(engine_->FindModel(request->name(), request->version()).ok());
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  response->set_name(kServerName);
  response->set_version(GEMMSERVE_VERSION);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  absl::StatusOr<const Model*> model = engine_->FindModel(request->name(), request->version());
  if (!model.ok()) return FinishNow(context, ToGrpcStatus(model.status()));
  EncodeModelMetadata((*model)->metadata(), response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  absl::StatusOr<InferRequestView> view = DecodeInferRequest(*request);
  if (!view.ok()) return FinishNow(context, ToGrpcStatus(view.status()));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // gRPC owns `request` and `response` until Finish, so the worker may read
  // the one and fill the other.
  absl::Status submitted = engine_->Submit(
      *std::move(view), [context] { return context->IsCancelled(); },
      [reactor, request, response](absl::StatusOr<InferResult> result) {
        if (!result.ok()) {
          reactor->Finish(ToGrpcStatus(result.status()));
          return;
        }
        EncodeInferResponse(*result, request->id(), response);
        reactor->Finish(grpc::Status::OK);
      });
  if (!submitted.ok()) reactor->Finish(ToGrpcStatus(submitted));
  return reactor;
}

}  // namespace gemmserve
