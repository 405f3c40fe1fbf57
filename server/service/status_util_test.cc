#include "server/service/status_util.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"

namespace gemmserve {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ToGrpcStatusTest, OkIsOk) {
  const grpc::Status s = ToGrpcStatus(absl::OkStatus());
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OK);
  EXPECT_TRUE(s.error_message().empty());
}

TEST(ToGrpcStatusTest, ClientFacingCodesMapOneToOneWithTheirMessage) {
  const std::vector<std::pair<absl::Status, grpc::StatusCode>> cases = {
      {absl::InvalidArgumentError("input 'B': expected 48 bytes (shape [3,4], FP32), got 40"),
       grpc::StatusCode::INVALID_ARGUMENT},
      {absl::NotFoundError("unknown model 'x'"), grpc::StatusCode::NOT_FOUND},
      {absl::ResourceExhaustedError("over --max_output_bytes"),
       grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::UnavailableError("queue full"), grpc::StatusCode::UNAVAILABLE},
      {absl::DeadlineExceededError("deadline"), grpc::StatusCode::DEADLINE_EXCEEDED},
      {absl::CancelledError("cancelled"), grpc::StatusCode::CANCELLED},
      {absl::UnauthenticatedError("no token"), grpc::StatusCode::UNAUTHENTICATED},
      {absl::PermissionDeniedError("not allowed"), grpc::StatusCode::PERMISSION_DENIED},
      {absl::AlreadyExistsError("exists"), grpc::StatusCode::ALREADY_EXISTS},
      {absl::FailedPreconditionError("precondition"), grpc::StatusCode::FAILED_PRECONDITION},
      {absl::AbortedError("aborted"), grpc::StatusCode::ABORTED},
      {absl::OutOfRangeError("range"), grpc::StatusCode::OUT_OF_RANGE},
      {absl::UnimplementedError("unimplemented"), grpc::StatusCode::UNIMPLEMENTED},
  };
  for (const auto& [status, code] : cases) {
    const grpc::Status s = ToGrpcStatus(status);
    EXPECT_EQ(s.error_code(), code) << status;
    EXPECT_EQ(s.error_message(), std::string(status.message())) << status;
  }
}

TEST(ToGrpcStatusTest, MessagesAreCappedAtOneKibibyte) {
  const std::string long_message(5000, 'm');
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError(long_message)).error_message(),
            std::string(1024, 'm'));
  const std::string exact(1024, 'e');
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError(exact)).error_message(), exact);
  const std::string one_over(1025, 'o');
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError(one_over)).error_message().size(), 1024u);
  // The code survives the cut.
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError(long_message)).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST(ToGrpcStatusTest, FaultsOfOursGetAGenericInternalMessage) {
  const std::string secret = "/etc/gemmserve/secret.key: bad pointer 0xdeadbeef";
  for (const absl::Status& status :
       {absl::InternalError(secret), absl::UnknownError(secret), absl::DataLossError(secret)}) {
    const grpc::Status s = ToGrpcStatus(status);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL) << status;
    EXPECT_THAT(s.error_message(), Not(HasSubstr("secret")));
    EXPECT_THAT(s.error_message(), Not(HasSubstr("0xdeadbeef")));
    EXPECT_FALSE(s.error_message().empty());
  }
}

TEST(FromGrpcStatusTest, RoundTripsClientFacingStatuses) {
  for (const absl::Status& status :
       {absl::OkStatus(), absl::InvalidArgumentError("bad"), absl::NotFoundError("gone"),
        absl::UnavailableError("later"), absl::ResourceExhaustedError("too big")}) {
    EXPECT_EQ(FromGrpcStatus(ToGrpcStatus(status)), status);
  }
  const absl::Status from = FromGrpcStatus(grpc::Status(grpc::StatusCode::CANCELLED, "bye"));
  EXPECT_EQ(from.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(from.message(), "bye");
}

}  // namespace
}  // namespace gemmserve
