// Transport security and client authentication of the gRPC endpoint.
//
//   TLS          --tls_cert, --tls_key (PEM): the server's certificate chain and key.
//   mutual TLS   --tls_client_ca (PEM): clients must present a certificate it signed.
//   tokens       --auth_token_file: one bearer token per line; every inference
//                RPC must carry `authorization: Bearer <token>`. Tokens are
//                compared in constant time and never logged or echoed. The
//                grpc.health.v1 service (probes) and reflection need none.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(auto creds, MakeServerCredentials(tls));
//   GEMMSERVE_ASSIGN_OR_RETURN(auto auth, TokenAuthenticator::FromFile(path));
//   if (absl::Status s = auth->Check(context->client_metadata()); !s.ok()) ...
#ifndef GEMMSERVE_SERVER_SERVICE_SECURITY_H_
#define GEMMSERVE_SERVER_SERVICE_SECURITY_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/string_ref.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gemmserve {

struct TlsOptions {
  std::string cert_file, key_file, client_ca_file;  // empty: not used
};

// Insecure credentials without a certificate; TLS with one; mutual TLS with
// a client CA. INVALID_ARGUMENT for a half-given pair or an unreadable or
// empty file (named by its flag).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options);

// True when `a` equals `b`; the time taken depends only on the length of `a`
// (the presented token), never on where the two first differ.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

class TokenAuthenticator {
 public:
  // One token per line; blank lines and lines starting with '#' ignored.
  // INVALID_ARGUMENT when the file cannot be read or holds no token.
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> FromFile(const std::string& path);
  explicit TokenAuthenticator(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {}

  // UNAUTHENTICATED unless the metadata carries `authorization: Bearer <t>`
  // with a configured token. The message never contains what was sent.
  absl::Status Check(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;

 private:
  std::vector<std::string> tokens_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_SECURITY_H_
