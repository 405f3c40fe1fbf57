#include "server/common/descriptor_limit.h"

#include <sys/resource.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gemmserve {

int64_t RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY) return INT64_MAX;
  return static_cast<int64_t>(std::min<rlim_t>(limit.rlim_cur, INT64_MAX));
}

DescriptorPlan PlanDescriptors(int64_t limit, int64_t max_connections, int shm_max_regions) {
  DescriptorPlan plan;
  plan.limit = limit;
  const int64_t for_connections = std::max<int64_t>(limit - kReservedDescriptors, 0);
  const int64_t for_shm = std::max<int64_t>(for_connections - max_connections, 0);
  plan.shm_max_regions = static_cast<int>(std::min<int64_t>(shm_max_regions, for_shm));
  const std::string caps =
      absl::StrCat("the connection caps (--http_max_connections, --grpc_max_connections) of ",
                   max_connections, " and ", kReservedDescriptors, " for the rest");
  if (max_connections > for_connections) {
    plan.warning = absl::StrCat("the descriptor limit (ulimit -n) is ", limit, ": less than ", caps,
                                "; accepts wait while descriptors are short. Raise the limit or "
                                "lower the caps.");
  } else if (plan.shm_max_regions < shm_max_regions) {
    plan.warning =
        absl::StrCat("the descriptor limit (ulimit -n) is ", limit,
                     ": shared memory regions are capped at ", plan.shm_max_regions, " (of ",
                     shm_max_regions, ") to leave ", caps, ". Raise the limit to register more.");
  }
  return plan;
}

}  // namespace gemmserve
