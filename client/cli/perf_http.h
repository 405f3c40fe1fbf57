// perf over HTTP/REST (`gemmserve-cli perf --protocol=http --url=HOST:HTTP_PORT`):
// the KServe v2 REST binding with Triton's binary tensor extension, as
// perf_analyzer's `-i http` sends it. Each caller keeps one HTTP/1.1
// connection alive; requests are encoded before the run (a JSON header with
// binary_data_size per input and binary outputs, then the raw tensors) and
// answers are read whole but not parsed. Set-up (metadata, config,
// statistics, shared-memory regions) goes over the same REST API.
#ifndef GEMMSERVE_CLIENT_CLI_PERF_HTTP_H_
#define GEMMSERVE_CLIENT_CLI_PERF_HTTP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cli/perf.h"
#include "client/cpp/host_tensor.h"
#include "grpc_service.pb.h"
#include "model_config.pb.h"

namespace gemmserve::client {

// The canonical code of an HTTP answer's status (Triton's mapping): 400
// INVALID_ARGUMENT, 401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404
// NOT_FOUND, 409 ALREADY_EXISTS, 413 RESOURCE_EXHAUSTED, 429 and 503
// UNAVAILABLE, 501 UNIMPLEMENTED, 504 DEADLINE_EXCEEDED, other errors
// INTERNAL.
absl::StatusCode HttpStatusCode(int http_status);

// The whole HTTP request (request line, headers, JSON header, binary
// tensors) of `request` for `host` ("HOST:PORT", the Host header): inputs
// with raw contents go as binary_data_size tensors, those with shared-memory
// parameters as references; with requested outputs, those (shared memory or
// binary), else every output binary.
std::string HttpInferRequestBytes(absl::string_view host,
                                  const inference::ModelInferRequest& request);

// One kept-alive HTTP/1.1 connection, blocking, with `timeout` (or 60 s
// when infinite) on every read and write. Answers are read by their
// Content-Length, at most kMaxHttpAnswerBytes.
inline constexpr int64_t kMaxHttpAnswerBytes = int64_t{8} << 30;
class HttpConnection {
 public:
  // UNAVAILABLE when `address` ("HOST:PORT") cannot be reached.
  static absl::StatusOr<std::unique_ptr<HttpConnection>> Connect(const std::string& address,
                                                                 absl::Duration timeout);
  ~HttpConnection();
  // Sends `request` and reads the answer: its HTTP status, the body in
  // *body. UNAVAILABLE when the connection breaks, DEADLINE_EXCEEDED when the
  // answer does not come in time; the connection is then unusable.
  absl::StatusOr<int> RoundTrip(absl::string_view request, std::string* body);
  // The server said `Connection: close` (or the connection broke): open a
  // new one for the next call.
  bool closed() const { return closed_; }
  // Whether an answer came on it already (a kept-alive connection the server
  // may have closed meanwhile, so a failure to send is worth one retry).
  bool reused() const { return answers_ > 0; }

 private:
  explicit HttpConnection(int fd) : fd_(fd) {}
  int fd_;
  bool closed_ = false;
  int64_t answers_ = 0;
  std::string buffer_;  // bytes read past the previous answer
};

// Set-up calls over REST, each on a fresh connection.
class HttpPerfClient {
 public:
  explicit HttpPerfClient(std::string address) : address_(std::move(address)) {}
  const std::string& address() const { return address_; }
  absl::StatusOr<inference::ModelMetadataResponse> ModelMetadata(const std::string& model,
                                                                 absl::Duration timeout) const;
  absl::StatusOr<inference::ModelConfig> ModelConfig(const std::string& model,
                                                     absl::Duration timeout) const;
  absl::StatusOr<inference::ModelStatistics> ModelStatistics(const std::string& model,
                                                             absl::Duration timeout) const;
  // The outputs' names, datatypes, shapes and byte counts (bytes left
  // empty but sized by binary_data_size) of one call with `inputs`.
  absl::StatusOr<std::vector<HostTensor>> Infer(const std::string& model,
                                                std::vector<HostTensor> inputs,
                                                absl::Duration timeout) const;
  absl::Status RegisterSystemSharedMemory(const std::string& name, const std::string& key,
                                          int64_t byte_size, absl::Duration timeout) const;
  absl::Status UnregisterSystemSharedMemory(const std::string& name, absl::Duration timeout) const;

 private:
  absl::StatusOr<std::string> Call(const std::string& request, absl::Duration timeout) const;
  std::string address_;
};

// Runs the load over HTTP against `address`: requests taken in turn, closed
// loop (a connection per caller) or open loop (Poisson arrivals, at most
// options.concurrency in flight on as many connections; arrivals past that
// are dropped by the client). INVALID_ARGUMENT for bad options (and more
// than kPerfHttpMaxConcurrency callers).
inline constexpr int kPerfHttpMaxConcurrency = 1024;
absl::StatusOr<PerfResult> RunHttpLoad(const std::string& address,
                                       const std::vector<inference::ModelInferRequest>& requests,
                                       std::vector<PerfInput> inputs, const PerfOptions& options);

}  // namespace gemmserve::client

#endif  // GEMMSERVE_CLIENT_CLI_PERF_HTTP_H_
