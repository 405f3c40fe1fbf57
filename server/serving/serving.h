// Serving: the composition root of gemmserve, and the one request path every
// front end shares.
//
// Start builds the pieces from ServingOptions, each from its own layer's
// options: the metrics (and their /metrics endpoint), the engine, the
// built-in models, the model repository (loaded) and the token check. A
// front end then only decodes its wire format, calls Infer (or Authenticate
// and the accessors, for its other calls) and encodes what comes back;
// admission while draining, authentication and the recording of every
// answer happen here, once, for all of them.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Serving> serving, Serving::Start(options));
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
#include "server/core/dynamic_batcher.h"
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

// `host` ready for ":port": an IPv6 address in brackets.
std::string HostForPort(const std::string& host);

// The built-in models' dynamic batching (--builtin_* flags).
BatchingOptions DefaultBuiltinBatching();

struct ServingOptions {
  EngineOptions engine;  // its `metrics` is set by Start
  MetricsOptions metrics;
  BatchingOptions builtin_batching = DefaultBuiltinBatching();
  // Where /metrics listens: host (--host) and port (--metrics_port; 0 picks
  // one; -1 serves none, the metrics are still recorded).
  std::string host = "0.0.0.0";
  int metrics_port = 8002;
  std::string model_repository;  // empty: built-in models only
  std::string auth_token_file;   // empty: no token needed
  SharedMemoryOptions shm;       // --allow_client_shm, --max_client_shm_bytes
  // --allow_log_file_setting: LogSettings may change log_file (a path the
  // client picks, opened for writing by the server); off, it is refused.
  bool allow_log_file_setting = false;
  // --trace_file (empty: tracing cannot be turned on) and the global trace
  // settings at start (--trace_level, --trace_rate, --trace_count,
  // --trace_log_frequency); Triton's defaults.
  std::string trace_file;
  TraceSettings trace = {false, 1000, -1, 0};
};

class Serving {
 public:
  // INVALID_ARGUMENT for options out of range or an unreadable token file,
  // UNAVAILABLE when /metrics cannot listen. Loads the repository before it
  // returns (a model that fails to load is listed, not fatal).
  static absl::StatusOr<std::unique_ptr<Serving>> Start(ServingOptions options);
  ~Serving();

  InferenceEngine& engine() { return *engine_; }
  ModelRepository& repository() { return *repository_; }
  Metrics& metrics() { return *metrics_; }
  SharedMemoryManager& shm() { return *shm_; }
  // Whose shared-memory regions a call may use: its credentials when tokens
  // are configured (the `authorization` value as sent), else "" (everyone's).
  std::string ShmOwner(std::optional<absl::string_view> authorization) const;
  // "host:port" of /metrics, or empty when it is not served.
  std::string metrics_address() const;

  // The protocol extensions the server speaks, by Triton's names, as both
  // front ends' server metadata lists them: system_shared_memory only when
  // client shared memory is on.
  std::vector<std::string> Extensions() const;

  // OK when no token is configured; else TokenAuthenticator::Check of the
  // `authorization` header's value (nullopt when absent).
  absl::Status Authenticate(std::optional<absl::string_view> authorization) const;

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

  // Graceful shutdown: from StartDraining on, Infer refuses new calls;
  // WaitUntilIdle returns true once every call accepted before is answered,
  // false if `deadline` came first.
  void StartDraining();
  bool draining() const;
  bool WaitUntilIdle(absl::Time deadline);

 private:
  Serving() = default;
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
  int64_t max_message_bytes_ = 0;
  bool allow_log_file_setting_ = false;
  std::string metrics_host_;
  mutable absl::Mutex drain_mu_;
  bool draining_ ABSL_GUARDED_BY(drain_mu_) = false;
  int64_t inflight_ ABSL_GUARDED_BY(drain_mu_) = 0;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVING_SERVING_H_
