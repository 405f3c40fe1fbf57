#include "server/metrics/metrics_endpoint.h"

#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <exception>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/host_port.h"
#include "server/metrics/exposer_stop.h"

namespace gemmserve {

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const Metrics& metrics,
                                                                        const std::string& host,
                                                                        int port) {
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint);
  endpoint->bind_address_ = HostPort(host, port);
  try {
    endpoint->exposer_ = std::make_unique<prometheus::Exposer>(endpoint->bind_address_);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", endpoint->bind_address_, ": ", e.what()));
  }
  endpoint->exposer_->RegisterCollectable(metrics.shared_registry());
  const std::vector<int> ports = endpoint->exposer_->GetListeningPorts();
  endpoint->port_ = ports.empty() ? 0 : ports.front();
  endpoint->address_ = HostPort(host, endpoint->port_);
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() {
  StopExposerPromptly(std::move(exposer_), bind_address_, port_);
}

}  // namespace gemmserve
