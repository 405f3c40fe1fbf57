// NoopServer: a KServe v2 gRPC server that answers like gemmserve's built-in
// `matmul` but computes nothing, the baseline `gemmserve-cli noop-server`
// serves so that a benchmark can tell the cost of a gRPC round trip carrying
// a GEMM's bytes from the cost of the GEMM.
//
// It implements ServerLive, ServerReady (both true), ModelMetadata and
// ModelConfig of one model, `matmul` version 1 (inputs A and B, FP32, shape
// [-1,-1]; output Y), and ModelInfer, which replies with an output Y of shape
// [rows of A, columns of B] (the last two dimensions; 1 for a missing one),
// A's datatype, and that many zero bytes in raw_output_contents. Nothing
// else of the request is looked at: contents are neither read nor checked.
// The few checks it does make keep a hostile request from steering an
// allocation: A and B must be there, with dimensions >= 0 and a datatype
// gemmserve knows (INVALID_ARGUMENT), and Y must fit a message
// (RESOURCE_EXHAUSTED). Other RPCs answer UNIMPLEMENTED.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<NoopServer> server,
//                              NoopServer::Start("127.0.0.1", 0));
//   std::cout << "noop-server listening on " << server->address() << std::endl;
//   server->Wait();
#ifndef GEMMSERVE_CLIENT_CLI_NOOP_SERVER_H_
#define GEMMSERVE_CLIENT_CLI_NOOP_SERVER_H_

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "grpc_service.grpc.pb.h"

namespace gemmserve::client {

class NoopServer {
 public:
  // Requests and responses up to this size pass, as gemmserve's default
  // --max_message_bytes.
  static constexpr int kMaxMessageBytes = 1 << 30;

  // Listens on host:port (port 0 picks a free one). INVALID_ARGUMENT for a
  // port out of range, UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<NoopServer>> Start(const std::string& host, int port);

  ~NoopServer();

  // "HOST:PORT" as bound, an IPv6 host in brackets.
  const std::string& address() const { return address_; }

  void Shutdown(std::chrono::system_clock::time_point deadline);
  void Wait();

 private:
  NoopServer() = default;

  std::unique_ptr<inference::GRPCInferenceService::CallbackService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace gemmserve::client

#endif  // GEMMSERVE_CLIENT_CLI_NOOP_SERVER_H_
