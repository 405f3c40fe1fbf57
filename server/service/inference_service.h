// The KServe v2 GRPCInferenceService on gRPC's callback API. Each handler is a
// thin adapter: decode, ask the core, encode. ModelInfer validates on the gRPC
// thread (cheap checks, no allocation of tensor data) and hands the compute to
// the engine's worker pool; the reactor is finished from the worker, so no
// gRPC thread ever waits on compute. RPCs gemmserve does not implement yet
// answer UNIMPLEMENTED (the generated base class does that).
#ifndef GEMMSERVE_SERVER_SERVICE_INFERENCE_SERVICE_H_
#define GEMMSERVE_SERVER_SERVICE_INFERENCE_SERVICE_H_

#include <string>

#include "grpc_service.grpc.pb.h"
#include "server/core/inference_engine.h"

namespace gemmserve {

class InferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  explicit InferenceService(InferenceEngine* engine) : engine_(engine) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;

 private:
  InferenceEngine* const engine_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_INFERENCE_SERVICE_H_
