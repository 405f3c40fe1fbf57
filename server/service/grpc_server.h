// GrpcServer: the gRPC front end over a Serving it borrows (the composition
// root, server/root, builds both and drains them together). It configures
// gRPC around the API: the KServe service, the standard grpc.health.v1
// service and server reflection on one port, TLS, the HTTP/2 limits, and the
// message size limits applied by gRPC itself in both directions.
//
//   GrpcOptions options;
//   options.port = 0;  // pick a free port
//   GEMMSERVE_RETURN_IF_ERROR(CheckGrpcOptions(options, serving.max_message_bytes()));
//   GEMMSERVE_ASSIGN_OR_RETURN(auto grpc, GrpcServer::Start(&serving, "127.0.0.1", options));
//   std::cout << "listening on " << grpc->address() << "\n";
//   ...
//   serving.StartDraining();
//   grpc->StopServing();                  // health NOT_SERVING, streams drain
//   serving.WaitUntilIdle(deadline);
//   grpc->Stop(deadline);
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

// What only gRPC needs; the rest is the root's ServingOptions. gRPC takes Serving's
// --max_message_bytes as its message limit and half of --max_inflight_bytes
// as its buffers' quota.
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

// INVALID_ARGUMENT, naming the flag, unless gRPC can take `options` and
// Serving's message limit: a port, and limits that fit its int arguments.
absl::Status CheckGrpcOptions(const GrpcOptions& options, int64_t max_message_bytes);

class GrpcServer {
 public:
  // Serves on options CheckGrpcOptions accepted. INVALID_ARGUMENT for TLS
  // files that cannot be read; UNAVAILABLE if the port cannot be bound.
  // `serving` must outlive the server.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(Serving* serving,
                                                           const std::string& host,
                                                           const GrpcOptions& options);
  ~GrpcServer();

  // "host:port" with the port actually bound.
  const std::string& address() const { return address_; }
  int port() const { return port_; }

  // The first step of a graceful stop (after Serving::StartDraining):
  // health turns NOT_SERVING so balancers and probes stop sending, and every
  // stream stops reading and answers what it accepted.
  void StopServing();
  // The last: calls still running get until `deadline`, then gRPC stops.
  void Stop(std::chrono::system_clock::time_point deadline);
  // Returns once Stop has run.
  void Wait();

 private:
  GrpcServer() = default;

  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<GrpcAcceptor> acceptor_;  // plaintext: the port's listener
  std::string address_;
  int port_ = 0;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_GRPC_SERVER_H_
