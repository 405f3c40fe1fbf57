// HttpServer: the REST front end's sockets, on Boost.Beast over Asio. A few
// I/O threads (--http_threads) run every connection asynchronously, and
// nothing is spent on a request before it is admitted:
//   - its head is read (within --http_idle_timeout_ms, capped at
//     --http_max_header_bytes) and judged alone: framing (RFC 9112: a
//     Transfer-Encoding other than exactly `chunked` is 400 and closes), the
//     token and the route's body limit (HttpService::Admit), then the
//     declared body size is held against --max_inflight_bytes (a chunked
//     body's chunks as they are announced) before a byte of it is read or
//     `100 Continue` is sent;
//   - the body is read within --http_request_timeout_ms; a compressed one is
//     measured, counted, then inflated into a buffer of exactly its size;
//   - a large or compressed body is inflated and decoded on a small pool of
//     its own, off the I/O threads, which only move bytes and judge heads
//     (small bodies are decoded where they were read);
//   - the reply's bytes stay counted until they are written; a client that
//     stops reading is cut at --http_request_timeout_ms and its bytes freed.
// A slow or silent client only holds its own connection, never a thread. A
// client that closes its connection while its inference is queued cancels
// it, as a cancelled gRPC call does. Accept backs off when descriptors run
// out, and a handler that throws is logged, never fatal.
//
//   HttpOptions options;
//   options.port = 0;
//   GEMMSERVE_RETURN_IF_ERROR(CheckHttpOptions(options));
//   GEMMSERVE_ASSIGN_OR_RETURN(auto http, HttpServer::Start(&serving, "127.0.0.1", options));
//   std::cout << "gemmserve http on " << http->address() << "\n";
//   ...
//   http->Shutdown(deadline);  // after Serving has drained
#ifndef GEMMSERVE_SERVER_HTTP_HTTP_SERVER_H_
#define GEMMSERVE_SERVER_HTTP_HTTP_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/common/tls_files.h"
#include "server/serving/serving.h"

namespace gemmserve {

struct HttpOptions {
  int port = 8000;  // 0 picks a free one
  int threads = 2;  // I/O threads
  int64_t max_header_bytes = 16 << 10;
  int max_connections = 1024;  // more are answered 503 and closed
  // A keep-alive connection may wait this long for its next request's
  // header; a request's body, and a response, must cross within the other.
  int64_t idle_timeout_ms = 60000;
  int64_t request_timeout_ms = 60000;
  // Responses of at least this many bytes are compressed when the client
  // accepts gzip or deflate.
  int64_t compress_min_bytes = 1024;
  // TLS with the gRPC port's --tls_* files; none: plaintext.
  TlsOptions tls;
};

// INVALID_ARGUMENT, naming the flag, for an option out of range (the port
// -1, "no HTTP front end", is the root's to handle: it is refused here).
absl::Status CheckHttpOptions(const HttpOptions& options);

class HttpServer {
 public:
  // Serves on options CheckHttpOptions accepted. INVALID_ARGUMENT for TLS
  // files that cannot be read or a host that is not an address, UNAVAILABLE
  // if the port cannot be bound. `serving` must outlive it.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(Serving* serving,
                                                           const std::string& host,
                                                           const HttpOptions& options);
  ~HttpServer();

  std::string address() const;
  int port() const;

  // Stops accepting, gives replies still being written until `deadline`,
  // then closes every connection and joins the I/O threads. Call after
  // Serving::StartDraining (new inferences get 503, ready answers 400).
  void Shutdown(absl::Time deadline);

 private:
  class Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_HTTP_HTTP_SERVER_H_
