#include "server/service/tls.h"

#include <utility>

#include <grpcpp/security/server_credentials.h>

namespace gemmserve {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options) {
  auto pem = ReadTlsFiles(options);
  if (!pem.ok()) return pem.status();
  if (pem->plaintext()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  pair.cert_chain = std::move(pem->cert_chain);
  pair.private_key = std::move(pem->private_key);
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!pem->client_ca.empty()) {
    ssl.pem_root_certs = std::move(pem->client_ca);
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  } else {
    ssl.client_certificate_request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace gemmserve
