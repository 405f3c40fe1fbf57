// The one place where an absl::Status becomes a grpc::Status (codes map one to
// one; messages are capped at 1 KiB; a fault of ours, INTERNAL, UNKNOWN or
// DATA_LOSS, is logged in full and answered with a generic message), and
// where a call's metadata is read.
#ifndef GEMMSERVE_SERVER_SERVICE_STATUS_UTIL_H_
#define GEMMSERVE_SERVER_SERVICE_STATUS_UTIL_H_

#include <optional>

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gemmserve {

// The value of the client's metadata `key` (lowercase), as it came; nullopt
// when absent. It lives as long as the call.
std::optional<absl::string_view> MetadataValue(const grpc::ServerContextBase& context,
                                               absl::string_view key);

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_STATUS_UTIL_H_
