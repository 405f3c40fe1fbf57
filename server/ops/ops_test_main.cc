// ops_test's main: the kernels' tests under a BLIS configuration chosen by
// name, never by a number or a vendor (server/CMakeLists.txt's variants):
//
//   GEMMSERVE_TEST_BLIS_CONFIG unset     what BLIS picks by itself
//   GEMMSERVE_TEST_BLIS_CONFIG=server    what the server picks for this CPU's
//                                        features, GEMMSERVE_MAX_CPU_ISA's cap
//                                        included (ReexecWithComputeEnvironment)
//   GEMMSERVE_TEST_BLIS_CONFIG=haswell   that configuration (BLIS's own name)
//
// A name this BLIS does not know exits 2 before any test runs.
#include <gtest/gtest.h>

#include <blis.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "server/process/compute_environment.h"

namespace {

// BLIS_ARCH_TYPE takes the arch_t number; BLIS's table of names gives it.
bool SetBlisConfiguration(const char* name) {
  for (int id = 0; id < BLIS_NUM_ARCHS; ++id) {
    if (std::strcmp(bli_arch_string(static_cast<arch_t>(id)), name) == 0) {
      return setenv("BLIS_ARCH_TYPE", std::to_string(id).c_str(), 1) == 0;
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* config = std::getenv("GEMMSERVE_TEST_BLIS_CONFIG")) {
    if (std::strcmp(config, "server") == 0) {
      gemmserve::ReexecWithComputeEnvironment(argv);
    } else if (!SetBlisConfiguration(config)) {
      std::fprintf(stderr, "GEMMSERVE_TEST_BLIS_CONFIG=%s: no such BLIS configuration\n", config);
      return 2;
    }
  }
  testing::InitGoogleTest(&argc, argv);
  std::printf("BLIS configuration: %s\n", gemmserve::BlisArchitecture());
  return RUN_ALL_TESTS();
}
