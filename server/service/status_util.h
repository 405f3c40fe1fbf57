// The one place where an absl::Status becomes a grpc::Status. Codes map one to
// one; messages are capped at 1 KiB; a fault of ours (INTERNAL, UNKNOWN,
// DATA_LOSS) is logged in full and answered with a generic message.
#ifndef GEMMSERVE_SERVER_SERVICE_STATUS_UTIL_H_
#define GEMMSERVE_SERVER_SERVICE_STATUS_UTIL_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace gemmserve {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_STATUS_UTIL_H_
