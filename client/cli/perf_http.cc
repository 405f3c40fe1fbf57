#include "client/cli/perf_http.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include <google/protobuf/util/json_util.h>
#include <rapidjson/document.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/cpp/client.h"
#include "server/common/status_macros.h"
#include "server/tensor/datatype.h"
#include "server/tensor/shape.h"

namespace gemmserve::client {
namespace {

using Clock = std::chrono::steady_clock;

void AppendJson(absl::string_view text, std::string* out) {
  out->push_back('"');
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(out, "\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

// A tensor's parameters as JSON members (string and integer ones).
void AppendParameters(const google::protobuf::Map<std::string, inference::InferParameter>& params,
                      std::string* out) {
  bool first = true;
  for (const auto& [key, value] : params) {
    if (!first) out->push_back(',');
    first = false;
    AppendJson(key, out);
    out->push_back(':');
    switch (value.parameter_choice_case()) {
      case inference::InferParameter::kStringParam: AppendJson(value.string_param(), out); break;
      case inference::InferParameter::kInt64Param: absl::StrAppend(out, value.int64_param()); break;
      case inference::InferParameter::kUint64Param:
        absl::StrAppend(out, value.uint64_param());
        break;
      case inference::InferParameter::kBoolParam:
        out->append(value.bool_param() ? "true" : "false");
        break;
      default: out->append("null"); break;
    }
  }
}

std::string Request(absl::string_view method, absl::string_view host, absl::string_view path,
                    absl::string_view body, absl::string_view extra_headers = "") {
  return absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: ", host, "\r\n", extra_headers,
                      body.empty() && method == "GET"
                          ? std::string()
                          : absl::StrCat("Content-Length: ", body.size(), "\r\n"),
                      "\r\n", body);
}

absl::Status HttpError(int status, absl::string_view body, absl::string_view what) {
  std::string message(body);
  rapidjson::Document doc;
  doc.Parse(body.data(), body.size());
  if (!doc.HasParseError() && doc.IsObject() && doc.HasMember("error") && doc["error"].IsString()) {
    message = doc["error"].GetString();
  }
  return absl::Status(HttpStatusCode(status), absl::StrCat(what, ": HTTP ", status, ": ", message));
}

template <typename Message>
absl::StatusOr<Message> FromJson(const std::string& body, absl::string_view what) {
  Message message;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(body, &message, options).ok()) {
    return absl::InternalError(absl::StrCat(what, ": the server's JSON does not parse"));
  }
  return message;
}

}  // namespace

absl::StatusCode HttpStatusCode(int http_status) {
  switch (http_status) {
    case 200: return absl::StatusCode::kOk;
    case 400: return absl::StatusCode::kInvalidArgument;
    case 401: return absl::StatusCode::kUnauthenticated;
    case 403: return absl::StatusCode::kPermissionDenied;
    case 404: return absl::StatusCode::kNotFound;
    case 409: return absl::StatusCode::kAlreadyExists;
    case 413: return absl::StatusCode::kResourceExhausted;
    case 429:
    case 503: return absl::StatusCode::kUnavailable;
    case 501: return absl::StatusCode::kUnimplemented;
    case 504: return absl::StatusCode::kDeadlineExceeded;
    default: return absl::StatusCode::kInternal;
  }
}

std::string HttpInferRequestBytes(absl::string_view host,
                                  const inference::ModelInferRequest& request) {
  std::string json = "{\"inputs\":[";
  int raw = 0;
  std::string binary;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& input = request.inputs(i);
    if (i > 0) json.push_back(',');
    json += "{\"name\":";
    AppendJson(input.name(), &json);
    json += ",\"datatype\":";
    AppendJson(input.datatype(), &json);
    json += ",\"shape\":[";
    for (int d = 0; d < input.shape_size(); ++d) {
      absl::StrAppend(&json, d > 0 ? "," : "", input.shape(d));
    }
    json += "],\"parameters\":{";
    if (input.parameters().contains("shared_memory_region")) {
      AppendParameters(input.parameters(), &json);
    } else {
      const std::string& bytes = request.raw_input_contents(raw++);
      absl::StrAppend(&json, "\"binary_data_size\":", bytes.size());
      binary += bytes;
    }
    json += "}}";
  }
  json += "]";
  if (request.outputs_size() > 0) {
    json += ",\"outputs\":[";
    for (int i = 0; i < request.outputs_size(); ++i) {
      const auto& output = request.outputs(i);
      if (i > 0) json.push_back(',');
      json += "{\"name\":";
      AppendJson(output.name(), &json);
      json += ",\"parameters\":{";
      if (output.parameters().contains("shared_memory_region")) {
        AppendParameters(output.parameters(), &json);
      } else {
        json += "\"binary_data\":true";
      }
      json += "}}";
    }
    json += "]";
  } else {
    json += ",\"parameters\":{\"binary_data_output\":true}";
  }
  json += "}";
  const std::string path = absl::StrCat("/v2/models/", request.model_name(), "/infer");
  return Request("POST", host, path, json + binary,
                 absl::StrCat("Content-Type: application/octet-stream\r\n"
                              "Inference-Header-Content-Length: ",
                              json.size(), "\r\n"));
}

