// MetricsEndpoint: /metrics, the Prometheus text of a Metrics registry,
// served on its own port by prometheus-cpp's HTTP threads (civetweb). It is
// an endpoint like the gRPC and HTTP front ends: the composition root starts
// it after them and stops it with them; the Metrics it serves records
// whether or not it runs.
//
//   std::unique_ptr<Metrics> metrics = Metrics::Create({});
//   GEMMSERVE_ASSIGN_OR_RETURN(auto endpoint,
//                              MetricsEndpoint::Start(*metrics, "0.0.0.0", 8002));
//   std::cout << "metrics on " << endpoint->address() << "\n";
#ifndef GEMMSERVE_SERVER_METRICS_METRICS_ENDPOINT_H_
#define GEMMSERVE_SERVER_METRICS_METRICS_ENDPOINT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/metrics/metrics.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace gemmserve {

class MetricsEndpoint {
 public:
  // Serves `metrics` at /metrics on `host`:`port` (0 picks a free port).
  // UNAVAILABLE when it cannot listen there. The endpoint shares the
  // registry: it may outlive `metrics`.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const Metrics& metrics,
                                                                const std::string& host,
                                                                int port);
  // Stops at once (StopExposerPromptly), not at civetweb's next poll.
  ~MetricsEndpoint();

  // "host:port" with the port actually bound.
  const std::string& address() const { return address_; }
  int port() const { return port_; }

 private:
  MetricsEndpoint() = default;

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string bind_address_;  // as asked, for StopExposerPromptly
  std::string address_;
  int port_ = 0;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_METRICS_METRICS_ENDPOINT_H_
