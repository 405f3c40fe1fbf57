#include "server/serving/token_authenticator.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gemmserve {
namespace {

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
  EXPECT_TRUE((*auth)->Check("Bearer beta-2").ok());
  EXPECT_TRUE((*auth)->Check("Bearer alpha-1").ok());
  absl::Status s = (*auth)->Check("Bearer beta-3");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(s.message()), ::testing::Not(::testing::HasSubstr("beta")));
  EXPECT_EQ((*auth)->Check("Basic beta-2").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*auth)->Check(std::nullopt).code(), absl::StatusCode::kUnauthenticated);
  std::remove(path.c_str());
  EXPECT_EQ(TokenAuthenticator::FromFile(path).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gemmserve