absl::StatusOr<std::unique_ptr<HttpConnection>> HttpConnection::Connect(const std::string& address,
                                                                        absl::Duration timeout) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--url '", address, "' is not HOST:PORT"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", address));
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", address, ": ", std::strerror(errno)));
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const absl::Duration t = timeout == absl::InfiniteDuration() ? absl::Seconds(60) : timeout;
  timeval tv = absl::ToTimeval(t);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return std::unique_ptr<HttpConnection>(new HttpConnection(fd));
}

HttpConnection::~HttpConnection() { ::close(fd_); }

absl::StatusOr<int> HttpConnection::RoundTrip(absl::string_view request, std::string* body) {
  auto broken = [](absl::string_view what) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return absl::DeadlineExceededError(absl::StrCat("no answer in time (", what, ")"));
    }
    return absl::UnavailableError(absl::StrCat("the connection broke (", what, ")"));
  };
  closed_ = true;  // until an answer is read whole
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return broken("sending");
    sent += static_cast<size_t>(n);
  }
  auto fill = [&]() -> absl::Status {
    char chunk[65536];
    for (;;) {
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return broken("reading");
      if (n == 0) {
        errno = 0;
        return broken("closed by the server");
      }
      buffer_.append(chunk, static_cast<size_t>(n));
      return absl::OkStatus();
    }
  };
  size_t end;
  while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
    if (buffer_.size() > (1 << 20)) return absl::InternalError("an HTTP header over 1 MiB");
    GEMMSERVE_RETURN_IF_ERROR(fill());
  }
  const absl::string_view head(buffer_.data(), end);
  int status = 0;
  int64_t length = -1;
  bool close = false;
  bool first = true;
  for (absl::string_view line : absl::StrSplit(head, "\r\n")) {
    if (first) {
      first = false;
      std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(' ', 2));
      if (parts.size() < 2 || !absl::SimpleAtoi(parts[1], &status)) {
        return absl::InternalError("the server's answer is not HTTP");
      }
      continue;
    }
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    const absl::string_view name = line.substr(0, colon);
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (absl::EqualsIgnoreCase(name, "content-length") &&
        (!absl::SimpleAtoi(value, &length) || length < 0 || length > kMaxHttpAnswerBytes)) {
      return absl::InternalError("a bad Content-Length from the server");
    }
    if (absl::EqualsIgnoreCase(name, "connection") && absl::EqualsIgnoreCase(value, "close")) {
      close = true;
    }
  }
  if (length < 0) return absl::InternalError("an answer without Content-Length");
  const size_t total = end + 4 + static_cast<size_t>(length);
  while (buffer_.size() < total) GEMMSERVE_RETURN_IF_ERROR(fill());
  body->assign(buffer_, end + 4, static_cast<size_t>(length));
  buffer_.erase(0, total);
  closed_ = close;
  ++answers_;
  return status;
}

absl::StatusOr<std::string> HttpPerfClient::Call(const std::string& request,
                                                 absl::Duration timeout) const {
  GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<HttpConnection> c,
                             HttpConnection::Connect(address_, timeout));
  std::string body;
  GEMMSERVE_ASSIGN_OR_RETURN(const int status, c->RoundTrip(request, &body));
  if (status != 200) return HttpError(status, body, "the server");
  return body;
}

absl::StatusOr<inference::ModelMetadataResponse> HttpPerfClient::ModelMetadata(
    const std::string& model, absl::Duration timeout) const {
  GEMMSERVE_ASSIGN_OR_RETURN(std::string body,
                             Call(Request("GET", address_, "/v2/models/" + model, ""), timeout));
  return FromJson<inference::ModelMetadataResponse>(body, "model metadata");
}

