#include "server/service/grpc_acceptor.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <grpcpp/server_posix.h>

#include "absl/strings/str_cat.h"
#include "server/common/logging.h"

namespace gemmserve {
namespace {

constexpr int kBackOffMs = 50;

// A listening socket on host:port, or why not.
absl::StatusOr<int> ListenOn(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0 || found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--host ", host, " is not an address"));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, &freeaddrinfo);
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
    const int error = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, " port ", port, ": ", std::strerror(error)));
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcAcceptor>> GrpcAcceptor::Listen(const std::string& host,
                                                                   int port, int max_connections) {
  if (max_connections < 1) {
    return absl::InvalidArgumentError("--grpc_max_connections must be at least 1");
  }
  absl::StatusOr<int> fd = ListenOn(host, port);
  if (!fd.ok()) return fd.status();
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(*fd, reinterpret_cast<sockaddr*>(&bound), &length);
  const int actual =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    close(*fd);
    return absl::UnavailableError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<GrpcAcceptor>(new GrpcAcceptor(*fd, wake, actual, max_connections));
}

GrpcAcceptor::~GrpcAcceptor() {
  Stop();
  close(wake_fd_);
}

void GrpcAcceptor::Serve(grpc::Server* server) {
  thread_ = std::thread([this, server] { Loop(server); });
}

void GrpcAcceptor::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
}

void GrpcAcceptor::Loop(grpc::Server* server) {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int timeout = backing_off_ ? kBackOffMs : -1;
    if (poll(backing_off_ ? fds + 1 : fds, backing_off_ ? 1 : 2, timeout) < 0 && errno != EINTR) {
      GEMMSERVE_LOG(ERROR) << "gRPC accept loop: poll: " << std::strerror(errno);
      return;
    }
    if (fds[1].revents != 0) return;  // Stop
    if (!AcceptWaiting(server)) {
      if (!backing_off_) {
        GEMMSERVE_LOG(WARNING) << "gRPC accept failed (" << std::strerror(errno)
                               << "); retrying every " << kBackOffMs
                               << " ms. Raise the descriptor limit (ulimit -n) or lower "
                                  "--grpc_max_connections.";
      }
      backing_off_ = true;
    }
  }
}

bool GrpcAcceptor::AcceptWaiting(grpc::Server* server) {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (backing_off_) GEMMSERVE_LOG(INFO) << "gRPC accept works again";
        backing_off_ = false;
        return true;
      }
      return false;  // EMFILE, ENFILE, ENOBUFS, ENOMEM: wait, then try again
    }
    struct stat st {};
    if (!Room() || fstat(fd, &st) != 0) {
      close(fd);  // over --grpc_max_connections: the client retries later
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // A descriptor number is open once: an older entry with it is gone.
    open_.erase(std::remove_if(open_.begin(), open_.end(),
                               [fd](const std::pair<int, ino_t>& e) { return e.first == fd; }),
                open_.end());
    open_.emplace_back(fd, st.st_ino);
    grpc::AddInsecureChannelFromFd(server, fd);
  }
}

bool GrpcAcceptor::Room() {
  if (static_cast<int>(open_.size()) < max_connections_) return true;
  open_.erase(std::remove_if(open_.begin(), open_.end(),
                             [](const std::pair<int, ino_t>& e) {
                               struct stat st {};
                               return fstat(e.first, &st) != 0 || st.st_ino != e.second;
                             }),
              open_.end());
  return static_cast<int>(open_.size()) < max_connections_;
}

}  // namespace gemmserve
