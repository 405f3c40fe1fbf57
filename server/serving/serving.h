// Serving: the one API of gemmserve, which both front ends (gRPC and HTTP)
// call, and the one request path they share.
//
// It is given its parts ready-made (ServingParts: the metrics, the engine
// with its models, the model repository, the token check, client shared
// memory and the tracer) by the composition root (server/root), and opens no
// socket. Every operation of KServe v2 and Triton is one method here with the
// protocol's messages as its types, and checks the token itself; a front end
// only decodes its wire format, calls the method (Infer for inferences) and
// encodes what comes back. Admission while draining, authentication and the
// recording of every answer happen here, once, for all of them.
//
//   GEMMSERVE_RETURN_IF_ERROR(CheckServingOptions(options));  // server/root
//   GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Serving> serving, AssembleServing(options));
//   Serving::InferCall call;
//   call.model_name = wire.model_name();
//   call.authorization = header;           // nullopt when absent
//   call.request = Decode(wire);           // or the decode's error
//   serving->Infer(std::move(call), [&](absl::StatusOr<InferResult> result) {
//     absl::Status status = result.ok() ? Encode(*result) : result.status();
//     Send(status);
//     return status;                       // what the metrics count
//   });
#ifndef GEMMSERVE_SERVER_SERVING_SERVING_H_
#define GEMMSERVE_SERVER_SERVING_SERVING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpc_service.pb.h"
#include "server/core/inference_engine.h"
#include "server/core/inference_request.h"
#include "server/metrics/metrics.h"
#include "server/repository/model_repository.h"
#include "server/serving/token_authenticator.h"
#include "server/serving/tracer.h"
#include "server/shm/shared_memory_manager.h"

namespace gemmserve {

// The server's version (the project's, from CMake).
inline constexpr char kServerVersion[] = GEMMSERVE_VERSION;

// What Serving is made of, each built by the composition root from its own
// layer's options. Every part but `auth` is required; the engine records
// into `metrics`, and the repository loads into the engine.
struct ServingParts {
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<InferenceEngine> engine;
  std::unique_ptr<ModelRepository> repository;
  std::unique_ptr<TokenAuthenticator> auth;  // null: no token needed
  std::unique_ptr<SharedMemoryManager> shm;
  std::unique_ptr<Tracer> tracer;
  // --allow_log_file_setting: LogSettings may change log_file (a path the
  // client picks, opened for writing by the server); off, it is refused.
  bool allow_log_file_setting = false;
};

class Serving {
 public:
  // Takes the parts (ServingParts says which may be null).
  explicit Serving(ServingParts parts);
  // Waits until every accepted call has finished: a call's answer goes out
  // before its last bookkeeping (trace, statistics, the in-flight count), so
  // whoever received the last answer may get here while that still runs.
  ~Serving();

  // For tests and benchmarks; front ends use the API below.
  InferenceEngine& engine() { return *engine_; }
  Metrics& metrics() { return *metrics_; }
  // Whose shared-memory regions a call may use: its credentials when tokens
  // are configured (the `authorization` value as sent), else "" (everyone's).
  std::string ShmOwner(std::optional<absl::string_view> authorization) const;

  // The protocol extensions the server speaks, by Triton's names, as both
  // front ends' server metadata lists them: system_shared_memory only when
  // client shared memory is on.
  std::vector<std::string> Extensions() const;

  // OK when no token is configured; else TokenAuthenticator::Check of the
  // `authorization` header's value (nullopt when absent).
  absl::Status Authenticate(std::optional<absl::string_view> authorization) const;

  // UNAVAILABLE, "server is shutting down; retry on another replica": what
  // a call, or a stream of them, is refused or ended with while draining.
  static absl::Status ShuttingDown();
  // The door of a stream of inference calls (gRPC's ModelStreamInfer), as it
  // opens: Authenticate, then ShuttingDown() while draining. Each request on
  // it then goes through Infer like any call.
  absl::Status AdmitStream(std::optional<absl::string_view> authorization) const;

  // ---- The API: one method per operation of KServe v2 / Triton, with the
  // protocol's messages as its types. Front ends decode their wire form into
  // the request, call, and encode the response or the error (HTTP: its
  // JSON). Every method but the health checks authenticates first
  // (UNAUTHENTICATED); a model is named by name and version ("" for its
  // only one): NOT_FOUND when it is not served.
  using Authorization = std::optional<absl::string_view>;
  using StatusDone = absl::AnyInvocable<void(absl::Status) &&>;

