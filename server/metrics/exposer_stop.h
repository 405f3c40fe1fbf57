// Stopping a prometheus::Exposer at once. Its HTTP server (civetweb 1.15)
// notices that it is asked to stop only when the poll() on its listening
// sockets returns, and it polls with a 2 s timeout, so every shutdown waited
// out the rest of that quantum (measured 1.5-1.7 s per SIGTERM). A connection
// to the listener ends the poll: this knocks on it every few milliseconds
// until the exposer is destroyed.
//
//   StopExposerPromptly(std::move(exposer_), "0.0.0.0:8002-as-bound", port_);
#ifndef GEMMSERVE_SERVER_METRICS_EXPOSER_STOP_H_
#define GEMMSERVE_SERVER_METRICS_EXPOSER_STOP_H_

#include <memory>
#include <string>

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace gemmserve {

// Destroys `exposer` (nothing if null), whose listener is on `port` of the
// host in `bind_address` ("host:port", the host a numeric address or
// bracketed IPv6; a wildcard host is knocked on through loopback). Where the
// host is not numeric, the exposer is destroyed without knocking (slowly).
void StopExposerPromptly(std::unique_ptr<prometheus::Exposer> exposer,
                         const std::string& bind_address, int port);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_METRICS_EXPOSER_STOP_H_
