#include "server/process/compute_environment.h"

#include <blis.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "server/ops/kernels/kernel_set.h"

namespace gemmserve {

int BlisArchitectureFor(int blis_choice, bool avx512, bool avx2_fma, bool capped) {
  if (avx512) return BLIS_ARCH_SKX;
  const bool avx512_config =
      blis_choice == BLIS_ARCH_SKX || blis_choice == BLIS_ARCH_KNL || blis_choice == BLIS_ARCH_KNC;
  if (avx2_fma) {
    // BLIS knew this CPU's family (zen, zen2, zen3, haswell, ...): its choice
    // and block sizes stand. An AVX2 CPU newer than it falls to "generic";
    // under GEMMSERVE_MAX_CPU_ISA=avx2 its AVX-512 choice is too wide.
    if (blis_choice == BLIS_ARCH_GENERIC || (capped && avx512_config)) return BLIS_ARCH_HASWELL;
    return blis_choice;
  }
  // GEMMSERVE_MAX_CPU_ISA=generic: BLIS's reference kernels.
  return capped ? BLIS_ARCH_GENERIC : blis_choice;
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
    // From the features the kernels were chosen from (kernel_set.h).
    const KernelSet::Blis& blis = Kernels().blis;
    const int chosen = BlisArchitectureFor(own, blis.avx512, blis.avx2_fma, blis.capped);
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