  // Health, without a token (Triton counts a model's readiness with them):
  // live always; ready until draining; a model ready while it is served (an
  // unknown, loading or unloaded one is simply not ready).
  void ServerLive(inference::ServerLiveResponse* response) const;
  void ServerReady(inference::ServerReadyResponse* response) const;
  void ModelReady(const inference::ModelReadyRequest& request,
                  inference::ModelReadyResponse* response) const;
  // Why a served model is not ready: OK when it is; NOT_FOUND when it is not
  // served; UNAVAILABLE naming what it lacks when it depends on servers that
  // are missing (a sharded layer's router and its shards). HTTP's model ready
  // route sends it as the body of its 400.
  absl::Status ModelReadiness(const inference::ModelReadyRequest& request) const;

  // Name, version and the extensions (Extensions()).
  absl::Status ServerMetadata(Authorization authorization,
                              inference::ServerMetadataResponse* response) const;
  absl::Status ModelMetadata(Authorization authorization,
                             const inference::ModelMetadataRequest& request,
                             inference::ModelMetadataResponse* response) const;
  // Triton's ModelConfig of the served version: the config it was loaded
  // with, completed at load (configured_model.h).
  absl::Status ModelConfig(Authorization authorization,
                           const inference::ModelConfigRequest& request,
                           inference::ModelConfigResponse* response) const;
  // One model's statistics, or (no name) every served model's.
  absl::Status ModelStatistics(Authorization authorization,
                               const inference::ModelStatisticsRequest& request,
                               inference::ModelStatisticsResponse* response) const;
  // Every model known, or (`ready`) the ready ones only.
  absl::Status RepositoryIndex(Authorization authorization,
                               const inference::RepositoryIndexRequest& request,
                               inference::RepositoryIndexResponse* response) const;
  // Triton's load, with its parameters: `config` (a string: Triton's JSON of
  // a ModelConfig, or config.pbtxt text) and `file:<path>` (bytes), whose
  // contents are moved out of `request`; INVALID_ARGUMENT for another key or
  // type. `reserved` holds the request's bytes against --max_inflight_bytes
  // (the front end reserved them before it read the message: HTTP its body,
  // gRPC ReserveLoad) until the load is done. The load runs on the
  // repository's thread; `done` is called once, from there or (refusals)
  // before this returns.
  void RepositoryModelLoad(Authorization authorization,
                           inference::RepositoryModelLoadRequest request, Reservation reserved,
                           StatusDone done);
  // Queued behind any load in progress (ModelRepository::UnloadAsync).
  void RepositoryModelUnload(Authorization authorization,
                             const inference::RepositoryModelUnloadRequest& request,
                             StatusDone done);
  // Triton's system shared memory, per owner (ShmOwner): the regions (one by
  // name, or all), registration, and unregistration (one, or all when the
  // name is empty). PERMISSION_DENIED for a registration while client shared
  // memory is off (--allow_client_shm).
  absl::Status SystemSharedMemoryStatus(Authorization authorization,
                                        const inference::SystemSharedMemoryStatusRequest& request,
                                        inference::SystemSharedMemoryStatusResponse* response);
  absl::Status SystemSharedMemoryRegister(
      Authorization authorization, const inference::SystemSharedMemoryRegisterRequest& request);
  absl::Status SystemSharedMemoryUnregister(
      Authorization authorization, const inference::SystemSharedMemoryUnregisterRequest& request);
  // PERMISSION_DENIED unless client shared memory is on: what a front end
  // asks before it reads a registration's body.
  absl::Status CheckSharedMemoryEnabled() const;

  // ---- Accounting for front ends: the bytes of a message they are about
  // to receive or inflate, held against --max_inflight_bytes before they
  // are allocated (InferenceEngine::Reserve and Grow), and the limit of a
  // message.
  absl::StatusOr<Reservation> Reserve(int64_t bytes, absl::string_view what);
  // Reserve for a model load's message, before it is parsed: a full server
  // refuses it with RESOURCE_EXHAUSTED ("retry later"), not UNAVAILABLE.
  absl::StatusOr<Reservation> ReserveLoad(int64_t bytes);
  absl::Status Grow(Reservation* reservation, int64_t more, absl::string_view what);
  int64_t max_message_bytes() const { return max_message_bytes_; }
  int64_t max_inflight_bytes() const { return engine_->options().max_inflight_bytes; }
  // Threads that compute (--compute_threads, 0 resolved to the cores).
  int compute_threads() const { return engine_->options().compute_threads; }

