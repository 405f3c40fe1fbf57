// The KServe v2 GRPCInferenceService on gRPC's callback API. Each handler is a
// thin adapter: decode, ask the core, encode. ModelInfer validates on the gRPC
// thread (cheap checks, no allocation of tensor data) and hands the compute to
// the engine's worker pool; the reactor is finished from the worker, so no
// gRPC thread ever waits on compute. With a TokenAuthenticator every RPC but
// ServerLive and ServerReady (health, like grpc.health.v1) needs a bearer
// token. RPCs gemmserve does not implement yet
// answer UNIMPLEMENTED (the generated base class does that).
#ifndef GEMMSERVE_SERVER_SERVICE_INFERENCE_SERVICE_H_
#define GEMMSERVE_SERVER_SERVICE_INFERENCE_SERVICE_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "grpc_service.grpc.pb.h"
#include "server/core/inference_engine.h"
#include "server/metrics/metrics.h"
#include "server/service/security.h"
#include "server/repository/model_repository.h"

namespace gemmserve {

class InferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // Graceful shutdown (RELIABILITY F5): from StartDraining on, new
  // ModelInfer calls get UNAVAILABLE at once; WaitUntilIdle returns true when
  // every call accepted before has been answered, false if `deadline` came
  // first.
  void StartDraining();
  bool WaitUntilIdle(absl::Time deadline);

  // `metrics` and `auth` may be null (no metrics; no token required).
  InferenceService(InferenceEngine* engine, ModelRepository* repository, Metrics* metrics,
                   const TokenAuthenticator* auth = nullptr)
      : engine_(engine), repository_(repository), metrics_(metrics), auth_(auth) {}

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
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;
  // The load runs on the repository's thread; the reactor finishes from there.
  grpc::ServerUnaryReactor* RepositoryModelLoad(
      grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
      inference::RepositoryModelLoadResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
      inference::RepositoryModelUnloadResponse* response) override;

 private:
  InferenceEngine* const engine_;
  ModelRepository* const repository_;
  Metrics* const metrics_;
  const TokenAuthenticator* const auth_;
  absl::Mutex drain_mu_;
  bool draining_ ABSL_GUARDED_BY(drain_mu_) = false;
  int64_t inflight_ ABSL_GUARDED_BY(drain_mu_) = 0;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_INFERENCE_SERVICE_H_
