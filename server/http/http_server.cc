#include "server/http/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "server/common/allocation.h"
#include "server/common/host_port.h"
#include "server/common/logging.h"
#include "server/common/status_macros.h"
#include "server/core/reservation.h"
#include "server/http/compression.h"
#include "server/http/http_service.h"
#include "server/http/http_session.h"
#include "server/http/model_json.h"

namespace gemmserve {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;
using http_internal::Session;
using http_internal::Shared;

}  // namespace

class HttpServer::Impl {
 public:
  // One I/O context per thread, each run by that thread alone, and every
  // connection on one of them (round robin): a connection's reads, its reply
  // from a compute worker and its writes then all run on one thread, with no
  // hand-off between I/O threads. One context shared by two threads cost
  // about 80 us per request on loopback (scripts/http_benchmark.py).
  Impl(Serving* serving, const HttpOptions& options)
      : shared_(std::make_shared<Shared>(serving, options)),
        iocs_(MakeContexts(options.threads)),
        acceptor_(*iocs_[0]) {}

  absl::Status Listen(const std::string& host, const HttpOptions& o) {
    auto pem = ReadTlsFiles(o.tls);
    if (!pem.ok()) return pem.status();
    if (!pem->plaintext()) {
      tls_.emplace(ssl::context::tls_server);
      tls_->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                        ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
      beast::error_code ec;
      tls_->use_certificate_chain(net::buffer(pem->cert_chain), ec);
      if (!ec) tls_->use_private_key(net::buffer(pem->private_key), ssl::context::pem, ec);
      if (ec) return absl::InvalidArgumentError("--tls_cert/--tls_key: not a usable PEM pair");
      if (!pem->client_ca.empty()) {
        tls_->add_certificate_authority(net::buffer(pem->client_ca), ec);
        if (ec) return absl::InvalidArgumentError("--tls_client_ca: not a usable PEM file");
        tls_->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
      }
    }
    beast::error_code ec;
    const net::ip::address address = net::ip::make_address(host, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("--host ", host, " is not an address"));
    const tcp::endpoint endpoint(address, static_cast<uint16_t>(o.port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", HostPort(host, o.port), ": ", ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    address_ = HostPort(host, port_);
    // Asio opens each context's reactor (an epoll and an eventfd) when the
    // context first needs one; opened now, a context never needs a
    // descriptor later, when there may be none to take.
    try {
      for (auto& ioc : iocs_) backoff_.push_back(std::make_unique<net::steady_timer>(*ioc));
      shared_->decode_pool = std::make_unique<net::thread_pool>(shared_->options.threads);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("cannot start the HTTP threads: ", e.what()));
    }
    Accept();
    for (auto& ioc : iocs_) {
      // Kept running while nothing is pending on it, until Shutdown.
      guards_.push_back(net::make_work_guard(*ioc));
      threads_.emplace_back([ioc = ioc.get()] { RunLogged(*ioc); });
    }
    return absl::OkStatus();
  }

  // Runs `ioc` until it is stopped; a handler that throws is logged and the
  // loop goes on (its connection is dropped with it), never terminate().
  static void RunLogged(net::io_context& ioc) {
    for (;;) {
      try {
        ioc.run();
        return;
      } catch (const std::exception& e) {
        GEMMSERVE_LOG(ERROR) << "an HTTP handler failed: " << e.what();
      }
    }
  }

  void Shutdown(absl::Time deadline) {
    if (stopped_) return;
    stopped_ = true;
    net::post(acceptor_.get_executor(), [this] {
      beast::error_code ec;
      acceptor_.close(ec);
    });
    {
      // Replies already on their way get until the deadline to be written.
      absl::MutexLock lock(&shared_->mu);
      auto quiet = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared_->mu) {
        return shared_->calls == 0 && shared_->writing == 0;
      };
      shared_->mu.AwaitWithDeadline(absl::Condition(&quiet), deadline);
      shared_->open = false;
    }
    guards_.clear();
    for (auto& ioc : iocs_) ioc->stop();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    // Decodes still running hand their calls to the service, which answers
    // them into the closed gate.
    if (shared_->decode_pool) shared_->decode_pool->join();
    // A call still computing replies into the closed gate; its connection
    // is dropped on that thread, which must happen before the I/O context
    // (and the sockets' service) goes away.
    absl::MutexLock lock(&shared_->mu);
    auto replied = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared_->mu) { return shared_->calls == 0; };
    shared_->mu.Await(absl::Condition(&replied));
  }

  // The TLS context outlives every connection (destroyed with the I/O context).
  std::optional<ssl::context> tls_;
  std::shared_ptr<Shared> shared_;
  std::vector<std::unique_ptr<net::io_context>> iocs_;
  tcp::acceptor acceptor_;  // on iocs_[0]
  std::vector<net::executor_work_guard<net::io_context::executor_type>> guards_;
  std::vector<std::thread> threads_;
  size_t next_context_ = 0;  // the acceptor's thread only
  bool backing_off_ = false;  // the acceptor's thread only
  // One per context, made at Listen (see there); the first times back-offs.
  std::vector<std::unique_ptr<net::steady_timer>> backoff_;
  std::string address_;
  int port_ = 0;
  bool stopped_ = false;

 private:
  static std::vector<std::unique_ptr<net::io_context>> MakeContexts(int threads) {
    std::vector<std::unique_ptr<net::io_context>> iocs;
    for (int i = 0; i < std::max(threads, 1); ++i) {
      iocs.push_back(std::make_unique<net::io_context>(1));  // one thread runs it
    }
    return iocs;
  }

  void Accept() {
    net::io_context& ioc = *iocs_[next_context_++ % iocs_.size()];
    acceptor_.async_accept(ioc, [this](beast::error_code ec, tcp::socket s) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) return BackOff(ec);
      if (backing_off_) GEMMSERVE_LOG(INFO) << "HTTP accept works again";
      backing_off_ = false;
      try {
        Admit(std::move(s));
      } catch (const std::exception& e) {
        GEMMSERVE_LOG(ERROR) << "an HTTP connection could not be set up: " << e.what();
      }
      Accept();
    });
  }

  // Out of descriptors (EMFILE, ENFILE) or memory, accept fails at once for
  // as long as that lasts: wait a moment before the next try instead of
  // spinning, and say so once per episode. The waiting connections stay in
  // the listen queue.
  void BackOff(const beast::error_code& ec) {
    if (!backing_off_) {
      GEMMSERVE_LOG(WARNING) << "HTTP accept failed (" << ec.message()
                             << "); retrying every 50 ms. Raise the descriptor limit "
                                "(ulimit -n) or lower --http_max_connections.";
    }
    backing_off_ = true;
    net::steady_timer& timer = *backoff_[0];  // on the acceptor's context
    timer.expires_after(std::chrono::milliseconds(50));
    timer.async_wait([this](beast::error_code wait) {
      if (!wait && acceptor_.is_open()) Accept();
    });
  }

  void Admit(tcp::socket socket) {
    if (shared_->connections.load() >= shared_->options.max_connections) {
      // Over the cap: a short answer without waiting on the client, then close.
      static const std::string kBusy = [] {
        const std::string body =
            ErrorJson("too many HTTP connections; --http_max_connections raises the limit");
        return absl::StrCat(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json"
            "\r\nConnection: close\r\nContent-Length: ",
            body.size(), "\r\n\r\n", body);
      }();
      beast::error_code ec;
      socket.non_blocking(true, ec);
      socket.write_some(net::buffer(kBusy), ec);
      socket.shutdown(tcp::socket::shutdown_both, ec);
      socket.close(ec);
      return;
    }
    beast::error_code ec;
    socket.set_option(tcp::no_delay(true), ec);
    if (tls_) {
      std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(shared_, std::move(socket),
                                                                      *tls_)
          ->Run();
    } else {
      std::make_shared<Session<beast::tcp_stream>>(shared_, std::move(socket))->Run();
    }
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  if (impl_) impl_->Shutdown(absl::Now());
}

absl::Status CheckHttpOptions(const HttpOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_port ", options.port, " is not a port number"));
  }
  if (options.threads < 1 || options.threads > 256) {
    return absl::InvalidArgumentError("--http_threads must be in [1, 256]");
  }
  if (options.max_header_bytes < 1024 || options.max_header_bytes > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("--http_max_header_bytes must be in [1024, 2^30]");
  }
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError("--http_max_connections must be at least 1");
  }
  if (options.idle_timeout_ms < 1 || options.request_timeout_ms < 1) {
    return absl::InvalidArgumentError("HTTP timeouts must be at least 1 ms");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(Serving* serving,
                                                              const std::string& host,
                                                              const HttpOptions& options) {
  auto impl = std::make_unique<Impl>(serving, options);
  impl->shared_->max_body_bytes = serving->max_message_bytes();
  if (absl::Status s = impl->Listen(host, options); !s.ok()) return s;
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

std::string HttpServer::address() const { return impl_->address_; }
int HttpServer::port() const { return impl_->port_; }
void HttpServer::Shutdown(absl::Time deadline) { impl_->Shutdown(deadline); }

}  // namespace gemmserve
