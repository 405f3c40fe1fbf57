// The KServe v2 REST binding over Serving: routes a request (method and path,
// through one table of routes) to its handler, which decodes, calls the one
// Serving method of the operation and encodes, as the gRPC front end's
// InferenceService does. It knows nothing of sockets: HttpServer reads
// the request, hands it over whole (body decompressed) and writes the reply.
//
//   GET  /v2/health/live | /v2/health/ready                 200, or 400 when not
//   GET  /v2                                                server metadata
//   GET  /v2/models/{m}[/versions/{v}]                      model metadata
//   GET  /v2/models/{m}[/versions/{v}]/ready                200, or 400
//   GET  /v2/models/{m}[/versions/{v}]/config               Triton's model config
//   GET  /v2/models[/{m}[/versions/{v}]]/stats              statistics
//   POST /v2/models/{m}[/versions/{v}]/infer                inference
//   POST /v2/repository/index                               repository index
//   POST /v2/repository/models/{m}/load | /unload           load, unload
//   GET|POST /v2/logging                                     log settings
//   GET|POST /v2/trace/setting, /v2/models/{m}/trace/setting trace settings
//   GET  /v2/systemsharedmemory[/region/{r}]/status          shared memory
//   POST /v2/systemsharedmemory/region/{r}/register
//   POST /v2/systemsharedmemory[/region/{r}]/unregister
//   *    /v2/cudasharedmemory/...                            501, as Triton on CPU
//
// Errors are `{"error": "<the gRPC API's message>"}` with the status of the
// gRPC code (HttpStatusOf). With a token file every route but the health
// checks (server live and ready, a model's ready) needs
// `Authorization: Bearer <token>`.
#ifndef GEMMSERVE_SERVER_HTTP_HTTP_SERVICE_H_
#define GEMMSERVE_SERVER_HTTP_HTTP_SERVICE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/http/compression.h"
#include "server/serving/serving.h"

namespace gemmserve {

// The HTTP status of a gRPC status code (Triton's mapping): OK 200,
// INVALID_ARGUMENT 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403,
// NOT_FOUND 404, DEADLINE_EXCEEDED 408, RESOURCE_EXHAUSTED 413 (a size limit)
// or 429 (out of memory), CANCELLED 499, UNIMPLEMENTED 501, UNAVAILABLE 503,
// anything else 500.
int HttpStatusOf(const absl::Status& status);

// Control routes' bodies (index, unload, shared memory) are small JSON
// objects: a longer one is refused before it is read.
inline constexpr int64_t kMaxControlBodyBytes = 64 << 10;

// What a request's header says, before its body is read.
struct HttpHead {
  absl::string_view method;
  absl::string_view target;
  std::vector<absl::string_view> authorization;  // every Authorization header
};

struct HttpCall {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, as sent
  std::optional<std::string> authorization;
  std::optional<std::string> header_length;  // Inference-Header-Content-Length
  std::optional<std::string> traceparent;    // W3C trace context, for traces
  std::string body;                          // decompressed
  // The body's bytes, held against --max_inflight_bytes since before it was
  // read: an inference's admission takes them over; a load holds them (and
  // its parse) until it is done.
  Reservation reserved;
  // Polled while an inference waits: true once the client has gone.
  std::function<bool()> is_cancelled;
};

struct HttpReply {
  int status = 200;
  std::string body;  // empty for the health checks
  std::string content_type = "application/json";
  std::optional<size_t> header_length;                        // Inference-Header-Content-Length
  ContentCoding content_encoding = ContentCoding::kIdentity;  // set by the server
  // An inference's bytes (InferResult::held): the server keeps them counted
  // until the reply is written.
  Reservation held{};
};

class HttpService {
 public:
  // `serving` must outlive the service.
  explicit HttpService(Serving* serving) : serving_(serving) {}

  // Calls `reply` exactly once: before Handle returns, or for an inference
  // from one of the engine's workers.
  using Reply = absl::AnyInvocable<void(HttpReply) &&>;
  void Handle(HttpCall call, Reply reply);

  // Decides from the head alone, before a byte of the body is read or `100
  // Continue` is sent: the route's token (UNAUTHENTICATED; the health checks
  // need none), more than one Authorization header (INVALID_ARGUMENT), a
  // shared memory registration while client shared memory is off
  // (PERMISSION_DENIED). Returns the most bytes the route's body may have:
  // --max_message_bytes for inferences and model loads, kMaxControlBodyBytes
  // for the rest.
  absl::StatusOr<int64_t> Admit(const HttpHead& head) const;

  // The error's JSON ({"error": "<message>"}) with its HTTP status.
  static HttpReply Error(const absl::Status& status);

 private:
  Serving* const serving_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_HTTP_HTTP_SERVICE_H_
