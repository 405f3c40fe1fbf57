#include "server/service/grpc_server.h"

#include <limits>
#include <utility>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/common/logging.h"
#include "server/models/builtin_models.h"

namespace gemmserve {
namespace {
constexpr char kInferenceServiceName[] = "inference.GRPCInferenceService";
}  // namespace

absl::StatusOr<std::unique_ptr<GemmServer>> GemmServer::Start(const ServerOptions& options) {
  if (options.grpc_port < 0 || options.grpc_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--grpc_port ", options.grpc_port,
                                                   " is not a port number"));
  }
  // gRPC takes the limits as int; protobuf cannot carry 2 GiB anyway.
  if (options.max_message_bytes <= 0 ||
      options.max_message_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_message_bytes must be in [1, ", std::numeric_limits<int>::max(), "]"));
  }
  if (options.max_output_bytes < 0) {
    return absl::InvalidArgumentError("--max_output_bytes must not be negative");
  }
  for (int64_t ms : {options.keepalive_time_ms, options.keepalive_timeout_ms,
                     options.max_connection_idle_ms, options.max_connection_age_ms,
                     options.max_connection_age_grace_ms}) {
    if (ms < 0 || ms > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError("gRPC time limits must be in [0, 2^31) milliseconds");
    }
  }
  if (options.max_concurrent_streams < 1) {
    return absl::InvalidArgumentError("--grpc_max_concurrent_streams must be at least 1");
  }
  if (options.compute_threads < 1) {
    return absl::InvalidArgumentError("--compute_threads must be at least 1");
  }

  std::unique_ptr<GemmServer> server(new GemmServer);
  if (options.metrics_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics_port ", options.metrics_port,
                                                   " is not a port number"));
  }
  {
    MetricsOptions metrics_options;
    metrics_options.latency_buckets = options.latency_buckets;
    metrics_options.version = GEMMSERVE_VERSION;
    const std::string metrics_host = options.host.find(':') != std::string::npos &&
                                             options.host.front() != '['
                                         ? absl::StrCat("[", options.host, "]")
                                         : options.host;
    auto metrics = Metrics::Start(
        options.metrics_port < 0 ? "" : absl::StrCat(metrics_host, ":", options.metrics_port),
        std::move(metrics_options));
    if (!metrics.ok()) return metrics.status();
    server->metrics_ = *std::move(metrics);
    server->metrics_host_ = metrics_host;
  }
  EngineOptions engine_options;
  engine_options.compute_threads = options.compute_threads;
  engine_options.max_output_bytes = options.max_output_bytes;
  engine_options.max_message_bytes = options.max_message_bytes;
  engine_options.inline_max_flops = options.inline_max_flops;
  engine_options.max_inflight_bytes = options.max_inflight_bytes;
  engine_options.metrics = server->metrics_.get();
  server->engine_ = std::make_unique<InferenceEngine>(engine_options);
  // The built-in models merge concurrent requests' problem lists into one
  // kernel call (README: built-in models).
  BatchingOptions builtin_batching;
  builtin_batching.max_queue_delay = absl::Microseconds(options.builtin_max_queue_delay_us);
  builtin_batching.max_batch_rows = options.builtin_max_batch_rows;
  builtin_batching.max_queue_size = options.builtin_max_queue_size;
  server->engine_->Install(MakeMatMulModel(), builtin_batching);
  server->engine_->Install(MakeGroupedMatMulModel(), builtin_batching);
  server->repository_ = std::make_unique<ModelRepository>(
      options.model_repository, server->engine_.get(),
      std::vector<std::string>{"grouped_matmul", "matmul"});
  server->repository_->LoadAll();
  if (!options.auth_token_file.empty()) {
    auto auth = TokenAuthenticator::FromFile(options.auth_token_file);
    if (!auth.ok()) return auth.status();
    server->auth_ = *std::move(auth);
  }
  server->service_ = std::make_unique<InferenceService>(
      server->engine_.get(), server->repository_.get(), server->metrics_.get(),
      server->auth_.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string host = options.host.find(':') != std::string::npos &&
                                   options.host.front() != '['
                               ? absl::StrCat("[", options.host, "]")
                               : options.host;
  auto credentials = MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  builder.AddListeningPort(absl::StrCat(host, ":", options.grpc_port), *credentials,
                           &server->port_);
  // HTTP/2 limits with safe defaults (SECURITY.md): keepalive pings both
  // ways, a cap on concurrent streams per connection, idle and age limits.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(options.keepalive_time_ms));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(options.keepalive_timeout_ms));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  if (options.max_connection_idle_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                               static_cast<int>(options.max_connection_idle_ms));
  }
  if (options.max_connection_age_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                               static_cast<int>(options.max_connection_age_ms));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               static_cast<int>(options.max_connection_age_grace_ms));
  }
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, ":", options.grpc_port));
  }
  server->address_ = absl::StrCat(host, ":", server->port_);
  // "" is the whole server; probes may also name the service.
  server->server_->GetHealthCheckService()->SetServingStatus(true);
  server->server_->GetHealthCheckService()->SetServingStatus(kInferenceServiceName, true);
  return server;
}

GemmServer::~GemmServer() {
  if (server_) server_->Shutdown();
}

void GemmServer::Shutdown(std::chrono::system_clock::time_point deadline) {
  // Graceful (RELIABILITY F5): health turns NOT_SERVING so balancers and
  // probes stop sending; new inference calls get UNAVAILABLE; the calls
  // already accepted run to the end (or to the deadline); then gRPC stops.
  server_->GetHealthCheckService()->SetServingStatus(false);  // every service
  service_->StartDraining();
  if (!service_->WaitUntilIdle(absl::FromChrono(deadline))) {
    GEMMSERVE_LOG(WARNING) << "shutdown grace period over with calls still running; "
                              "cancelling them";
  }
  server_->Shutdown(deadline);
}

void GemmServer::Wait() { server_->Wait(); }

std::string GemmServer::metrics_address() const {
  if (metrics_ == nullptr || metrics_->port() == 0) return "";
  return absl::StrCat(metrics_host_, ":", metrics_->port());
}

}  // namespace gemmserve
