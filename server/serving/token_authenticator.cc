#include "server/serving/token_authenticator.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace gemmserve {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Walk all of `a` whatever `b` is; fold every difference, and the length
  // difference, into one accumulator.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    const unsigned char other = b.empty() ? 0 : static_cast<unsigned char>(b[i % b.size()]);
    diff |= static_cast<unsigned char>(a[i]) ^ other;
  }
  return diff == 0;
}

absl::StatusOr<std::unique_ptr<TokenAuthenticator>> TokenAuthenticator::FromFile(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError("--auth_token_file: cannot read the file");
  std::ostringstream text;
  text << in.rdbuf();
  std::vector<std::string> tokens;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || absl::StartsWith(line, "#")) continue;
    tokens.emplace_back(line);
  }
  if (tokens.empty()) return absl::InvalidArgumentError("--auth_token_file: no token in the file");
  return std::make_unique<TokenAuthenticator>(std::move(tokens));
}

absl::Status TokenAuthenticator::Check(std::optional<absl::string_view> authorization) const {
  if (!authorization) {
    return absl::UnauthenticatedError(
        "missing 'authorization: Bearer <token>' (gRPC metadata, or the HTTP "
        "Authorization header)");
  }
  const absl::string_view value = *authorization;
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWith(value, kBearer)) {
    return absl::UnauthenticatedError("the authorization value must be 'Bearer <token>'");
  }
  const absl::string_view presented = value.substr(kBearer.size());
  bool ok = false;
  for (const std::string& token : tokens_) ok |= ConstantTimeEquals(presented, token);
  if (!ok) return absl::UnauthenticatedError("invalid bearer token");
  return absl::OkStatus();
}

}  // namespace gemmserve
