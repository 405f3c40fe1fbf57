// ServerOptions: everything the process is built from, each part its own
// layer's options, and CheckedServerOptions, the only form Server::Start
// takes: every option checked once, where the flags are parsed, by the
// checks each layer declares beside its options (CheckServingOptions,
// CheckGrpcOptions, CheckHttpOptions), before anything is built.
//
//   ServerOptions options;
//   options.grpc.port = 0;
//   GEMMSERVE_ASSIGN_OR_RETURN(CheckedServerOptions checked,
//                              CheckedServerOptions::Check(std::move(options)));
//   GEMMSERVE_ASSIGN_OR_RETURN(auto server, Server::Start(std::move(checked)));
#ifndef GEMMSERVE_SERVER_ROOT_SERVER_OPTIONS_H_
#define GEMMSERVE_SERVER_ROOT_SERVER_OPTIONS_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "server/http/http_server.h"
#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/root/serving_assembly.h"
#include "server/service/grpc_server.h"

namespace gemmserve {

// Process-wide settings of the kernels, applied by Server::Start before any
// model loads. (The compute libraries' environment,
// ReexecWithComputeEnvironment, must be in place before the process starts
// threads: main() calls it first. The CPU ISA cap, GEMMSERVE_MAX_CPU_ISA, is
// read from the environment by the kernels; Check refuses a value it does
// not know.)
struct ComputeOptions {
  Bf16Panels bf16_panels = Bf16Panels::kAuto;  // --bf16_panels
};

struct ServerOptions {
  ComputeOptions compute;
  std::string host = "0.0.0.0";  // where every endpoint listens (--host)
  ServingOptions serving;
  GrpcOptions grpc;
  HttpOptions http;  // port -1: no HTTP front end (its TLS is gRPC's)
  // Prometheus /metrics (--metrics_port): 0 picks a port; negative (-1)
  // serves none (the metrics are still recorded).
  int metrics_port = 8002;
  // Once listening, the gRPC address (host:port) is written here (whole,
  // then renamed), for a container's health check; empty: nowhere.
  std::string address_file;
};

// ServerOptions that every check accepted; only Check makes one.
class CheckedServerOptions {
 public:
  // INVALID_ARGUMENT (FAILED_PRECONDITION for tracing on without a trace
  // file), naming the flag, for the first option out of range, or an ISA cap
  // the kernels do not know. The HTTP front end takes gRPC's TLS files.
  static absl::StatusOr<CheckedServerOptions> Check(ServerOptions options);

  const ServerOptions& options() const { return options_; }

 private:
  explicit CheckedServerOptions(ServerOptions options) : options_(std::move(options)) {}

  ServerOptions options_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_ROOT_SERVER_OPTIONS_H_
