// GemmServer: the process's gRPC server. Binds the KServe service, the
// standard grpc.health.v1 service and server reflection on one port, with the
// message size limits applied by gRPC itself in both directions.
//
//   ServerOptions options;
//   options.grpc_port = 0;  // pick a free port
//   GEMMSERVE_ASSIGN_OR_RETURN(auto server, GemmServer::Start(options));
//   std::cout << "listening on " << server->address() << "\n";
//   server->Wait();
#ifndef GEMMSERVE_SERVER_SERVICE_GRPC_SERVER_H_
#define GEMMSERVE_SERVER_SERVICE_GRPC_SERVER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "server/core/inference_engine.h"
#include "server/repository/model_repository.h"
#include "server/service/inference_service.h"
#include "server/service/security.h"

namespace gemmserve {

struct ServerOptions {
  std::string host = "0.0.0.0";
  int grpc_port = 8001;
  int compute_threads = 1;
  int64_t max_message_bytes = int64_t{1} << 30;
  int64_t max_output_bytes = int64_t{4} << 30;
  std::string model_repository;  // empty: built-in models only
  int64_t inline_max_flops = 65536;
  int64_t max_inflight_bytes = int64_t{8} << 30;
  // Prometheus /metrics on this port (0 picks one); -1: not served.
  int metrics_port = 8002;
  std::vector<double> latency_buckets;  // empty: the default
  TlsOptions tls;                 // no certificate: plaintext
  std::string auth_token_file;    // empty: no token needed
  // HTTP/2 limits (0 keeps gRPC's default for the first two).
  int64_t keepalive_time_ms = 60000;
  int64_t keepalive_timeout_ms = 20000;
  int max_concurrent_streams = 256;
  int64_t max_connection_idle_ms = 600000;
  int64_t max_connection_age_ms = 0;  // 0: unlimited
  int64_t max_connection_age_grace_ms = 30000;
  // Dynamic batching of the built-in models.
  int64_t builtin_max_queue_delay_us = 100;
  int64_t builtin_max_batch_rows = 4096;
  int64_t builtin_max_queue_size = 1024;
};

class GemmServer {
 public:
  // INVALID_ARGUMENT for bad options; UNAVAILABLE if the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<GemmServer>> Start(const ServerOptions& options);
  ~GemmServer();

  // "host:port" with the port actually bound.
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  // "host:port" of /metrics, or empty when not served.
  std::string metrics_address() const;

  // Health turns NOT_SERVING, then in-flight calls get until `deadline` to
  // finish before they are cancelled.
  void Shutdown(std::chrono::system_clock::time_point deadline);
  void Wait();

 private:
  GemmServer() = default;

  std::unique_ptr<Metrics> metrics_;  // outlives everything that records
  std::unique_ptr<InferenceEngine> engine_;
  std::unique_ptr<ModelRepository> repository_;
  std::unique_ptr<TokenAuthenticator> auth_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::string metrics_host_;
  int port_ = 0;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_GRPC_SERVER_H_
