// The --tls_* files, shared by every front end (gRPC credentials in
// server/service/tls.h, the HTTP front end's OpenSSL context): the pairing
// rules and the reading are checked once, in one place, with the same
// messages on both.
//
//   TLS          --tls_cert, --tls_key (PEM): the server's certificate chain and key.
//   mutual TLS   --tls_client_ca (PEM): clients must present a certificate it signed.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(TlsPem pem, ReadTlsFiles(options));
//   if (pem.plaintext()) ...
#ifndef GEMMSERVE_SERVER_COMMON_TLS_FILES_H_
#define GEMMSERVE_SERVER_COMMON_TLS_FILES_H_

#include <string>

#include "absl/status/statusor.h"

namespace gemmserve {

struct TlsOptions {
  std::string cert_file, key_file, client_ca_file;  // empty: not used
};

// The files' contents; all empty for plaintext, client_ca empty without mutual TLS.
struct TlsPem {
  std::string cert_chain, private_key, client_ca;
  bool plaintext() const { return cert_chain.empty(); }
};

// INVALID_ARGUMENT for a half-given pair, a client CA without a certificate,
// or an unreadable or empty file (named by its flag). The contents are not
// parsed here: each front end's TLS library does that and says what it refuses.
absl::StatusOr<TlsPem> ReadTlsFiles(const TlsOptions& options);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_COMMON_TLS_FILES_H_
