#include "server/metrics/exposer_stop.h"

#include <netdb.h>
#include <prometheus/exposer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

namespace gemmserve {
namespace {

// The address to knock on, from the host part of "host:port"; false where
// the host is not a numeric address.
bool KnockAddress(const std::string& bind_address, int port, sockaddr_storage* address,
                  socklen_t* length) {
  std::string host = bind_address.substr(0, bind_address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  std::memcpy(address, found->ai_addr, found->ai_addrlen);
  *length = found->ai_addrlen;
  freeaddrinfo(found);
  return true;
}

// One connection, closed at once: the listener turns readable.
void Knock(const sockaddr_storage& address, socklen_t length) {
  const int fd = socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  (void)connect(fd, reinterpret_cast<const sockaddr*>(&address), length);
  close(fd);
}

}  // namespace

void StopExposerPromptly(std::unique_ptr<prometheus::Exposer> exposer,
                         const std::string& bind_address, int port) {
  if (exposer == nullptr) return;
  sockaddr_storage address{};
  socklen_t length = 0;
  if (port <= 0 || !KnockAddress(bind_address, port, &address, &length)) {
    exposer.reset();
    return;
  }
  std::atomic<bool> stopped{false};
  std::thread knocker([&] {
    while (!stopped.load(std::memory_order_relaxed)) {
      Knock(address, length);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  exposer.reset();  // civetweb's mg_stop: returns once its threads have ended
  stopped.store(true, std::memory_order_relaxed);
  knocker.join();
}

}  // namespace gemmserve
