// Process-wide settings that the compute libraries read from the environment
// when they load, so they must be in place before the process starts:
//
//   OMP_WAIT_POLICY=passive  OpenMP workers sleep instead of spinning between
//       parallel regions. gemmserve runs several compute tasks side by side
//       under one core budget; spinning idle OpenMP threads steal those cores
//       (measured on the 2-core machine: 2-thread BLIS calls 20-200x slower
//       next to a busy neighbour with the default policy).
//   BLIS_ARCH_TYPE, chosen from the CPU's features, never its vendor: BLIS
//       0.9 picks its configuration by vendor and family and knows no CPU
//       newer than itself. It ran Zen 5 (AVX-512 with full-width units) on
//       its "generic" reference kernels, and Intel CPUs with AVX-512 newer
//       than Skylake-X on its AVX2 "haswell" ones. With AVX-512 (F, DQ, BW,
//       VL) gemmserve asks for "skx" (sgemm 2.0x haswell on a Xeon, 5x
//       generic on Zen 5, both here); on an AVX2 + FMA CPU that BLIS
//       does not know, "haswell"; otherwise BLIS's own choice stands.
//       Under GEMMSERVE_MAX_CPU_ISA (cpu_features.h) the capped features
//       decide: "haswell" for avx2, BLIS's reference "generic" for generic.
//       The features are the kernel set's (KernelSet::blis, kernel_set.h),
//       so BLIS and gemmserve's own kernels always follow the same record.
//
// A variable the user has set is never overridden. Call first thing in main():
// it re-executes the program once with the settings added if any was missing.
//
//   int main(int argc, char** argv) {
//     gemmserve::ReexecWithComputeEnvironment(argv);
#ifndef GEMMSERVE_SERVER_PROCESS_COMPUTE_ENVIRONMENT_H_
#define GEMMSERVE_SERVER_PROCESS_COMPUTE_ENVIRONMENT_H_

namespace gemmserve {

// Returns only if nothing was missing or the re-exec failed (then the program
// runs on with the libraries' defaults).
void ReexecWithComputeEnvironment(char** argv);

// The BLIS configuration (an arch_t) to run given BLIS's own choice and the
// kernel set's KernelSet::blis (`capped`: lowered by GEMMSERVE_MAX_CPU_ISA);
// exposed for its test.
int BlisArchitectureFor(int blis_choice, bool avx512, bool avx2_fma, bool capped = false);

// "skx", "haswell", ...: the BLIS configuration in use.
const char* BlisArchitecture();

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_PROCESS_COMPUTE_ENVIRONMENT_H_
