#include "server/http/http_service.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/common/allocation.h"
#include "server/common/client_text.h"
#include "server/common/public_status.h"
#include "server/common/status_macros.h"
#include "server/http/infer_json.h"
#include "server/http/model_json.h"

namespace gemmserve {
namespace {

using Reply = HttpService::Reply;

HttpReply Json(std::string body) {
  HttpReply r;
  r.body = std::move(body);
  return r;
}

HttpReply Empty(int status) {
  HttpReply r;
  r.status = status;
  r.content_type.clear();
  return r;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = absl::ascii_tolower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The path's segments, percent-decoded; INVALID_ARGUMENT for a bad escape.
absl::StatusOr<std::vector<std::string>> PathSegments(absl::string_view target) {
  const size_t query = target.find('?');
  if (query != absl::string_view::npos) target = target.substr(0, query);
  if (!absl::ConsumePrefix(&target, "/")) {
    return absl::InvalidArgumentError("the request target must be an absolute path");
  }
  std::vector<std::string> segments;
  for (absl::string_view raw : absl::StrSplit(target, '/')) {
    std::string s;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '%') {
        s.push_back(raw[i]);
        continue;
      }
      const int hi = i + 2 < raw.size() ? HexDigit(raw[i + 1]) : -1;
      const int lo = i + 2 < raw.size() ? HexDigit(raw[i + 2]) : -1;
      if (hi < 0 || lo < 0) return absl::InvalidArgumentError("bad percent-escape in the path");
      s.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    }
    segments.push_back(std::move(s));
  }
  if (!segments.empty() && segments.back().empty()) segments.pop_back();  // a trailing '/'
  return segments;
}

// A routed request: the call, the path's segments that the route's `{}`
// matched (in order), and where the answer goes.
struct Routed {
  HttpCall call;
  std::vector<std::string> args;
  Reply reply;

