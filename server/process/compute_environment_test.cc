#include "server/process/compute_environment.h"

#include <blis.h>
#include <gtest/gtest.h>

#include <string>

namespace gemmserve {
namespace {

// Features, never the vendor: an AVX-512 CPU gets BLIS's AVX-512 kernels
// whatever BLIS made of its family (generic on Zen 5, zen3 on Zen 4, haswell
// on Intel CPUs newer than Skylake-X).
TEST(ComputeEnvironmentTest, Avx512CpusGetSkxWhateverBlisPicked) {
  for (arch_t own : {BLIS_ARCH_GENERIC, BLIS_ARCH_ZEN3, BLIS_ARCH_HASWELL, BLIS_ARCH_SKX}) {
    EXPECT_EQ(BlisArchitectureFor(own, /*avx512=*/true, /*avx2_fma=*/true), BLIS_ARCH_SKX)
        << bli_arch_string(own);
  }
}

TEST(ComputeEnvironmentTest, Avx2CpusKeepAKnownPickAndLeaveGeneric) {
  EXPECT_EQ(BlisArchitectureFor(BLIS_ARCH_GENERIC, false, true), BLIS_ARCH_HASWELL);
  for (arch_t own : {BLIS_ARCH_ZEN, BLIS_ARCH_ZEN2, BLIS_ARCH_ZEN3, BLIS_ARCH_HASWELL}) {
    EXPECT_EQ(BlisArchitectureFor(own, false, true), own) << bli_arch_string(own);
  }
}

TEST(ComputeEnvironmentTest, OlderCpusKeepBlisChoice) {
  EXPECT_EQ(BlisArchitectureFor(BLIS_ARCH_GENERIC, false, false), BLIS_ARCH_GENERIC);
  EXPECT_EQ(BlisArchitectureFor(BLIS_ARCH_SANDYBRIDGE, false, false), BLIS_ARCH_SANDYBRIDGE);
}

// GEMMSERVE_MAX_CPU_ISA lowers what BLIS may run, never raises it.
TEST(ComputeEnvironmentTest, ACapLowersBlisToTheCappedFeatures) {
  for (arch_t own : {BLIS_ARCH_SKX, BLIS_ARCH_KNL, BLIS_ARCH_GENERIC}) {
    EXPECT_EQ(BlisArchitectureFor(own, false, true, /*capped=*/true), BLIS_ARCH_HASWELL)
        << bli_arch_string(own);
  }
  for (arch_t own : {BLIS_ARCH_ZEN3, BLIS_ARCH_HASWELL}) {
    EXPECT_EQ(BlisArchitectureFor(own, false, true, true), own) << bli_arch_string(own);
  }
  for (arch_t own : {BLIS_ARCH_SKX, BLIS_ARCH_ZEN3, BLIS_ARCH_SANDYBRIDGE, BLIS_ARCH_GENERIC}) {
    EXPECT_EQ(BlisArchitectureFor(own, false, false, true), BLIS_ARCH_GENERIC)
        << bli_arch_string(own);
  }
  EXPECT_EQ(BlisArchitectureFor(BLIS_ARCH_HASWELL, true, true, true), BLIS_ARCH_SKX);
}

TEST(ComputeEnvironmentTest, NamesTheConfigurationInUse) {
  const std::string name = BlisArchitecture();
  EXPECT_FALSE(name.empty());
  EXPECT_STREQ(name.c_str(), bli_arch_string(bli_arch_query_id()));
}

}  // namespace
}  // namespace gemmserve
