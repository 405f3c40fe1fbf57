// Network addresses as the endpoints write them: a host joined to a port.
//
//   HostPort("::1", 8001)      -> "[::1]:8001"
//   HostPort("0.0.0.0", 8002)  -> "0.0.0.0:8002"
#ifndef GEMMSERVE_SERVER_COMMON_HOST_PORT_H_
#define GEMMSERVE_SERVER_COMMON_HOST_PORT_H_

#include <string>

namespace gemmserve {

// `host` ready for ":port": an IPv6 address in brackets (once).
std::string HostForPort(const std::string& host);

// "host:port", the host as HostForPort writes it.
std::string HostPort(const std::string& host, int port);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_COMMON_HOST_PORT_H_
