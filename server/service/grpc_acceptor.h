// GrpcAcceptor: the plaintext gRPC port's listener, owned by gemmserve
// instead of gRPC, for two things gRPC 1.51's own listener does not do:
//   - a cap on open connections (--grpc_max_connections): a connection over
//     it is closed at once (the client sees UNAVAILABLE and retries), as
//     HttpServer answers one over --http_max_connections;
//   - running out of descriptors (EMFILE, ENFILE): gRPC's listener stops
//     accepting for good on the first such error ("Failed accept4"); this one
//     waits 50 ms and tries again, so the port serves again as soon as
//     descriptors free up.
// Each accepted socket is handed to the gRPC server
// (grpc::AddInsecureChannelFromFd), which serves it with the server's
// channel arguments. gRPC does not say when it closes a connection, so the
// open ones are counted from a table of (descriptor, inode) pairs, pruned
// with fstat when the table reaches the cap: an entry whose descriptor is
// closed or now names another file is gone. With TLS the port stays gRPC's
// (it takes no descriptors with credentials); the descriptor plan at start-up
// (descriptor_limit.h) is then what keeps it from running out.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(auto acceptor, GrpcAcceptor::Listen("0.0.0.0", 8001, 1024));
//   ... build and start the grpc::Server without a listening port ...
//   acceptor->Serve(server.get());
//   ...
//   acceptor->Stop();  // before the server shuts down
#ifndef GEMMSERVE_SERVER_SERVICE_GRPC_ACCEPTOR_H_
#define GEMMSERVE_SERVER_SERVICE_GRPC_ACCEPTOR_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"

namespace gemmserve {

class GrpcAcceptor {
 public:
  // Binds and listens on host:port (port 0 picks one). INVALID_ARGUMENT for
  // a host that is not a numeric address or a cap below 1, UNAVAILABLE when
  // the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<GrpcAcceptor>> Listen(const std::string& host, int port,
                                                              int max_connections);
  ~GrpcAcceptor();

  int port() const { return port_; }
  // Starts accepting into `server` (started, outliving Stop) on a thread of its own.
  void Serve(grpc::Server* server);
  // Stops accepting and closes the listener; connections already handed
  // over stay the server's. Idempotent.
  void Stop();

 private:
  GrpcAcceptor(int listen_fd, int wake_fd, int port, int max_connections)
      : listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port), max_connections_(max_connections) {}
  void Loop(grpc::Server* server);
  // Accepts what is waiting; false when out of descriptors (back off).
  bool AcceptWaiting(grpc::Server* server);
  // True when one more connection fits under the cap (pruning closed ones).
  bool Room();

  int listen_fd_;
  int wake_fd_;  // an eventfd: written by Stop
  int port_;
  const int max_connections_;
  std::vector<std::pair<int, ino_t>> open_;  // the loop's thread only
  bool backing_off_ = false;                 // the loop's thread only
  std::thread thread_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_GRPC_ACCEPTOR_H_
