// A small blocking C++ client for gemmserve's KServe v2 gRPC API.
//
// Client wraps one channel and the generated GRPCInferenceService stub and
// turns each RPC into a call that returns absl::Status values (the gRPC code
// and message are kept), with tensors as HostTensors sent and received as raw
// little-endian bytes. Health() speaks the standard grpc.health.v1 protocol,
// which is what load balancers and the Docker HEALTHCHECK use.
//
// The channel connects lazily: Connect() only fails on an empty target, and a
// server that is down shows up as UNAVAILABLE on the first call. Every call
// takes an optional timeout; the default waits as long as the server takes.
// A Client is thread-safe and cheap to move.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(Client client, Client::Connect("127.0.0.1:8001"));
//   std::vector<HostTensor> inputs = {
//       {"A", "FP32", {2, 3}, a_bytes}, {"B", "FP32", {3, 4}, b_bytes}};
//   GEMMSERVE_ASSIGN_OR_RETURN(std::vector<HostTensor> outputs,
//                              client.Infer("matmul", std::move(inputs),
//                                           absl::Seconds(10)));
//   // outputs[0]: "Y", "FP32", {2, 4}, 32 bytes
#ifndef GEMMSERVE_CLIENT_CPP_CLIENT_H_
#define GEMMSERVE_CLIENT_CPP_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cpp/host_tensor.h"
#include "client/cpp/shared_memory.h"
#include "grpc_service.grpc.pb.h"
#include "grpc_service.pb.h"

namespace gemmserve::client {

// grpc.health.v1.HealthCheckResponse.ServingStatus.
enum class ServingStatus {
  kUnknown = 0,
  kServing = 1,
  kNotServing = 2,
  kServiceUnknown = 3,
};

// "SERVING", "NOT_SERVING", ... as in the health protocol.
absl::string_view ServingStatusName(ServingStatus status);

// The same canonical code and message: the two code sets are identical.
absl::Status FromGrpcStatus(const grpc::Status& status);

// The ModelInferRequest for `model`: `inputs` with raw contents (moved in),
// then `shm_inputs` and the requested `shm_outputs` with Triton's
// shared_memory_region, shared_memory_byte_size and shared_memory_offset
// parameters. Without shared-memory outputs every output is returned.
inference::ModelInferRequest MakeInferRequest(
    absl::string_view model, std::vector<HostTensor> inputs,
    const std::vector<SharedMemoryInput>& shm_inputs = {},
    const std::vector<SharedMemoryOutput>& shm_outputs = {});

class Client {
 public:
  // INVALID_ARGUMENT for an empty target ("host:port", or any gRPC target URI).
  static absl::StatusOr<Client> Connect(std::string target);

  Client(Client&&) = default;
  Client& operator=(Client&&) = default;

  absl::StatusOr<bool> ServerLive(absl::Duration timeout = absl::InfiniteDuration()) const;
  absl::StatusOr<bool> ServerReady(absl::Duration timeout = absl::InfiniteDuration()) const;

  // grpc.health.v1.Health/Check for `service` ("" asks about the whole server).
  absl::StatusOr<ServingStatus> Health(absl::string_view service = "",
                                       absl::Duration timeout = absl::InfiniteDuration()) const;

  absl::StatusOr<inference::ModelMetadataResponse> ModelMetadata(
      absl::string_view model, absl::Duration timeout = absl::InfiniteDuration()) const;

  // Triton's ModelConfig RPC. Servers that do not implement it answer
  // UNIMPLEMENTED, which callers should treat as "no configuration".
  absl::StatusOr<inference::ModelConfig> ModelConfig(
      absl::string_view model, absl::Duration timeout = absl::InfiniteDuration()) const;

  // Triton's ModelStatistics RPC for one model (its only version): the
  // server's counts and cumulative queue and compute times.
  absl::StatusOr<inference::ModelStatistics> ModelStatistics(
      absl::string_view model, absl::Duration timeout = absl::InfiniteDuration()) const;

  // Runs `model` on `inputs` (moved into the request to spare a copy of large
  // tensors) and returns all its outputs. The server's answer is checked, not
  // trusted: INTERNAL if it lacks raw contents for an output, or if an
  // output's byte count does not match its shape for a datatype gemmserve
  // knows.
  absl::StatusOr<std::vector<HostTensor>> Infer(
      absl::string_view model, std::vector<HostTensor> inputs,
      absl::Duration timeout = absl::InfiniteDuration()) const;

  // The same, with inputs read from and outputs written to registered
  // shared-memory regions (shared_memory.h). Outputs the server wrote to a
  // region come back with their name, datatype and shape and no bytes (read
  // them from the region); with `shm_outputs`, only those outputs are
  // requested. INTERNAL when the server's answer for a shared-memory output
  // does not name its window.
  absl::StatusOr<std::vector<HostTensor>> Infer(
      absl::string_view model, std::vector<HostTensor> inputs,
      const std::vector<SharedMemoryInput>& shm_inputs,
      const std::vector<SharedMemoryOutput>& shm_outputs,
      absl::Duration timeout = absl::InfiniteDuration()) const;

  // Triton's system shared memory RPCs. Register: the object `key` ("/NAME")
  // as `name`, `byte_size` bytes from `offset`. Unregister: `name`, or every
  // region of this client with "". Status: `name`, or every region with "".
  absl::Status RegisterSystemSharedMemory(absl::string_view name, absl::string_view key,
                                          int64_t byte_size, int64_t offset = 0,
                                          absl::Duration timeout = absl::InfiniteDuration()) const;
  absl::Status UnregisterSystemSharedMemory(
      absl::string_view name, absl::Duration timeout = absl::InfiniteDuration()) const;
  absl::StatusOr<inference::SystemSharedMemoryStatusResponse> SystemSharedMemoryStatus(
      absl::string_view name = "", absl::Duration timeout = absl::InfiniteDuration()) const;

  // The channel itself, for callers that issue their own calls on it (the
  // load generator sends pre-serialized requests with the callback API).
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  explicit Client(std::shared_ptr<grpc::Channel> channel);

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

}  // namespace gemmserve::client

#endif  // GEMMSERVE_CLIENT_CPP_CLIENT_H_
