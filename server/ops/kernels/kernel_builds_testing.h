// The builds of the streaming and quantized decode kernels that this CPU can
// run, for tests that compare each with a reference.
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_KERNEL_BUILDS_TESTING_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_KERNEL_BUILDS_TESTING_H_

#include <vector>

#include "server/ops/kernels/kernel_set.h"
#include "server//ops/kernels/streaming_gemm.h"

namespace gemmserve {

enum class KernelBuild { kGeneric, kAvx2, kAvx512 };

inline const char* KernelBuildName(KernelBuild b) {
  return b == KernelBuild::kAvx512 ? " avx512" : b == KernelBuild::kAvx2 ? " avx2" : " generic";
}

inline std::vector<KernelBuild> KernelBuilds() {
  std::vector<KernelBuild> builds = {KernelBuild::kGeneric};
  if (Kernels().avx2) builds.push_back(KernelBuild::kAvx2);
  if (Kernels().avx512) builds.push_back(KernelBuild::kAvx512);
  return builds;
}

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_KERNEL_BUILDS_TESTING_H_