absl::StatusOr<inference::ModelConfig> HttpPerfClient::ModelConfig(const std::string& model,
                                                                   absl::Duration timeout) const {
  GEMMSERVE_ASSIGN_OR_RETURN(
      std::string body,
      Call(Request("GET", address_, "/v2/models/" + model + "/config", ""), timeout));
  return FromJson<inference::ModelConfig>(body, "model config");
}

absl::StatusOr<inference::ModelStatistics> HttpPerfClient::ModelStatistics(
    const std::string& model, absl::Duration timeout) const {
  GEMMSERVE_ASSIGN_OR_RETURN(
      std::string body,
      Call(Request("GET", address_, "/v2/models/" + model + "/stats", ""), timeout));
  GEMMSERVE_ASSIGN_OR_RETURN(inference::ModelStatisticsResponse stats,
                             FromJson<inference::ModelStatisticsResponse>(body, "statistics"));
  if (stats.model_stats_size() != 1) {
    return absl::InternalError("the statistics of one model hold another count of entries");
  }
  return stats.model_stats(0);
}

absl::StatusOr<std::vector<HostTensor>> HttpPerfClient::Infer(const std::string& model,
                                                              std::vector<HostTensor> inputs,
                                                              absl::Duration timeout) const {
  GEMMSERVE_ASSIGN_OR_RETURN(
      std::string body,
      Call(HttpInferRequestBytes(address_, MakeInferRequest(model, std::move(inputs))), timeout));
  // The JSON header is all that is read: the binary tensors follow it.
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseStopWhenDoneFlag>(body.data(), body.size());
  if (doc.HasParseError() || !doc.IsObject() || !doc.HasMember("outputs") ||
      !doc["outputs"].IsArray()) {
    return absl::InternalError("the server's inference answer does not parse");
  }
  std::vector<HostTensor> outputs;
  // Every output's bytes follow the JSON header: they add up to at most the body.
  uint64_t binary_total = 0;
  for (const rapidjson::Value& o : doc["outputs"].GetArray()) {
    if (!o.IsObject() || !o.HasMember("name") || !o["name"].IsString() ||
        !o.HasMember("datatype") || !o["datatype"].IsString() || !o.HasMember("shape") ||
        !o["shape"].IsArray() || !o.HasMember("parameters") || !o["parameters"].IsObject() ||
        !o["parameters"].HasMember("binary_data_size") ||
        !o["parameters"]["binary_data_size"].IsUint64()) {
      return absl::InternalError("the server's inference answer lacks an output's size");
    }
    const uint64_t size = o["parameters"]["binary_data_size"].GetUint64();
    if (size > body.size() || binary_total + size > body.size()) {
      return absl::InternalError("the server's outputs are larger than its answer");
    }
    binary_total += size;
    HostTensor t{o["name"].GetString(), o["datatype"].GetString(), {}, {}};
    for (const rapidjson::Value& d : o["shape"].GetArray()) {
      t.shape.push_back(d.IsInt64() ? d.GetInt64() : 0);
    }
    t.bytes.resize(o["parameters"]["binary_data_size"].GetUint64());
    outputs.push_back(std::move(t));
  }
  return outputs;
}

absl::Status HttpPerfClient::RegisterSystemSharedMemory(const std::string& name,
                                                        const std::string& key, int64_t byte_size,
                                                        absl::Duration timeout) const {
  std::string body = "{\"key\":";
  AppendJson(key, &body);
  absl::StrAppend(&body, ",\"offset\":0,\"byte_size\":", byte_size, "}");
  return Call(Request("POST", address_,
                      absl::StrCat("/v2/systemsharedmemory/region/", name, "/register"), body,
                      "Content-Type: application/json\r\n"),
              timeout)
      .status();
}

absl::Status HttpPerfClient::UnregisterSystemSharedMemory(const std::string& name,
                                                          absl::Duration timeout) const {
  return Call(Request("POST", address_,
                      absl::StrCat("/v2/systemsharedmemory/region/", name, "/unregister"), ""),
              timeout)
      .status();
}

namespace {

// The load: every caller thread has its own connection. Closed loop: each
// sends its next call as its previous one is answered. Open loop: the
// driving thread makes Poisson arrivals and hands each to an idle caller,
// or drops it when all are busy.
class HttpLoadRun {
 public:
  HttpLoadRun(std::string address, std::vector<std::string> requests, const PerfOptions& options)
      : address_(std::move(address)), requests_(std::move(requests)), options_(options) {}

