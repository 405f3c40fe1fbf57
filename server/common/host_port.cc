#include "server/common/host_port.h"

#include "absl/strings/str_cat.h"

namespace gemmserve {

std::string HostForPort(const std::string& host) {
  return host.find(':') != std::string::npos && host.front() != '[' ? absl::StrCat("[", host, "]")
                                                                    : host;
}

std::string HostPort(const std::string& host, int port) {
  return absl::StrCat(HostForPort(host), ":", port);
}

}  // namespace gemmserve
