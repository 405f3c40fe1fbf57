// Transport security of the gRPC endpoint (bearer tokens are the serving
// layer's: server/serving/token_authenticator.h; the files and their rules
// are shared with the HTTP front end: server/common/tls_files.h).
//
//   GEMMSERVE_ASSIGN_OR_RETURN(auto creds, MakeServerCredentials(tls));
#ifndef GEMMSERVE_SERVER_SERVICE_TLS_H_
#define GEMMSERVE_SERVER_SERVICE_TLS_H_

#include <memory>

#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"
#include "server/common/tls_files.h"

namespace gemmserve {

// Insecure credentials without a certificate; TLS with one; mutual TLS with
// a client CA. INVALID_ARGUMENT as ReadTlsFiles says.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_TLS_H_
