#include "server/service/grpc_server.h"

#include <limits>
#include <utility>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/common/host_port.h"
#include "server/common/logging.h"
#include "server/common/status_macros.h"

namespace gemmserve {
namespace {
constexpr char kInferenceServiceName[] = "inference.GRPCInferenceService";

// The HTTP/2 limits, gRPC's buffer quota and its message limits.
void SetLimits(const GrpcOptions& g, int64_t max_message_bytes, int64_t max_inflight_bytes,
               grpc::ServerBuilder& builder) {
  // HTTP/2 limits with safe defaults (SECURITY.md): keepalive pings both
  // ways, a cap on concurrent streams per connection, idle and age limits.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(g.keepalive_time_ms));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(g.keepalive_timeout_ms));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, g.max_concurrent_streams);
  if (g.max_connection_idle_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                               static_cast<int>(g.max_connection_idle_ms));
  }
  if (g.max_connection_age_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                               static_cast<int>(g.max_connection_age_ms));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               static_cast<int>(g.max_connection_age_grace_ms));
  }
  // gRPC's own buffers (messages being received, replies being sent) come
  // from a quota of half the engine's limit, and every message is counted
  // by the engine from its parse on (ModelInfer, RepositoryModelLoad,
  // ModelStreamInfer): what clients make the server hold is at most the
  // limit plus this half. Past the quota gRPC resets streams
  // (RESOURCE_EXHAUSTED); half the limit still takes any one message the
  // engine could accept, whose cost is at least twice its size.
  grpc::ResourceQuota quota("gemmserve");
  quota.Resize(static_cast<size_t>(max_inflight_bytes / 2));
  builder.SetResourceQuota(quota);
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(max_message_bytes));
}

}  // namespace

absl::Status CheckGrpcOptions(const GrpcOptions& g, int64_t max_message_bytes) {
  if (g.port < 0 || g.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc_port ", g.port, " is not a port number"));
  }
  // gRPC takes the limits as int; protobuf cannot carry 2 GiB anyway.
  if (max_message_bytes <= 0 || max_message_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_message_bytes must be in [1, ", std::numeric_limits<int>::max(), "]"));
  }
  for (int64_t ms : {g.keepalive_time_ms, g.keepalive_timeout_ms, g.max_connection_idle_ms,
                     g.max_connection_age_ms, g.max_connection_age_grace_ms}) {
    if (ms < 0 || ms > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError("gRPC time limits must be in [0, 2^31) milliseconds");
    }
  }
  if (g.max_stream_inflight < 1) {
    return absl::InvalidArgumentError("--grpc_max_stream_inflight must be at least 1");
  }
  if (g.max_concurrent_streams < 1) {
    return absl::InvalidArgumentError("--grpc_max_concurrent_streams must be at least 1");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(Serving* serving,
                                                             const std::string& listen_host,
                                                             const GrpcOptions& g) {
  const int64_t max_message_bytes = serving->max_message_bytes();
  auto credentials = MakeServerCredentials(g.tls);
  if (!credentials.ok()) return credentials.status();

  std::unique_ptr<GrpcServer> server(new GrpcServer);
  server->service_ = std::make_unique<InferenceService>(serving, g.max_stream_inflight);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string host = HostForPort(listen_host);
  std::unique_ptr<GrpcAcceptor> acceptor;
  if (g.tls.cert_file.empty()) {
    // Plaintext: the port is ours (GrpcAcceptor), for its connection cap and
    // so that running out of descriptors never stops it for good.
    GEMMSERVE_ASSIGN_OR_RETURN(
        acceptor, GrpcAcceptor::Listen(listen_host, g.port, g.max_connections));
    server->port_ = acceptor->port();
  } else {
    builder.AddListeningPort(absl::StrCat(host, ":", g.port), *credentials, &server->port_);
  }
  SetLimits(g, max_message_bytes, serving->max_inflight_bytes(), builder);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", g.port));
  }
  if (acceptor) {
    acceptor->Serve(server->server_.get());
    server->acceptor_ = std::move(acceptor);
  }
  server->address_ = absl::StrCat(host, ":", server->port_);
  // "" is the whole server; probes may also name the service.
  server->server_->GetHealthCheckService()->SetServingStatus(true);
  server->server_->GetHealthCheckService()->SetServingStatus(kInferenceServiceName, true);
  return server;
}

GrpcServer::~GrpcServer() {
  if (acceptor_) acceptor_->Stop();
  if (server_) server_->Shutdown();
}

void GrpcServer::StopServing() {
  server_->GetHealthCheckService()->SetServingStatus(false);  // every service
  service_->DrainStreams();
}

void GrpcServer::Stop(std::chrono::system_clock::time_point deadline) {
  if (acceptor_) acceptor_->Stop();
  server_->Shutdown(deadline);
}

void GrpcServer::Wait() { server_->Wait(); }

}  // namespace gemmserve