  std::optional<absl::string_view> authorization() const {
    if (!call.authorization) return std::nullopt;
    return absl::string_view(*call.authorization);
  }
  // The model's version: the route's second argument, or "" (its only one).
  std::string version() const { return args.size() > 1 ? args[1] : std::string(); }
};

// Sends the API's answer: the error, or the response in its REST JSON.
template <typename Response>
void Send(Routed& r, const absl::Status& status, const Response& response,
          absl::StatusOr<std::string> (*encode)(const Response&)) {
  if (!status.ok()) return std::move(r.reply)(HttpService::Error(status));
  absl::StatusOr<std::string> body = encode(response);
  std::move(r.reply)(body.ok() ? Json(*std::move(body)) : HttpService::Error(body.status()));
}

// Sends `{}`, or the error.
void SendEmpty(Reply reply, const absl::Status& status) {
  std::move(reply)(status.ok() ? Json("{}") : HttpService::Error(status));
}

// The reply of an operation answered later, from another thread.
absl::AnyInvocable<void(absl::Status) &&> Later(Reply reply, Reservation held = Reservation()) {
  return [reply = std::move(reply), held = std::move(held)](absl::Status s) mutable {
    SendEmpty(std::move(reply), s);
    held.Release();
  };
}

// An inference: decode the JSON (or binary) body, Serving::Infer, encode.
void Infer(Serving& serving, HttpCall call, absl::string_view model, absl::string_view version,
           Reply reply);

void ServerLive(Serving& serving, Routed& r) {
  inference::ServerLiveResponse response;
  serving.ServerLive(&response);
  std::move(r.reply)(Empty(response.live() ? 200 : 400));
}

void ServerReady(Serving& serving, Routed& r) {
  inference::ServerReadyResponse response;
  serving.ServerReady(&response);
  std::move(r.reply)(Empty(response.ready() ? 200 : 400));
}

void ModelReady(Serving& serving, Routed& r) {
  inference::ModelReadyRequest request;
  request.set_name(r.args[0]);
  request.set_version(r.version());
  const absl::Status readiness = serving.ModelReadiness(request);
  if (readiness.ok() || absl::IsNotFound(readiness)) {
    return std::move(r.reply)(Empty(readiness.ok() ? 200 : 400));
  }
  HttpReply why = HttpService::Error(readiness);  // served, but missing what it needs
  why.status = 400;
  std::move(r.reply)(std::move(why));
}

void ServerMetadata(Serving& serving, Routed& r) {
  inference::ServerMetadataResponse response;
  Send(r, serving.ServerMetadata(r.authorization(), &response), response, &ServerMetadataJson);
}

void ModelMetadata(Serving& serving, Routed& r) {
  inference::ModelMetadataRequest request;
  request.set_name(r.args[0]);
  request.set_version(r.version());
  inference::ModelMetadataResponse response;
  Send(r, serving.ModelMetadata(r.authorization(), request, &response), response,
       &ModelMetadataJson);
}

void ModelConfig(Serving& serving, Routed& r) {
  inference::ModelConfigRequest request;
  request.set_name(r.args[0]);
  request.set_version(r.version());
  inference::ModelConfigResponse response;
  Send(r, serving.ModelConfig(r.authorization(), request, &response), response, &ModelConfigJson);
}

// One model's statistics, or (no argument) every model's.
void ModelStatistics(Serving& serving, Routed& r) {
  inference::ModelStatisticsRequest request;
  if (!r.args.empty()) request.set_name(r.args[0]);
  request.set_version(r.version());
  inference::ModelStatisticsResponse response;
  Send(r, serving.ModelStatistics(r.authorization(), request, &response), response,
       &ModelStatisticsJson);
}

void ModelInfer(Serving& serving, Routed& r) {
  Infer(serving, std::move(r.call), r.args[0], r.version(), std::move(r.reply));
}

void RepositoryIndex(Serving& serving, Routed& r) {
  absl::StatusOr<inference::RepositoryIndexRequest> request =
      ParseRepositoryIndexRequest(r.call.body);
  inference::RepositoryIndexResponse response;
  absl::Status status = request.status();
  if (status.ok()) status = serving.RepositoryIndex(r.authorization(), *request, &response);
  Send(r, status, response, &RepositoryIndexJson);
}

void RepositoryModelLoad(Serving& serving, Routed& r) {
  // The parse copies the body's strings and decodes its files: counted (as
  // twice the body) with the body, until the load is done.
  absl::Status room = serving.Grow(&r.call.reserved,
                                   2 * static_cast<int64_t>(r.call.body.size()), "the model load");
  if (!room.ok()) return SendEmpty(std::move(r.reply), room);
  absl::StatusOr<inference::RepositoryModelLoadRequest> request =
      ParseModelLoadRequest(r.call.body);
  if (!request.ok()) return SendEmpty(std::move(r.reply), request.status());
  r.call.body = std::string();
  request->set_model_name(r.args[0]);
  serving.RepositoryModelLoad(r.authorization(), *std::move(request), std::move(r.call.reserved),
                              Later(std::move(r.reply)));
}

void RepositoryModelUnload(Serving& serving, Routed& r) {
  inference::RepositoryModelUnloadRequest request;
  request.set_model_name(r.args[0]);
  serving.RepositoryModelUnload(r.authorization(), request, Later(std::move(r.reply)));
}

// The region a route names; INVALID_ARGUMENT for an empty name.
absl::StatusOr<std::string> Region(const Routed& r) {
  if (r.args.empty()) return std::string();
  if (r.args[0].empty()) return absl::InvalidArgumentError("shared memory region name is empty");
  return r.args[0];
}

void ShmStatus(Serving& serving, Routed& r) {
  inference::SystemSharedMemoryStatusRequest request;
  inference::SystemSharedMemoryStatusResponse response;
  absl::StatusOr<std::string> region = Region(r);
  absl::Status status = region.status();
  if (status.ok()) {
    request.set_name(*region);
    status = serving.SystemSharedMemoryStatus(r.authorization(), request, &response);
  }
  Send(r, status, response, &ShmStatusJson);
}

void ShmRegister(Serving& serving, Routed& r) {
  absl::StatusOr<std::string> region = Region(r);
  if (!region.ok()) return SendEmpty(std::move(r.reply), region.status());
  absl::StatusOr<inference::SystemSharedMemoryRegisterRequest> request =
      ParseShmRegisterRequest(r.call.body);
  if (!request.ok()) return SendEmpty(std::move(r.reply), request.status());
  request->set_name(*region);
  SendEmpty(std::move(r.reply), serving.SystemSharedMemoryRegister(r.authorization(), *request));
}

void ShmUnregister(Serving& serving, Routed& r) {
  absl::StatusOr<std::string> region = Region(r);
  if (!region.ok()) return SendEmpty(std::move(r.reply), region.status());
  inference::SystemSharedMemoryUnregisterRequest request;
  request.set_name(*region);
  SendEmpty(std::move(r.reply), serving.SystemSharedMemoryUnregister(r.authorization(), request));
}

void CudaSharedMemory(Serving&, Routed& r) {
  SendEmpty(std::move(r.reply),
            absl::UnimplementedError("CUDA shared memory is not served; use system shared memory"));
}

void LogSettings(Serving& serving, Routed& r) {
  absl::StatusOr<inference::LogSettingsRequest> request = ParseLogSettingsRequest(r.call.body);
  inference::LogSettingsResponse response;
  absl::Status status = request.status();
  if (status.ok()) status = serving.LogSettings(r.authorization(), *request, &response);
  Send(r, status, response, &LogSettingsJson);
}

// Global, or (an argument) the model's.
void TraceSetting(Serving& serving, Routed& r) {
  absl::StatusOr<inference::TraceSettingRequest> request = ParseTraceSettingRequest(r.call.body);
  inference::TraceSettingResponse response;
  absl::Status status = request.status();
  if (status.ok()) {
    if (!r.args.empty()) request->set_model_name(r.args[0]);
    status = serving.TraceSetting(r.authorization(), *request, &response);
  }
  Send(r, status, response, &TraceSettingJson);
}

enum Body { kControl, kMessage };
enum Access { kToken, kOpen };

// A route of the REST binding: its path under /v2 (`{}` matches one
// segment, `**` the rest), the methods it takes, whether it needs a token,
// how large its body may be, and its handler. The first match wins.
struct Route {
  const char* path;
  const char* methods;  // "GET", "POST" or "GET, POST"
  void (*handler)(Serving&, Routed&);
  Access access = kToken;
  Body body = kControl;
};

const Route kRoutes[] = {
    {"health/live", "GET", &ServerLive, kOpen},
    {"health/ready", "GET", &ServerReady, kOpen},
    {"", "GET", &ServerMetadata},
    {"logging", "GET, POST", &LogSettings},
    {"trace/setting", "GET, POST", &TraceSetting},
    {"models/{}/trace/setting", "GET, POST", &TraceSetting},
    {"cudasharedmemory/**", "GET, POST", &CudaSharedMemory},
    {"systemsharedmemory/status", "GET", &ShmStatus},
    {"systemsharedmemory/region/{}/status", "GET", &ShmStatus},
    {"systemsharedmemory/unregister", "POST", &ShmUnregister},
    {"systemsharedmemory/region/{}/unregister", "POST", &ShmUnregister},
    {"systemsharedmemory/region/{}/register", "POST", &ShmRegister},
    {"repository/index", "POST", &RepositoryIndex},
    {"repository/models/{}/load", "POST", &RepositoryModelLoad, kToken, kMessage},
    {"repository/models/{}/unload", "POST", &RepositoryModelUnload},
    {"models/stats", "GET", &ModelStatistics},
    {"models/{}", "GET", &ModelMetadata},
    {"models/{}/versions/{}", "GET", &ModelMetadata},
    {"models/{}/ready", "GET", &ModelReady, kOpen},
    {"models/{}/versions/{}/ready", "GET", &ModelReady, kOpen},
    {"models/{}/config", "GET", &ModelConfig},
    {"models/{}/versions/{}/config", "GET", &ModelConfig},
    {"models/{}/stats", "GET", &ModelStatistics},
    {"models/{}/versions/{}/stats", "GET", &ModelStatistics},
    {"models/{}/infer", "POST", &ModelInfer, kToken, kMessage},
    {"models/{}/versions/{}/infer", "POST", &ModelInfer, kToken, kMessage},
};

// Each route's path split into its segments, once for the process: the
// table is matched twice per request (Admit, Handle).
const std::vector<std::vector<absl::string_view>>& RoutePatterns() {
  static const auto* const patterns = [] {
    auto* split = new std::vector<std::vector<absl::string_view>>();
    for (const Route& route : kRoutes) {
      split->push_back(*route.path == '\0' ? std::vector<absl::string_view>()
                                             : absl::StrSplit(route.path, '/'));
    }
    return split;
  }();
  return *patterns;
}

// Whether the segments after "v2" match `pattern`; fills `args`.
bool Matches(const std::vector<absl::string_view>& pattern, const std::vector<std::string>& p,
             std::vector<std::string>* args) {
  args->clear();
  size_t i = 1;  // p[0] is "v2"
  for (absl::string_view part : pattern) {
    if (part == "**") return true;
    if (i >= p.size() || (part != "{}" && part != p[i])) return false;
    if (part == "{}") args->push_back(p[i]);
    ++i;
  }
  return i == p.size();
}

// The route of the segments (p[0] == "v2"), or nullptr.
const Route* FindRoute(const std::vector<std::string>& p, std::vector<std::string>* args) {
  const std::vector<std::vector<absl::string_view>>& patterns = RoutePatterns();
  for (size_t r = 0; r < patterns.size(); ++r) {
    if (Matches(patterns[r], p, args)) return &kRoutes[r];
  }
  return nullptr;
}

bool Allows(const Route& route, absl::string_view method) {
  for (absl::string_view m : absl::StrSplit(route.methods, ", ")) {
    if (m == method) return true;
  }
  return false;
}

void Infer(Serving& serving, HttpCall call, absl::string_view model, absl::string_view version,
           Reply reply) {
  std::shared_ptr<HttpInferRequest> request;
  absl::Status decoded = CatchAllocationFailure("the request", [&] {
    request = std::make_shared<HttpInferRequest>();
    request->body = std::move(call.body);
    return absl::OkStatus();
  });
  std::optional<int64_t> header_length;
  if (decoded.ok() && call.header_length) {
    int64_t n;
    if (!absl::SimpleAtoi(*call.header_length, &n)) {
      decoded = absl::InvalidArgumentError(absl::StrCat("Inference-Header-Content-Length '",
                                                        ClientText(*call.header_length),
                                                        "' is not a number"));
    } else {
      header_length = n;
    }
  }
  if (decoded.ok()) decoded = DecodeInferRequestJson(model, version, header_length, request.get());
  Serving::InferCall infer;
  infer.model_name = model;  // the metrics' label, as the client sent it
  if (call.authorization) infer.authorization = *call.authorization;
  if (call.traceparent) infer.traceparent = *call.traceparent;
  if (decoded.ok()) {
    infer.request = request->view;
  } else {
    infer.request = decoded;
  }
  infer.is_cancelled = std::move(call.is_cancelled);
  infer.reserved = std::move(call.reserved);
  serving.Infer(std::move(infer),
                  [request, reply = std::move(reply)](absl::StatusOr<InferResult> result) mutable {
                    if (!result.ok()) {
                      std::move(reply)(HttpService::Error(result.status()));
                      return result.status();
                    }
                    HttpResponseBody out;
                    absl::Status status = EncodeInferResponseJson(*result, *request, &out);
                    if (!status.ok()) {
                      std::move(reply)(HttpService::Error(status));
                      return status;
                    }
                    HttpReply r;
                    r.held = std::move(result->held);
                    r.body = std::move(out.body);
                    r.header_length = out.header_length;
                    if (out.header_length) r.content_type = "application/octet-stream";
                    std::move(reply)(std::move(r));
                    return absl::OkStatus();
                  });
}

}  // namespace

