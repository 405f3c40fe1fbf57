#include "server/root/server_options.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/ops/kernels/cpu_features.h"

namespace gemmserve {

absl::StatusOr<CheckedServerOptions> CheckedServerOptions::Check(ServerOptions options) {
  if (const std::string cap = CpuIsaCapError(); !cap.empty()) {
    return absl::InvalidArgumentError(cap);
  }
  GEMMSERVE_RETURN_IF_ERROR(CheckServingOptions(options.serving));
  GEMMSERVE_RETURN_IF_ERROR(
      CheckGrpcOptions(options.grpc, options.serving.engine.max_message_bytes));
  if (options.http.port != -1) GEMMSERVE_RETURN_IF_ERROR(CheckHttpOptions(options.http));
  if (options.metrics_port > 65535) {  // negative: none
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port ", options.metrics_port, " is not a port number"));
  }
  options.http.tls = options.grpc.tls;
  return CheckedServerOptions(std::move(options));
}

}  // namespace gemmserve