  // Triton's LogSettings (gRPC, and GET/POST /v2/logging): fills `response`
  // with the settings in effect after the request's; the listed keys change
  // at once, all of them or none. Keys: log_file (string; PERMISSION_DENIED
  // unless --allow_log_file_setting), log_info, log_warning, log_error
  // (bool), log_verbose_level (uint32), log_format ("default" or "ISO8601").
  // INVALID_ARGUMENT for another key, a value of another type, or a file
  // that cannot be opened. Behind tokens. Each change is logged (WARNING).
  absl::Status LogSettings(std::optional<absl::string_view> authorization,
                           const inference::LogSettingsRequest& request,
                           inference::LogSettingsResponse* response);

  // Triton's TraceSetting (gRPC, GET/POST /v2/trace/setting and
  // /v2/models/<m>/trace/setting): Tracer::Update, behind tokens; a model
  // scope must name a served model (NOT_FOUND). Each change is logged.
  absl::Status TraceSetting(std::optional<absl::string_view> authorization,
                            const inference::TraceSettingRequest& request,
                            inference::TraceSettingResponse* response);

  struct InferCall {
    absl::string_view model_name;  // as the client sent it: the metrics' label
    std::optional<absl::string_view> authorization;
    // The W3C `traceparent` header (HTTP) or metadata (gRPC), if any: a
    // traced request's trace records it when it is well formed.
    std::optional<absl::string_view> traceparent;
    absl::StatusOr<InferRequestView> request;  // decoded, or why it could not be
    std::function<bool()> is_cancelled;        // may be empty: never cancelled
    // Bytes of the request's message the front end reserved before it
    // received them (HttpServer: the body): taken over by the engine's
    // admission as part of the request's cost, freed with a refusal.
    Reservation reserved;
  };
  // Encodes the result (or the error) for the client and sends it, keeping
  // the result's `held` bytes until the answer is written; returns the
  // status the call ended with, which the metrics count.
  using InferDone = absl::AnyInvocable<absl::Status(absl::StatusOr<InferResult>) &&>;

  // The one entry point of an inference call. While draining it answers
  // UNAVAILABLE at once ("retry on another replica"); else the call counts as
  // in flight until answered, is authenticated, and goes to the engine
  // (InferenceEngine::Submit). `done` is called exactly once, possibly before
  // Infer returns (refusals, tiny requests), else from a worker thread; the
  // call's views must stay valid until then.
  void Infer(InferCall call, InferDone done);

  // Graceful shutdown: from StartDraining on, Infer refuses new calls and
  // model loads and unloads stop (ModelRepository::StopLoads: the one
  // running and those queued fail with UNAVAILABLE, the models as they were);
  // WaitUntilIdle returns true once every call accepted before is answered,
  // false if `deadline` came first.
  void StartDraining();
  bool draining() const;
  bool WaitUntilIdle(absl::Time deadline);
  // After WaitUntilIdle: true once every answer's bytes are released (each
  // front end has written its answers whole), false if `deadline` came first.
  bool WaitUntilWritten(absl::Time deadline);

 private:
  struct Call;
  // Reads the inputs in client shared memory into `state` and points their
  // views there, and takes the regions the outputs go to; errors are the
  // request's (INVALID_ARGUMENT, also for a region its owner truncated;
  // PERMISSION_DENIED when off; RESOURCE_EXHAUSTED over --max_message_bytes).
  absl::Status ResolveSharedMemory(const InferCall& call, InferRequestView& request, Call& state);

  std::unique_ptr<Metrics> metrics_;  // outlives everything that records
  std::unique_ptr<InferenceEngine> engine_;
  std::unique_ptr<ModelRepository> repository_;
  std::unique_ptr<TokenAuthenticator> auth_;
  std::unique_ptr<SharedMemoryManager> shm_;
  std::unique_ptr<Tracer> tracer_;
  const int64_t max_message_bytes_;
  const bool allow_log_file_setting_;
  mutable absl::Mutex drain_mu_;
  bool draining_ ABSL_GUARDED_BY(drain_mu_) = false;
  int64_t inflight_ ABSL_GUARDED_BY(drain_mu_) = 0;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVING_SERVING_H_