absl::StatusOr<int64_t> HttpService::Admit(const HttpHead& head) const {
  if (head.authorization.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(head.authorization.size(), " Authorization headers; send one"));
  }
  absl::StatusOr<std::vector<std::string>> parsed = PathSegments(head.target);
  // Handle answers a bad path, or one outside /v2, without a token.
  if (!parsed.ok() || parsed->empty() || (*parsed)[0] != "v2") return kMaxControlBodyBytes;
  std::vector<std::string> args;
  const Route* route = FindRoute(*parsed, &args);
  if (route != nullptr && route->access == kOpen) return kMaxControlBodyBytes;
  std::optional<absl::string_view> authorization;
  if (!head.authorization.empty()) authorization = head.authorization.front();
  GEMMSERVE_RETURN_IF_ERROR(serving_->Authenticate(authorization));
  if (route != nullptr && route->handler == &ShmRegister) {
    GEMMSERVE_RETURN_IF_ERROR(serving_->CheckSharedMemoryEnabled());
  }
  if (route != nullptr && route->body == kMessage) return serving_->max_message_bytes();
  return kMaxControlBodyBytes;
}

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists: return 409;
    case absl::StatusCode::kDeadlineExceeded: return 408;
    case absl::StatusCode::kResourceExhausted:
      return IsOutOfMemory(status) ? 429 : 413;  // the mark, never the message
    case absl::StatusCode::kCancelled: return 499;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

