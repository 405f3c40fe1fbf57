// The KServe v2 GRPCInferenceService on gRPC's callback API. Each handler is a
// thin adapter: decode, ask Serving (server/serving), encode. ModelInfer (on
// raw messages, counted before they are parsed) hands its decoded request to Serving::Infer, which
// validates it on the gRPC thread (cheap checks, no allocation of tensor data) and runs it on the
// engine's workers; the reactor is finished from there. Only the tiniest
// requests to an idle model (--inline_max_flops) are computed on the gRPC
// thread itself, where a hand-off would cost more than they do. With a token
// file every RPC but ServerLive, ServerReady and ModelReady (health, like
// grpc.health.v1) needs a bearer token; ModelStreamInfer checks it once per
// stream. RPCs gemmserve does not implement (CUDA shared memory) answer
// UNIMPLEMENTED (the generated base class does that).
#ifndef GEMMSERVE_SERVER_SERVICE_INFERENCE_SERVICE_H_
#define GEMMSERVE_SERVER_SERVICE_INFERENCE_SERVICE_H_

#include "grpc_service.grpc.pb.h"
#include "server/service/stream_infer.h"
#include "server/serving/serving.h"

namespace gemmserve {

class InferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // `serving` must outlive the service. A stream has at most
  // `max_stream_inflight` (>= 1) requests between read and written answer.
  // ModelInfer, ModelStreamInfer and RepositoryModelLoad are served raw
  // (raw_messages.h): their handlers replace the generated typed ones.
  InferenceService(Serving* serving, int max_stream_inflight);

  // Shutdown: every open stream answers what it accepted, then ends with
  // UNAVAILABLE; new streams end at once (stream_infer.h).
  void DrainStreams() { streams_.DrainAll(); }

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
  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
      inference::RepositoryModelUnloadResponse* response) override;
  // Triton's system shared-memory extension (SharedMemoryManager); CUDA
  // shared memory stays UNIMPLEMENTED.
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryStatusRequest* request,
      inference::SystemSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response) override;
  grpc::ServerUnaryReactor* LogSettings(grpc::CallbackServerContext* context,
                                        const inference::LogSettingsRequest* request,
                                        inference::LogSettingsResponse* response) override;
  grpc::ServerUnaryReactor* TraceSetting(grpc::CallbackServerContext* context,
                                         const inference::TraceSettingRequest* request,
                                         inference::TraceSettingResponse* response) override;

 private:
  // ModelInfer on the message's bytes: the parsed copy is held against
  // --max_inflight_bytes before it is made (a message with no room is
  // refused unparsed, as the queue-full UNAVAILABLE or RESOURCE_EXHAUSTED)
  // and taken over by the engine's admission; gRPC's own copy, counted in
  // gRPC's quota (grpc_server.h), is freed as soon as it is parsed.
  grpc::ServerUnaryReactor* RawModelInfer(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* message,
                                          grpc::ByteBuffer* response);

  // RepositoryModelLoad on the message's bytes, counted as ModelInfer's
  // (Serving::ReserveLoad) before they are parsed; the parsed request is
  // moved into the load, its files never copied. Answered from the
  // repository's thread once the load is done.
  grpc::ServerUnaryReactor* RawRepositoryModelLoad(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* message,
                                                   grpc::ByteBuffer* response);

  Serving* const serving_;
  const int max_stream_inflight_;
  StreamRegistry streams_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_INFERENCE_SERVICE_H_
