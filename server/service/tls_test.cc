#include "server/service/tls.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gemmserve {
namespace {

TEST(ServerCredentialsTest, HalfGivenOptionsAreRejected) {
  EXPECT_TRUE(MakeServerCredentials({}).ok());
  EXPECT_EQ(MakeServerCredentials({"cert.pem", "", ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeServerCredentials({"", "", "ca.pem"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeServerCredentials({"/nonexistent/c.pem", "/nonexistent/k.pem", ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gemmserve