HttpReply HttpService::Error(const absl::Status& status) {
  const absl::Status shown = PublicStatus(status);
  HttpReply r;
  r.status = HttpStatusOf(shown);
  r.body = ErrorJson(shown.message());
  return r;
}

void HttpService::Handle(HttpCall call, Reply reply) {
  absl::StatusOr<std::vector<std::string>> parsed = PathSegments(call.target);
  if (!parsed.ok()) return std::move(reply)(Error(parsed.status()));
  const std::vector<std::string>& p = *parsed;
  if (p.empty() || p[0] != "v2") {
    return std::move(reply)(Error(absl::NotFoundError(
        absl::StrCat("no such endpoint '", ClientText(call.target), "'; the API is under /v2"))));
  }
  Routed routed{std::move(call), {}, std::move(reply)};
  const Route* route = FindRoute(p, &routed.args);
  if (route == nullptr || route->access != kOpen) {
    // The API authenticates each call itself; an unknown route is answered
    // only to a caller with a token, as every other.
    if (absl::Status auth = serving_->Authenticate(routed.authorization()); !auth.ok()) {
      return std::move(routed.reply)(Error(auth));
    }
  }
  if (route == nullptr) {
    return std::move(routed.reply)(Error(absl::NotFoundError(
        absl::StrCat("no such endpoint '", ClientText(routed.call.target), "'"))));
  }
  if (!Allows(*route, routed.call.method)) {
    HttpReply r = Error(absl::UnimplementedError(absl::StrCat(
        ClientText(routed.call.method, 16), " is not allowed here; use ", route->methods)));
    r.status = 405;
    return std::move(routed.reply)(std::move(r));
  }
  if (routed.call.method == "GET") routed.call.body.clear();  // a GET's body means nothing
  route->handler(*serving_, routed);
}

}  // namespace gemmserve
