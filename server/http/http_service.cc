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

constexpr char kServerName[] = "gemmserve";

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

// The routes that need no token, as Triton counts them: server liveness and
// readiness, and a model's readiness.
bool IsHealthRoute(const std::vector<std::string>& p) {
  if (p.size() == 3 && p[1] == "health") return true;
  const bool model = p.size() >= 4 && p[1] == "models";
  return model && p.back() == "ready" && (p.size() == 4 || (p.size() == 6 && p[3] == "versions"));
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
  const std::vector<std::string>& p = *parsed;
  if (IsHealthRoute(p)) return kMaxControlBodyBytes;
  std::optional<absl::string_view> authorization;
  if (!head.authorization.empty()) authorization = head.authorization.front();
  GEMMSERVE_RETURN_IF_ERROR(serving_->Authenticate(authorization));
  if (p.size() >= 2 && p[1] == "systemsharedmemory" && p.back() == "register") {
    GEMMSERVE_RETURN_IF_ERROR(serving_->shm().CheckEnabled());
  }
  const bool infer = p.size() >= 4 && p[1] == "models" && p.back() == "infer";
  const bool load = p.size() == 5 && p[1] == "repository" && p[4] == "load";
  if (infer || load) return serving_->engine().options().max_message_bytes;
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
      return absl::StartsWith(status.message(), "out of memory") ? 429 : 413;
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
  const bool get = call.method == "GET";
  const bool post = call.method == "POST";
  auto method_not_allowed = [&](const char* allowed) {
    HttpReply r = Error(absl::UnimplementedError(
        absl::StrCat(call.method.substr(0, 16), " is not allowed here; use ", allowed)));
    r.status = 405;
    std::move(reply)(std::move(r));
  };
  auto ok = [&](std::string body) { std::move(reply)(Json(std::move(body))); };
  if (p.empty() || p[0] != "v2") {
    return std::move(reply)(Error(absl::NotFoundError(
        absl::StrCat("no such endpoint '", ClientText(call.target), "'; the API is under /v2"))));
  }
  // Health: no token needed, as on gRPC.
  if (p.size() == 3 && p[1] == "health" && (p[2] == "live" || p[2] == "ready")) {
    if (!get) return method_not_allowed("GET");
    const bool ready = p[2] == "live" || !serving_->draining();
    return std::move(reply)(Empty(ready ? 200 : 400));
  }
  if (absl::Status auth = serving_->Authenticate(call.authorization);
      !auth.ok() && !IsHealthRoute(p)) {
    return std::move(reply)(Error(auth));
  }
  if (p.size() == 1) {
    if (!get) return method_not_allowed("GET");
    return ok(ServerMetadataJson(kServerName, kServerVersion, serving_->Extensions()));
  }
  if (p.size() == 2 && p[1] == "logging") {
    if (!get && !post) return method_not_allowed("GET, POST");
    absl::StatusOr<inference::LogSettingsRequest> request =
        ParseLogSettingsRequest(post ? absl::string_view(call.body) : absl::string_view());
    if (!request.ok()) return std::move(reply)(Error(request.status()));
    inference::LogSettingsResponse response;
    absl::Status s = serving_->LogSettings(call.authorization, *request, &response);
    return s.ok() ? ok(LogSettingsJson(response)) : std::move(reply)(Error(s));
  }
  if ((p.size() == 3 && p[1] == "trace" && p[2] == "setting") ||
      (p.size() == 5 && p[1] == "models" && p[3] == "trace" && p[4] == "setting")) {
    if (!get && !post) return method_not_allowed("GET, POST");
    absl::StatusOr<inference::TraceSettingRequest> request =
        ParseTraceSettingRequest(post ? absl::string_view(call.body) : absl::string_view());
    if (!request.ok()) return std::move(reply)(Error(request.status()));
    if (p.size() == 5) request->set_model_name(p[2]);
    inference::TraceSettingResponse response;
    absl::Status s = serving_->TraceSetting(call.authorization, *request, &response);
    return s.ok() ? ok(TraceSettingJson(response)) : std::move(reply)(Error(s));
  }
  if (p[1] == "cudasharedmemory") {
    return std::move(reply)(Error(
        absl::UnimplementedError("CUDA shared memory is not served; use system shared memory")));
  }
  if (p[1] == "systemsharedmemory") {
    // Triton's routes: [region/{r}/]status (GET), region/{r}/register,
    // [region/{r}/]unregister (POST).
    const std::string owner = serving_->ShmOwner(call.authorization);
    std::string region;
    std::string action;
    if (p.size() == 3) {
      action = p[2];
    } else if (p.size() == 5 && p[2] == "region") {
      region = p[3];
      action = p[4];
      if (region.empty()) {
        return std::move(reply)(
            Error(absl::InvalidArgumentError("shared memory region name is empty")));
      }
    }
    if (action == "status") {
      if (!get) return method_not_allowed("GET");
      auto regions = serving_->shm().Status(owner, region);
      if (!regions.ok()) return std::move(reply)(Error(regions.status()));
      return ok(ShmStatusJson(*regions));
    }
    if (action == "unregister") {
      if (!post) return method_not_allowed("POST");
      absl::Status s = serving_->shm().Unregister(owner, region);
      return std::move(reply)(s.ok() ? Json("{}") : Error(s));
    }
    if (action == "register" && !region.empty()) {
      if (!post) return method_not_allowed("POST");
      if (absl::Status on = serving_->shm().CheckEnabled(); !on.ok()) {
        return std::move(reply)(Error(on));
      }
      absl::StatusOr<ShmRegisterBody> body = ParseShmRegisterRequest(call.body);
      if (!body.ok()) return std::move(reply)(Error(body.status()));
      absl::Status s =
          serving_->shm().Register(owner, region, body->key, body->offset, body->byte_size);
      return std::move(reply)(s.ok() ? Json("{}") : Error(s));
    }
  }
  if (p[1] == "repository") {
    if (p.size() == 3 && p[2] == "index") {
      if (!post) return method_not_allowed("POST");
      absl::StatusOr<bool> ready = ParseRepositoryIndexRequest(call.body);
      if (!ready.ok()) return std::move(reply)(Error(ready.status()));
      std::vector<ModelStatus> index;
      for (ModelStatus& s : serving_->repository().Index()) {
        if (!*ready || s.state == ModelState::kReady) index.push_back(std::move(s));
      }
      return ok(RepositoryIndexJson(index));
    }
    if (p.size() == 5 && p[2] == "models" && (p[4] == "load" || p[4] == "unload")) {
      if (!post) return method_not_allowed("POST");
      if (p[4] == "unload") {
        // Queued behind any load in progress; the reply goes from there.
        auto shared = std::make_shared<Reply>(std::move(reply));
        serving_->repository().UnloadAsync(p[3], [shared](absl::Status s) {
          std::move (*shared)(s.ok() ? Json("{}") : Error(s));
        });
        return;
      }
      // The parse copies the body's strings and decodes its files: counted
      // (as twice the body) with the body, until the load is done.
      absl::Status room = serving_->engine().Grow(
          &call.reserved, 2 * static_cast<int64_t>(call.body.size()), "the model load");
      if (!room.ok()) return std::move(reply)(Error(room));
      absl::StatusOr<ModelLoadRequest> load = ParseModelLoadRequest(call.body);
      if (!load.ok()) return std::move(reply)(Error(load.status()));
      call.body = std::string();
      // The load runs on the repository's thread; the reply goes from there.
      auto shared = std::make_shared<Reply>(std::move(reply));
      serving_->repository().LoadAsync(
          p[3], *std::move(load),
          [shared, held = std::move(call.reserved)](absl::Status s) mutable {
            std::move (*shared)(s.ok() ? Json("{}") : Error(s));
            held.Release();
          });
      return;
    }
  }
  if (p[1] == "models") {
    if (p.size() == 3 && p[2] == "stats") {
      if (!get) return method_not_allowed("GET");
      std::vector<ModelStatistics> stats;
      for (const auto& served : serving_->engine().models()) stats.push_back(served->statistics());
      return ok(ModelStatisticsJson(stats));
    }
    if (p.size() >= 3) {
      const std::string& model = p[2];
      size_t next = 3;
      std::string version;
      if (p.size() >= 5 && p[3] == "versions") {
        version = p[4];
        next = 5;
      }
      const std::string tail = p.size() == next ? "" : p.size() == next + 1 ? p[next] : "/";
      if (tail == "infer") {
        if (!post) return method_not_allowed("POST");
        return Infer(std::move(call), model, version, std::move(reply));
      }
      if (tail.empty() || tail == "ready" || tail == "config" || tail == "stats") {
        if (!get) return method_not_allowed("GET");
        auto served = serving_->engine().FindModel(model, version);
        if (tail == "ready") return std::move(reply)(Empty(served.ok() ? 200 : 400));
        if (!served.ok()) return std::move(reply)(Error(served.status()));
        if (tail.empty()) return ok(ModelMetadataJson((*served)->metadata()));
        if (tail == "config") return ok(ModelConfigJson(**served));
        return ok(ModelStatisticsJson({(*served)->statistics()}));
      }
    }
  }
  std::move(reply)(
      Error(absl::NotFoundError(absl::StrCat("no such endpoint '", ClientText(call.target), "'"))));
}

void HttpService::Infer(HttpCall call, absl::string_view model, absl::string_view version,
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
  serving_->Infer(std::move(infer),
                  [request, reply = std::move(reply)](absl::StatusOr<InferResult> result) mutable {
                    if (!result.ok()) {
                      std::move(reply)(Error(result.status()));
                      return result.status();
                    }
                    HttpResponseBody out;
                    absl::Status status = EncodeInferResponseJson(*result, *request, &out);
                    if (!status.ok()) {
                      std::move(reply)(Error(status));
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

}  // namespace gemmserve
