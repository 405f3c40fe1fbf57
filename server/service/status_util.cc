#include "server/service/status_util.h"

#include <string>

#include "server/common/logging.h"

namespace gemmserve {
namespace {
constexpr size_t kMaxMessageBytes = 1024;
}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  switch (status.code()) {
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
      GEMMSERVE_LOG(ERROR) << "request failed: " << status;
      return grpc::Status(grpc::StatusCode::INTERNAL, "internal error; see the server log");
    default: break;
  }
  std::string message(status.message().substr(0, kMaxMessageBytes));
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), message);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace gemmserve
