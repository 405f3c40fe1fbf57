// GemmServer: the gRPC front end as a process runs it. It starts Serving (the
// composition root: metrics, engine, models, repository, tokens) and
// configures gRPC around it: the KServe service, the standard
// grpc.health.v1 service and server reflection on one port, TLS, the HTTP/2
// limits, and the message size limits applied by gRPC itself in both
// directions.
//
//   ServerOptions options;
//   options.grpc.port = 0;  // pick a free port
//   GEMMSERVE_ASSIGN_OR_RETURN(auto server, GemmServer::Start(options));
//   std::cout << "listening on " << server->address() << "\n";
//   server->Wait();
#ifndef GEMMSERVE_SERVER_SERVICE_GRPC_SERVER_H_
#define GEMMSERVE_SERVER_SERVICE_GRPC_SERVER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "server/service/inference_service.h"
#include "server/service/tls.h"
#include "server/service/grpc_acceptor.h"
#include "server/serving/serving.h"

namespace gemmserve {

// What only gRPC needs; the rest is ServingOptions. gRPC listens on
// ServingOptions::host, with ServingOptions::engine.max_message_bytes as its
// message limit.
struct GrpcOptions {
  int port = 8001;  // 0 picks a free one
  TlsOptions tls;   // no certificate: plaintext
  // HTTP/2 limits.
  int64_t keepalive_time_ms = 60000;
  int64_t keepalive_timeout_ms = 20000;
  int max_concurrent_streams = 256;
  // Open connections at most (plaintext; GrpcAcceptor): more are closed at once.
  int max_connections = 1024;
  int64_t max_connection_idle_ms = 600000;  // 0: never
  int64_t max_connection_age_ms = 0;        // 0: unlimited
  int64_t max_connection_age_grace_ms = 30000;
  // Requests of one ModelStreamInfer stream between read and written
  // answer; beyond, the stream is not read until one is written.
  int max_stream_inflight = 64;
};

struct ServerOptions {
  ServingOptions serving;
  GrpcOptions grpc;
};

class GemmServer {
 public:
  // INVALID_ARGUMENT for bad options; UNAVAILABLE if a port cannot be bound.
  static absl::StatusOr<std::unique_ptr<GemmServer>> Start(ServerOptions options);
  ~GemmServer();

  // "host:port" with the port actually bound.
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  // "host:port" of /metrics, or empty when not served.
  std::string metrics_address() const { return serving_->metrics_address(); }
  Serving& serving() { return *serving_; }

  // Health turns NOT_SERVING, then in-flight calls get until `deadline` to
  // finish before they are cancelled.
  void Shutdown(std::chrono::system_clock::time_point deadline);
  void Wait();

 private:
  GemmServer() = default;

  std::unique_ptr<Serving> serving_;  // outlives the service and gRPC
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<GrpcAcceptor> acceptor_;  // plaintext: the port's listener
  std::string address_;
  int port_ = 0;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_GRPC_SERVER_H_
