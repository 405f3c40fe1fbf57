// Server: the composition root of the process. It applies the process-wide
// compute settings, builds Serving (metrics, engine, models, repository,
// tokens: the one API), starts both front ends on it (gRPC, and HTTP unless
// its port is -1), and stops them together, once. main() only turns flags
// into ServerOptions.
//
//   ServerOptions options;
//   options.grpc.port = 0;  // pick free ports
//   options.http.port = 0;
//   GEMMSERVE_ASSIGN_OR_RETURN(auto server, Server::Start(std::move(options)));
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
#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/service/grpc_server.h"
#include "server/serving/serving.h"

namespace gemmserve {

// Process-wide settings of the kernels, applied by Start before any model
// loads. (The compute libraries' environment, ReexecWithComputeEnvironment,
// must be in place before the process starts threads: main() calls it
// first. The CPU ISA cap, GEMMSERVE_MAX_CPU_ISA, is read from the
// environment by the kernels; Start refuses a value it does not know.)
struct ComputeOptions {
  Bf16Panels bf16_panels = Bf16Panels::kAuto;  // --bf16_panels
};

struct ServerOptions {
  ComputeOptions compute;
  ServingOptions serving;  // its `host` is where every port listens
  GrpcOptions grpc;
  HttpOptions http;  // port -1: no HTTP front end (its TLS is gRPC's)
  // Once listening, the gRPC address (host:port) is written here (whole,
  // then renamed), for a container's health check; empty: nowhere.
  std::string address_file;
};

class Server {
 public:
  // In this order: checks the ISA cap and the options, sets the BF16 panel
  // mode, raises the descriptor limit and sizes the shared memory region
  // count to it, starts Serving (loading the repository), gRPC, then HTTP.
  // INVALID_ARGUMENT for bad options, UNAVAILABLE when a port cannot be
  // bound; nothing is left running on an error.
  static absl::StatusOr<std::unique_ptr<Server>> Start(ServerOptions options);
  ~Server();

  const std::string& grpc_address() const { return grpc_->address(); }
  // Empty when not served.
  std::string http_address() const;
  std::string metrics_address() const { return serving_->metrics_address(); }
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

  std::unique_ptr<Serving> serving_;  // outlives both front ends
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<HttpServer> http_;
  std::once_flag shutdown_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_ROOT_SERVER_H_
