#include "server/service/security.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gemmserve {
namespace {

using Metadata = std::multimap<grpc::string_ref, grpc::string_ref>;

TEST(ConstantTimeEqualsTest, EqualOnlyWhenEqual) {
  EXPECT_TRUE(ConstantTimeEquals("secret-token", "secret-token"));
  EXPECT_FALSE(ConstantTimeEquals("secret-token", "secret-tokeN"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret-token"));
  EXPECT_FALSE(ConstantTimeEquals("secret-token", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_FALSE(ConstantTimeEquals("x", ""));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  // A prefix repeated must not pass (the comparison wraps over b).
  EXPECT_FALSE(ConstantTimeEquals("abab", "ab"));
}

TEST(TokenAuthenticatorTest, BearerTokensFromAFile) {
  const std::string path = ::testing::TempDir() + "/tokens.txt";
  {
    std::ofstream f(path);
    f << "# comment\n\n  alpha-1  \nbeta-2\n";
  }
  auto auth = TokenAuthenticator::FromFile(path);
  ASSERT_TRUE(auth.ok()) << auth.status();
  const std::string good = "Bearer beta-2", wrong = "Bearer beta-3", basic = "Basic beta-2";
  Metadata ok{{"authorization", good}};
  EXPECT_TRUE((*auth)->Check(ok).ok());
  Metadata bad{{"authorization", wrong}};
  absl::Status s = (*auth)->Check(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(s.message()), ::testing::Not(::testing::HasSubstr("beta")));
  Metadata scheme{{"authorization", basic}};
  EXPECT_EQ((*auth)->Check(scheme).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*auth)->Check(Metadata{}).code(), absl::StatusCode::kUnauthenticated);
  std::remove(path.c_str());
  EXPECT_EQ(TokenAuthenticator::FromFile(path).status().code(),
            absl::StatusCode::kInvalidArgument);
}

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
