// Bearer tokens (--auth_token_file: one token per line): every inference-
// protocol call must carry `authorization: Bearer <token>` with one of them,
// whatever its front end. Tokens are compared in constant time and never
// logged or echoed. The front end hands over the header's value as it came.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(auto auth, TokenAuthenticator::FromFile(path));
//   if (absl::Status s = auth->Check(authorization_header); !s.ok()) ...
#ifndef GEMMSERVE_SERVER_SERVING_TOKEN_AUTHENTICATOR_H_
#define GEMMSERVE_SERVER_SERVING_TOKEN_AUTHENTICATOR_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gemmserve {

// True when `a` equals `b`; the time taken depends only on the length of `a`
// (the presented token), never on where the two first differ.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

class TokenAuthenticator {
 public:
  // One token per line; blank lines and lines starting with '#' ignored.
  // INVALID_ARGUMENT when the file cannot be read or holds no token.
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> FromFile(const std::string& path);
  explicit TokenAuthenticator(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {}

  // UNAUTHENTICATED unless `authorization` (the header's value; nullopt when
  // absent) is `Bearer <t>` with a configured token. The message never
  // contains what was sent.
  absl::Status Check(std::optional<absl::string_view> authorization) const;

 private:
  std::vector<std::string> tokens_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVING_TOKEN_AUTHENTICATOR_H_
