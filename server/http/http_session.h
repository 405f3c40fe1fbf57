// One HTTP connection of HttpServer (http_server.h), plaintext or TLS: a
// Session reads each request's head, admits it (HttpService::Admit: token,
// route, size held against --max_inflight_bytes) before a byte of its body
// is read, reads and inflates the body, hands the request to HttpService,
// and writes the reply, all on its I/O thread's strand, with timers on every
// read and write. Internal to server/http: only http_server.cc includes it,
// where Session<tcp::socket> and Session<ssl::stream<...>> are instantiated.
#ifndef GEMMSERVE_SERVER_HTTP_HTTP_SESSION_H_
#define GEMMSERVE_SERVER_HTTP_HTTP_SESSION_H_

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
#include "server/common/logging.h"
#include "server/common/status_macros.h"
#include "server/core/reservation.h"
#include "server/http/compression.h"
#include "server/http/http_service.h"
#include "server/http/model_json.h"
#include "server/http/http_server.h"

namespace gemmserve {
namespace http_internal {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;

// What the connections share with the server and with the engine's workers
// that answer them. A reply from a worker is posted to its connection only
// while the gate is open: once Shutdown closed it, a late reply is dropped
// on the worker (the I/O threads are gone).
struct Shared {
  Shared(Serving* s, const HttpOptions& o) : serving(s), service(s), options(o) {}

  Serving* const serving;
  HttpService service;
  const HttpOptions options;
  int64_t max_body_bytes = 0;
  // Where bodies too large to decode on an I/O thread are inflated and
  // decoded (kInlineBodyBytes); joined by Shutdown.
  std::unique_ptr<net::thread_pool> decode_pool;

  absl::Mutex mu;
  bool open ABSL_GUARDED_BY(mu) = true;
  int64_t calls ABSL_GUARDED_BY(mu) = 0;    // handed to the service, not yet replied
  int64_t writing ABSL_GUARDED_BY(mu) = 0;  // replies being written
  std::atomic<int> connections{0};

  template <typename Executor, typename F>
  // A reply on its way to its I/O thread counts as being written from here
  // on, so that Shutdown cannot see the server quiet between the call's end
  // and the write's start (the reply would be dropped unwritten).
  void PostReply(const Executor& executor, F&& f) {
    absl::MutexLock lock(&mu);
    if (!open) return;
    ++writing;
    net::post(executor, std::forward<F>(f));
  }
  void AddCalls(int64_t n) {
    absl::MutexLock lock(&mu);
    calls += n;
  }
  void AddWriting(int64_t n) {
    absl::MutexLock lock(&mu);
    writing += n;
  }
};

// An identity body up to this size is decoded on the I/O thread that read it
// (about 0.1 ms of JSON); a larger or compressed one on the decode pool.
constexpr int64_t kInlineBodyBytes = 64 << 10;

template <typename Fields>
std::string HeaderValue(const Fields& fields, http::field f) {
  auto it = fields.find(f);
  return it == fields.end() ? std::string() : std::string(it->value());
}

// RFC 9112 6.1-6.3 for a request's framing: a Transfer-Encoding other than
// exactly `chunked`, or one beside a Content-Length, could let the bytes
// after what we read as the body run as a second request. 400 (or 501 for a
// transfer coding we do not implement), and the connection closes.
template <typename Fields>
absl::Status CheckFraming(const Fields& fields, unsigned version) {
  std::vector<std::string> codings;
  auto range = fields.equal_range(http::field::transfer_encoding);
  for (auto it = range.first; it != range.second; ++it) {
    const absl::string_view value(it->value().data(), it->value().size());
    for (absl::string_view c : absl::StrSplit(value, ',')) {
      codings.push_back(absl::AsciiStrToLower(absl::StripAsciiWhitespace(c)));
    }
  }
  if (codings.empty()) return absl::OkStatus();
  if (codings.back() != "chunked") {
    return absl::InvalidArgumentError(
        "malformed HTTP request: a Transfer-Encoding must end with chunked");
  }
  if (codings.size() > 1) {
    return absl::UnimplementedError(
        "transfer codings other than chunked are not supported; use Content-Encoding");
  }
  if (fields.count(http::field::content_length) != 0) {
    return absl::InvalidArgumentError(
        "malformed HTTP request: both Transfer-Encoding and Content-Length");
  }
  if (version < 11) {
    return absl::InvalidArgumentError("malformed HTTP request: Transfer-Encoding in HTTP/1.0");
  }
  return absl::OkStatus();
}

template <typename Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  template <typename... Args>
  Session(std::shared_ptr<Shared> shared, Args&&... args)
      : shared_(std::move(shared)), stream_(std::forward<Args>(args)...) {
    shared_->connections.fetch_add(1);
    on_chunk_ = [this](uint64_t size, beast::string_view, beast::error_code& ec) {
      OnChunk(size, ec);
    };
  }
  ~Session() { shared_->connections.fetch_sub(1); }

