#include "server/ops/kernels/compute_environment.h"

#include <blis.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace gemmserve {
namespace {

bool HasAvx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

bool HasAvx2Fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

}  // namespace

int BlisArchitectureFor(int blis_choice, bool avx512, bool avx2_fma) {
  if (avx512) return BLIS_ARCH_SKX;
  // BLIS knew this CPU's family (zen, zen2, zen3, haswell, ...): its choice
  // and block sizes stand. An AVX2 CPU newer than it falls to "generic".
  if (avx2_fma && blis_choice == BLIS_ARCH_GENERIC) return BLIS_ARCH_HASWELL;
  return blis_choice;
}

void ReexecWithComputeEnvironment(char** argv) {
  // Marks the re-executed process, so a failing setenv can never loop.
  constexpr char kMarker[] = "GEMMSERVE_COMPUTE_ENV";
  if (std::getenv(kMarker) != nullptr) return;
  bool changed = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    changed |= setenv("OMP_WAIT_POLICY", "passive", 0) == 0;
  }
  if (std::getenv("BLIS_ARCH_TYPE") == nullptr) {
    bli_init();  // what BLIS would pick by itself (by vendor and family)
    const int own = static_cast<int>(bli_arch_query_id());
    const int chosen = BlisArchitectureFor(own, HasAvx512(), HasAvx2Fma());
    if (chosen != own) {
      // BLIS 0.9 parses the variable as the number of an arch_t, not a name.
      changed |= setenv("BLIS_ARCH_TYPE", std::to_string(chosen).c_str(), 0) == 0;
    }
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
