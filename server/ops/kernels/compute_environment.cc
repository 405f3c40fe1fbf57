#include "server/ops/kernels/compute_environment.h"

#include <blis.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace gemmserve {
namespace {

bool IntelWithAvx512() {
  return __builtin_cpu_is("intel") && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

}  // namespace

void ReexecWithComputeEnvironment(char** argv) {
  // Marks the re-executed process, so a failing setenv can never loop.
  constexpr char kMarker[] = "GEMMSERVE_COMPUTE_ENV";
  if (std::getenv(kMarker) != nullptr) return;
  bool changed = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    changed |= setenv("OMP_WAIT_POLICY", "passive", 0) == 0;
  }
  if (std::getenv("BLIS_ARCH_TYPE") == nullptr && IntelWithAvx512()) {
    // BLIS 0.9 parses the variable as the number of an arch_t, not a name.
    const std::string skx = std::to_string(static_cast<int>(BLIS_ARCH_SKX));
    changed |= setenv("BLIS_ARCH_TYPE", skx.c_str(), 0) == 0;
  }
  if (!changed) return;
  setenv(kMarker, "1", 1);
  execv("/proc/self/exe", argv);
}

const char* BlisArchitecture() {
  bli_init();  // the architecture query needs the kernel registry in place
  return bli_arch_string(bli_arch_query_id());
}

}  // namespace gemmserve
