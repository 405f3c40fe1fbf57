// The process's descriptor limit, and how the server's own maxima fit in it.
// Every HTTP connection, gRPC connection and registered shared-memory region
// holds a descriptor; a process out of them fails accept(), shm_open() and
// Asio's own set-up. At start-up the soft RLIMIT_NOFILE is raised to the hard
// one, and what the configured maxima need is held against it: the
// shared-memory regions get what the connection caps (HTTP and gRPC) and a
// reserve leave, and a limit too small for the connections alone is reported
// with the numbers.
//
//   const int64_t limit = gemmserve::RaiseDescriptorLimit();
//   gemmserve::DescriptorPlan plan =
//       gemmserve::PlanDescriptors(limit, max_connections, shm_max_regions);
//   if (!plan.warning.empty()) GEMMSERVE_LOG(WARNING) << plan.warning;
#ifndef GEMMSERVE_SERVER_COMMON_DESCRIPTOR_LIMIT_H_
#define GEMMSERVE_SERVER_COMMON_DESCRIPTOR_LIMIT_H_

#include <cstdint>
#include <string>

namespace gemmserve {

// Descriptors kept for everything but connections and regions: listeners,
// epoll and event descriptors, model files being loaded, gRPC connections'
// first arrivals, the metrics endpoint, logs.
inline constexpr int64_t kReservedDescriptors = 256;

// Raises the soft RLIMIT_NOFILE to the hard limit (where allowed) and returns
// the soft limit now in force.
int64_t RaiseDescriptorLimit();

struct DescriptorPlan {
  int64_t limit = 0;
  int shm_max_regions = 0;  // at most the one asked for
  std::string warning;      // empty when everything fits
};

// How `max_connections` (HTTP's and gRPC's caps together) and
// `shm_max_regions` fit under `limit`: the regions are cut to what the
// connections and kReservedDescriptors leave (never below 0); the warning
// says what was cut, or that the connections alone do not fit (the server
// then still runs: its accepts back off while descriptors are short).
DescriptorPlan PlanDescriptors(int64_t limit, int64_t max_connections, int shm_max_regions);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_COMMON_DESCRIPTOR_LIMIT_H_