  void Run() {
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] { self->Begin(); });
  }

 private:
  using Self = Session<Stream>;
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  auto& Lowest() { return beast::get_lowest_layer(stream_); }
  std::chrono::milliseconds Ms(int64_t ms) { return std::chrono::milliseconds(ms); }

  void Begin() {
    if constexpr (kTls) {
      Lowest().expires_after(Ms(shared_->options.idle_timeout_ms));
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (ec) return self->Close();
                                self->ReadHeader();
                              });
    } else {
      ReadHeader();
    }
  }

  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(shared_->options.max_header_bytes));
    // The route's limit is set once the head is read (OnHeader), which also
    // holds a Content-Length against it: until then nothing of the body is read.
    parser_->body_limit(std::numeric_limits<uint64_t>::max());
    refusal_ = absl::OkStatus();
    Lowest().expires_after(Ms(shared_->options.idle_timeout_ms));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    Lowest().expires_after(Ms(shared_->options.request_timeout_ms));
    auto& header = parser_->get();
    keep_alive_ = header.keep_alive();
    version_ = header.version();
    // Nothing of the body is read, nor `100 Continue` sent, before the
    // framing, the token and the room for the body are checked.
    if (absl::Status framing = CheckFraming(header, header.version()); !framing.ok()) {
      return Refuse(framing);
    }
    HttpHead head;
    head.method = absl::string_view(header.method_string().data(), header.method_string().size());
    head.target = absl::string_view(header.target().data(), header.target().size());
    auto auth = header.equal_range(http::field::authorization);
    for (auto it = auth.first; it != auth.second; ++it) {
      head.authorization.emplace_back(it->value().data(), it->value().size());
    }
    absl::StatusOr<int64_t> limit = shared_->service.Admit(head);
    if (!limit.ok()) return Refuse(limit.status());
    body_limit_ = *limit;
    const boost::optional<uint64_t> length = parser_->content_length();
    if (length && *length > static_cast<uint64_t>(body_limit_)) return Refuse(OverLimit());
    parser_->body_limit(static_cast<uint64_t>(body_limit_));
    if (length && *length > 0) {
      absl::StatusOr<Reservation> held =
          shared_->serving->Reserve(static_cast<int64_t>(*length), "the request body");
      if (!held.ok()) return Refuse(held.status());
      reserved_ = *std::move(held);
    }
    if (parser_->chunked()) parser_->on_chunk_header(on_chunk_);
    auto expect = header.find(http::field::expect);
    if (expect != header.end() && beast::iequals(expect->value(), "100-continue")) {
      continue_.emplace(http::status::continue_, header.version());
      http::async_write(stream_, *continue_,
                        [self = this->shared_from_this()](beast::error_code ec, size_t) {
                          if (ec) return self->Close();
                          self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  absl::Status OverLimit() const {
    return absl::ResourceExhaustedError(
        body_limit_ == kMaxControlBodyBytes
            ? absl::StrCat("the request body is over ", body_limit_,
                           " bytes, the most this route takes")
            : absl::StrCat("the request body is over ", body_limit_,
                           " bytes; --max_message_bytes raises the limit"));
  }

  // A chunk of a chunked body is announced: its bytes are counted (with the
  // body's room to grow into, which is then allocated) before they are read.
  void OnChunk(uint64_t size, beast::error_code& ec) {
    std::string& body = parser_->get().body();
    if (size > static_cast<uint64_t>(body_limit_) ||
        body.size() + size > static_cast<uint64_t>(body_limit_)) {
      refusal_ = OverLimit();
      ec = http::error::body_limit;
      return;
    }
    const int64_t need = static_cast<int64_t>(body.size() + size);
    if (need <= static_cast<int64_t>(body.capacity())) return;
    const int64_t room =
        std::max(need, std::min<int64_t>(body_limit_, 2 * static_cast<int64_t>(body.capacity())));
    absl::Status grown =
        shared_->serving->Grow(&reserved_, room - reserved_.bytes(), "the request body");
    if (grown.ok())
      grown = CatchAllocationFailure("the request body", [&] {
        body.reserve(static_cast<size_t>(room));
        return absl::OkStatus();
      });
    if (!grown.ok()) {
      refusal_ = grown;
      ec = http::error::body_limit;
    }
  }

  // Answers a request refused on its head; its body is not read, so the
  // connection closes after the answer (a lingering close).
  void Refuse(const absl::Status& status) {
    keep_alive_ = false;
    reserved_.Release();
    Send(HttpService::Error(status));
  }

  void ReadBody() {
    http::async_read(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnReadError(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset ||
        ec == net::error::eof || ec == ssl::error::stream_truncated) {
      return Close();  // gone, or silent for too long: nobody to answer
    }
    keep_alive_ = false;
    version_ = 11;
    reserved_.Release();
    if (!refusal_.ok()) return Send(HttpService::Error(std::exchange(refusal_, absl::OkStatus())));
    if (ec == http::error::body_limit) {
      return Send(HttpService::Error(absl::ResourceExhaustedError(
          absl::StrCat("the request body is over ", shared_->max_body_bytes,
                       " bytes; --max_message_bytes raises the limit"))));
    }
    if (ec == http::error::header_limit) {
      HttpReply r = HttpService::Error(absl::ResourceExhaustedError(
          absl::StrCat("the request header is over ", shared_->options.max_header_bytes,
                       " bytes; --http_max_header_bytes raises the limit")));
      r.status = 431;
      return Send(std::move(r));
    }
    Send(HttpService::Error(
        absl::InvalidArgumentError(absl::StrCat("malformed HTTP request: ", ec.message()))));
  }

  void OnRead(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    Lowest().expires_never();
    http::request<http::string_body> req = parser_->release();
    parser_.reset();
    keep_alive_ = req.keep_alive();
    version_ = req.version();

    HttpCall call;
    call.method = std::string(req.method_string());
    call.target = std::string(req.target());
    if (auto it = req.find(http::field::authorization); it != req.end()) {
      call.authorization = std::string(it->value());
    }
    if (auto it = req.find("Inference-Header-Content-Length"); it != req.end()) {
      call.header_length = std::string(it->value());
    }
    if (auto it = req.find("traceparent"); it != req.end()) {
      call.traceparent = std::string(it->value());
    }
    coding_ = NegotiateContentCoding(HeaderValue(req, http::field::accept_encoding));
    absl::StatusOr<ContentCoding> encoding =
        ParseContentEncoding(HeaderValue(req, http::field::content_encoding));
    if (!encoding.ok()) {
      reserved_.Release();
      HttpReply r = HttpService::Error(encoding.status());
      r.status = 415;
      return Send(std::move(r));
    }
    call.body = std::move(req.body());
    call.reserved = std::move(reserved_);
    req = {};

    cancelled_ = std::make_shared<std::atomic<bool>>(false);
    call.is_cancelled = [flag = cancelled_] { return flag->load(std::memory_order_relaxed); };
    awaiting_ = true;
    WatchForHangUp();
    shared_->AddCalls(1);
    const bool inline_ok = *encoding == ContentCoding::kIdentity &&
                           static_cast<int64_t>(call.body.size()) <= kInlineBodyBytes;
    if (inline_ok) return Process(std::move(call), *encoding);
    net::post(*shared_->decode_pool,
              [self = this->shared_from_this(), call = std::move(call),
               coding = *encoding]() mutable { self->Process(std::move(call), coding); });
  }

  // On the I/O thread or the decode pool: inflates the body (counted before
  // it is allocated) and hands the call to the service. Touches nothing of
  // the session that the I/O thread uses meanwhile.
  void Process(HttpCall call, ContentCoding encoding) {
    if (encoding != ContentCoding::kIdentity) {
      absl::Status inflated = InflateCounted(call, encoding);
      if (!inflated.ok()) {
        call.reserved.Release();
        return ReplyWith()(HttpService::Error(inflated));
      }
    }
    shared_->service.Handle(std::move(call), ReplyWith());
  }

  absl::Status InflateCounted(HttpCall& call, ContentCoding encoding) {
    const int64_t limit = body_limit_;
    GEMMSERVE_ASSIGN_OR_RETURN(int64_t size, InflatedSize(call.body, encoding, limit));
    GEMMSERVE_RETURN_IF_ERROR(
        shared_->serving->Grow(&call.reserved, size, "the decompressed request body"));
    GEMMSERVE_ASSIGN_OR_RETURN(std::string inflated, InflateExactly(call.body, encoding, size));
    const int64_t compressed = static_cast<int64_t>(call.body.capacity());
    call.body = std::move(inflated);
    call.reserved.Shrink(compressed);
    return absl::OkStatus();
  }

  // The reply's way back: compressed on the replying thread (an engine
  // worker for an inference, not an I/O thread), then written by the I/O
  // thread of this connection.
  HttpService::Reply ReplyWith() {
    return [self = this->shared_from_this(), shared = shared_, coding = coding_,
            min_bytes = shared_->options.compress_min_bytes](HttpReply reply) mutable {
      if (coding != ContentCoding::kIdentity &&
          static_cast<int64_t>(reply.body.size()) >= min_bytes) {
        absl::StatusOr<std::string> z = Deflate(reply.body, coding);
        if (z.ok()) {
          reply.body = *std::move(z);
          reply.content_encoding = coding;
        }
      }
      {
        std::shared_ptr<Self> s = std::move(self);
        auto executor = s->stream_.get_executor();
        shared->PostReply(executor, [s = std::move(s), reply = std::move(reply)]() mutable {
          s->OnReply(std::move(reply));
        });
      }
      shared->AddCalls(-1);
    };
  }

  // A client that closes its connection while its request waits: its
  // socket turns readable with nothing to read.
  void WatchForHangUp() {
    Lowest().socket().async_wait(
        tcp::socket::wait_read, [self = this->shared_from_this()](beast::error_code ec) {
          if (ec || !self->awaiting_) return;
          char c;
          const ssize_t n =
              ::recv(self->Lowest().socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            self->cancelled_->store(true);
          }
          // Else the next request is already coming (pipelining): stop watching.
        });
  }

  void OnReply(HttpReply reply) {  // counted in `writing` by PostReply
    awaiting_ = false;
    beast::error_code ignored;
    Lowest().socket().cancel(ignored);  // the hang-up watch
    Send(std::move(reply), /*counted=*/true);
  }

  // `counted`: already in Shared::writing (a reply that came through PostReply).
  void Send(HttpReply reply, bool counted = false) {
    if (shared_->serving->draining()) keep_alive_ = false;
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(reply.status), version_);
    res->set(http::field::server, "gemmserve");
    if (!reply.content_type.empty()) res->set(http::field::content_type, reply.content_type);
    if (reply.header_length) {
      res->set("Inference-Header-Content-Length", std::to_string(*reply.header_length));
    }
    if (reply.content_encoding == ContentCoding::kGzip) {
      res->set(http::field::content_encoding, "gzip");
    } else if (reply.content_encoding == ContentCoding::kDeflate) {
      res->set(http::field::content_encoding, "deflate");
    }
    res->keep_alive(keep_alive_);
    res->body() = std::move(reply.body);
    res->prepare_payload();
    response_ = res;
    held_ = std::move(reply.held);  // counted until written, or the connection is cut
    if (!counted) shared_->AddWriting(1);
    Lowest().expires_after(Ms(shared_->options.request_timeout_ms));
    http::async_write(stream_, *res,
                      [self = this->shared_from_this()](beast::error_code ec, size_t) {
                        self->shared_->AddWriting(-1);
                        self->response_.reset();
                        self->held_.Release();
                        if (ec || !self->keep_alive_) return self->Close();
                        self->ReadHeader();
                      });
  }

  void Close() {
    beast::error_code ec;
    if constexpr (kTls) {
      Lowest().expires_after(std::chrono::seconds(1));
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {
        beast::error_code ignored;
        self->Lowest().socket().close(ignored);
      });
    } else {
      // Lingering close: what the client is still sending (a body refused
      // for its size) is read and dropped for a moment, so that the kernel
      // does not answer it with a reset that would destroy our reply.
      Lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
      Lowest().expires_after(std::chrono::seconds(2));
      Discard();
    }
  }

  void Discard() {
    Lowest().async_read_some(net::buffer(discard_),
                             [self = this->shared_from_this()](beast::error_code ec, size_t) {
                               if (!ec) return self->Discard();
                               beast::error_code ignored;
                               self->Lowest().socket().close(ignored);
                             });
  }

  std::shared_ptr<Shared> shared_;
  Stream stream_;
  beast::flat_buffer buffer_;
  char discard_[4096];
  // Declared before the parser, which refers to it.
  std::function<void(uint64_t, beast::string_view, beast::error_code&)> on_chunk_;
  std::optional<http::request_parser<http::string_body>> parser_;
  int64_t body_limit_ = 0;  // the route's (HttpService::Admit)
  Reservation reserved_;    // the body's bytes, from its head on
  absl::Status refusal_;    // why OnChunk stopped the body
  Reservation held_;        // the reply's bytes, until written
  std::optional<http::response<http::empty_body>> continue_;
  std::shared_ptr<http::response<http::string_body>> response_;
  std::shared_ptr<std::atomic<bool>> cancelled_;
  ContentCoding coding_ = ContentCoding::kIdentity;
  bool keep_alive_ = false;
  bool awaiting_ = false;
  unsigned version_ = 11;
};

}  // namespace http_internal
}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_HTTP_HTTP_SESSION_H_
