// What a client is told of a failed call, whatever the front end: the status
// itself, its message capped at 1 KiB; but a fault of ours (INTERNAL, UNKNOWN,
// DATA_LOSS) is logged in full and answered with a generic message, so that
// no detail of the server's insides reaches a client.
#ifndef GEMMSERVE_SERVER_COMMON_PUBLIC_STATUS_H_
#define GEMMSERVE_SERVER_COMMON_PUBLIC_STATUS_H_

#include "absl/status/status.h"
#include "server/common/logging.h"

namespace gemmserve {

inline constexpr size_t kMaxClientMessageBytes = 1024;

inline absl::Status PublicStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk: return status;
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
      GEMMSERVE_LOG(ERROR) << "request failed: " << status;
      return absl::InternalError("internal error; see the server log");
    default: return absl::Status(status.code(), status.message().substr(0, kMaxClientMessageBytes));
  }
}

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_COMMON_PUBLIC_STATUS_H_
