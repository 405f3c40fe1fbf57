// Server: the composition root of the process. From checked options
// (server_options.h) it applies the process-wide compute settings, builds
// Serving and every part of it (AssembleServing: metrics, engine, models,
// repository, tokens, shared memory, tracer), then starts every endpoint on
// it, in Triton's order (the server first, then its endpoints): gRPC, HTTP
// unless its port is -1, and /metrics unless its port is negative. It stops
// them together, once. main() only turns flags into ServerOptions and checks
// them.
//
//   ServerOptions options;
//   options.grpc.port = 0;  // pick free ports
//   options.http.port = 0;
//   GEMMSERVE_ASSIGN_OR_RETURN(auto checked, CheckedServerOptions::Check(std::move(options)));
//   GEMMSERVE_ASSIGN_OR_RETURN(auto server, Server::Start(std::move(checked)));
//   std::cout << "listening on " << server->grpc_address() << "\n";
//   ...                                    // from another thread:
//   server->Shutdown(deadline);            // drains both front ends
//   server->Wait();
#ifndef GEMMSERVE_SERVER_ROOT_SERVER_H_
#define GEMMSERVE_SERVER_ROOT_SERVER_H_

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "server/http/http_server.h"
#include "server/metrics/metrics_endpoint.h"
#include "server/root/server_options.h"
#include "server/service/grpc_server.h"
#include "server/serving/serving.h"

namespace gemmserve {

class Server {
 public:
  // In this order: sets the BF16 panel mode, raises the descriptor limit and
  // sizes the shared memory region count to it, builds Serving (loading the
  // repository), then starts gRPC, HTTP and /metrics. INVALID_ARGUMENT for
  // files that cannot be read (tokens, TLS, the trace directory),
  // UNAVAILABLE when a port cannot be bound; nothing is left running on an
  // error. (A port found busy after the repository loaded fails the start
  // then, as Triton's does: the endpoints start once the server is built.)
  static absl::StatusOr<std::unique_ptr<Server>> Start(CheckedServerOptions checked);
  ~Server();

  const std::string& grpc_address() const { return grpc_->address(); }
  // Empty when not served.
  std::string http_address() const;
  // Empty when not served.
  std::string metrics_address() const;
  // What the start-up line reports: compute threads, kernels, BLIS, BF16.
  std::string Description() const;

  // Graceful, once, for both front ends: Serving refuses new inferences
  // (gRPC health NOT_SERVING, HTTP ready 400), streams stop reading, every
  // accepted call is answered (until `deadline`, then cancelled), then gRPC
  // stops and HTTP writes its last replies. Later calls do nothing.
  void Shutdown(std::chrono::system_clock::time_point deadline);
  // Returns once Shutdown has stopped gRPC.
  void Wait();

 private:
  Server() = default;
  // gRPC, HTTP (unless its port is -1), then /metrics (unless negative).
  absl::Status StartEndpoints(const ServerOptions& options);

  std::unique_ptr<Serving> serving_;  // outlives every endpoint
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<MetricsEndpoint> metrics_;
  std::once_flag shutdown_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_ROOT_SERVER_H_
