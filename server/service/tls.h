// Transport security of the gRPC endpoint (bearer tokens are the serving
// layer's: server/serving/token_authenticator.h).
//
//   TLS          --tls_cert, --tls_key (PEM): the server's certificate chain and key.
//   mutual TLS   --tls_client_ca (PEM): clients must present a certificate it signed.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(auto creds, MakeServerCredentials(tls));
#ifndef GEMMSERVE_SERVER_SERVICE_TLS_H_
#define GEMMSERVE_SERVER_SERVICE_TLS_H_

#include <memory>
#include <string>

#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"

namespace gemmserve {

struct TlsOptions {
  std::string cert_file, key_file, client_ca_file;  // empty: not used
};

// Insecure credentials without a certificate; TLS with one; mutual TLS with
// a client CA. INVALID_ARGUMENT for a half-given pair or an unreadable or
// empty file (named by its flag).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_TLS_H_
