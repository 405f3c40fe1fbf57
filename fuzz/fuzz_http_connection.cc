// Fuzzes the HTTP front end as a client on a socket sees it: whole
// connections to a real HttpServer over loopback, serving the built-in models
// (Serving with small limits). The first byte says how the rest is sent: in
// one write or in pieces of (byte & 0x3f) + 1 bytes, so that framing, chunked
// bodies, compression, pipelining and refusals meet every split; the write
// side is then shut, and the answer read until the server closes. Nothing
// may crash or trip a sanitizer; whatever the server sends starts as an
// HTTP/1.x response; after every input the server answers a health check on a
// new connection and holds no bytes against --max_inflight_bytes once its
// connections are gone.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "fuzz/fuzz_support.h"
#include "server/http/http_server.h"
#include "server/root/serving_assembly.h"
#include "server/serving/serving.h"

namespace gemmserve {
namespace fuzz {
namespace {

std::unique_ptr<Serving> serving;
std::unique_ptr<HttpServer> http;

int Connect() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0, "socket failed");
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(http->port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  FUZZ_CHECK(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0,
             "the server does not accept");
  return fd;
}

// Sends `bytes` (in pieces of `piece`, 0: at once), shuts the write side and
// returns what came back until the server closed (or 5 s of silence).
std::string Exchange(const char* bytes, size_t size, size_t piece) {
  const int fd = Connect();
  for (size_t at = 0; at < size;) {
    const size_t n = piece == 0 ? size - at : std::min(piece, size - at);
    const ssize_t sent = send(fd, bytes + at, n, MSG_NOSIGNAL);
    if (sent <= 0) break;  // refused and closed before the rest
    at += static_cast<size_t>(sent);
  }
  shutdown(fd, SHUT_WR);
  std::string answer;
  char buffer[65536];
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    answer.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return answer;
}

}  // namespace
}  // namespace fuzz
}  // namespace gemmserve

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace gemmserve;
  ServingOptions options;
  options.engine.compute_threads = 1;
  options.engine.max_message_bytes = 1 << 20;
  options.engine.max_output_bytes = 4 << 20;
  options.engine.max_inflight_bytes = 64 << 20;
  const absl::Status checked = CheckServingOptions(options);
  FUZZ_CHECK(checked.ok(), "CheckServingOptions: %s", checked.ToString().c_str());
  absl::StatusOr<std::unique_ptr<Serving>> started = AssembleServing(options);
  FUZZ_CHECK(started.ok(), "AssembleServing: %s", started.status().ToString().c_str());
  fuzz::serving = *std::move(started);
  HttpOptions http_options;
  http_options.port = 0;
  http_options.threads = 1;
  http_options.idle_timeout_ms = 500;
  http_options.request_timeout_ms = 500;
  auto http = HttpServer::Start(fuzz::serving.get(), "127.0.0.1", http_options);
  FUZZ_CHECK(http.ok(), "HttpServer::Start: %s", http.status().ToString().c_str());
  fuzz::http = *std::move(http);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gemmserve::fuzz;
  if (size == 0) return 0;
  const size_t piece = (data[0] & 0x80) ? (data[0] & 0x3f) + 1 : 0;
  const std::string answer = Exchange(reinterpret_cast<const char*>(data + 1), size - 1, piece);
  FUZZ_CHECK(
      answer.empty() || answer.rfind("HTTP/1.1 ", 0) == 0 || answer.rfind("HTTP/1.0 ", 0) == 0,
      "the server sent something other than an HTTP/1.x response");
  // Three tries, 5 s each: a machine loaded by other fuzzers may starve one
  // (each failed try is printed); a server that stopped answering fails all.
  static const char kHealth[] = "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n";
  std::string health;
  for (int attempt = 0; attempt < 3; ++attempt) {
    health = Exchange(kHealth, sizeof(kHealth) - 1, 0);
    if (health.rfind("HTTP/1.1 200", 0) == 0) break;
    std::fprintf(stderr, "fuzz_http_connection: health try %d got %zu bytes: '%s'\n", attempt,
                 health.size(), health.substr(0, 200).c_str());
  }
  FUZZ_CHECK(health.rfind("HTTP/1.1 200", 0) == 0, "health does not answer after the input");
  // Every connection is closed and answered: nothing stays counted for long.
  for (int i = 0; i < 200 && serving->engine().inflight_bytes() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  FUZZ_CHECK(serving->engine().inflight_bytes() == 0, "%lld bytes stay counted",
             static_cast<long long>(serving->engine().inflight_bytes()));
  return 0;
}
