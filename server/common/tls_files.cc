#include "server/common/tls_files.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gemmserve {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in || text.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read a PEM file there"));
  }
  return std::move(text).str();
}

}  // namespace

absl::StatusOr<TlsPem> ReadTlsFiles(const TlsOptions& options) {
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  TlsPem pem;
  if (options.cert_file.empty()) {
    if (!options.client_ca_file.empty()) {
      return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
    }
    return pem;
  }
  auto cert = ReadPem(options.cert_file, "--tls_cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(options.key_file, "--tls_key");
  if (!key.ok()) return key.status();
  pem.cert_chain = *std::move(cert);
  pem.private_key = *std::move(key);
  if (!options.client_ca_file.empty()) {
    auto ca = ReadPem(options.client_ca_file, "--tls_client_ca");
    if (!ca.ok()) return ca.status();
    pem.client_ca = *std::move(ca);
  }
  return pem;
}

}  // namespace gemmserve