  PerfResult Run() {
    const PerfWindow window = PerfWindow::StartingNow(options_);
    window_ = window;
    const bool open_loop = options_.rate > 0;
    std::vector<std::thread> callers;
    for (int i = 0; i < options_.concurrency; ++i) {
      callers.emplace_back([this, open_loop] { Caller(open_loop); });
    }
    if (open_loop) Arrivals();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : callers) t.join();

    PerfOptions options = options_;
    options.http = true;
    return MakePerfResult(options, std::move(latencies_us_), std::move(errors_), dropped_);
  }

 private:
  void Caller(bool open_loop) {
    std::unique_ptr<HttpConnection> connection;
    std::string body;
    for (;;) {
      if (open_loop) {
        std::unique_lock<std::mutex> lock(mu_);
        ++idle_;
        wake_.wait(lock, [this] { return stopping_ || due_ > 0; });
        --idle_;
        if (due_ == 0) return;  // stopping, nothing left to send
        --due_;
      } else if (Clock::now() >= window_.end) {
        return;
      }
      const Clock::time_point sent = Clock::now();
      absl::Status status;
      if (connection == nullptr) {
        absl::StatusOr<std::unique_ptr<HttpConnection>> c =
            HttpConnection::Connect(address_, options_.timeout);
        if (c.ok()) {
          connection = *std::move(c);
        } else {
          status = c.status();
        }
      }
      if (connection != nullptr) {
        const std::string& request =
            requests_[next_.fetch_add(1, std::memory_order_relaxed) % requests_.size()];
        const bool reused = connection->reused();
        absl::StatusOr<int> http = connection->RoundTrip(request, &body);
        if (!http.ok() && reused && absl::IsUnavailable(http.status())) {
          // The server closed the kept-alive connection meanwhile (its idle
          // timeout): once more on a new one.
          absl::StatusOr<std::unique_ptr<HttpConnection>> c =
              HttpConnection::Connect(address_, options_.timeout);
          connection = c.ok() ? *std::move(c) : nullptr;
          http = c.ok() ? connection->RoundTrip(request, &body) : c.status();
        }
        if (!http.ok()) {
          status = http.status();
        } else if (*http != 200) {
          status = absl::Status(HttpStatusCode(*http), "");
        }
        if (connection != nullptr && connection->closed()) connection.reset();
      }
      const Clock::time_point done = Clock::now();
      std::lock_guard<std::mutex> lock(mu_);
      if (window_.Measures(done)) {
        if (status.ok()) {
          latencies_us_.push_back(
              std::chrono::duration_cast<std::chrono::microseconds>(done - sent).count());
        } else {
          ++errors_[std::string(absl::StatusCodeToString(status.code()))];
        }
      }
      if (!status.ok() && connection == nullptr && !open_loop) {
        // A server that is down: do not spin on connect.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }

  void Arrivals() {
    SendPoissonArrivals(options_, window_, [&](Clock::time_point arrival) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (idle_ <= due_) {
          if (arrival >= window_.begin) ++dropped_;
          return true;
        }
        ++due_;
      }
      wake_.notify_one();
      return true;
    });
  }

  const std::string address_;
  const std::vector<std::string> requests_;
  const PerfOptions options_;
  std::atomic<uint64_t> next_{0};
  PerfWindow window_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  int idle_ = 0;  // open loop: callers waiting for an arrival
  int due_ = 0;   // open loop: arrivals handed out, not yet taken
  std::vector<int64_t> latencies_us_;
  std::map<std::string, int64_t> errors_;
  int64_t dropped_ = 0;
};

}  // namespace

absl::StatusOr<PerfResult> RunHttpLoad(const std::string& address,
                                       const std::vector<inference::ModelInferRequest>& requests,
                                       std::vector<PerfInput> inputs, const PerfOptions& options) {
  GEMMSERVE_RETURN_IF_ERROR(CheckPerfOptions(options));
  if (options.concurrency > kPerfHttpMaxConcurrency) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--protocol=http takes at most ", kPerfHttpMaxConcurrency, " callers (--concurrency)"));
  }
  if (requests.empty()) return absl::InvalidArgumentError("perf: no request to send");
  std::vector<std::string> bytes;
  for (const inference::ModelInferRequest& r : requests) {
    bytes.push_back(HttpInferRequestBytes(address, r));
  }
  HttpLoadRun run(address, std::move(bytes), options);
  PerfResult result = run.Run();
  result.inputs = std::move(inputs);
  result.distinct_requests = static_cast<int>(requests.size());
  result.system_shared_memory = options.system_shared_memory;
  result.http = true;
  return result;
}

}  // namespace gemmserve::client
