// Process-wide settings that the compute libraries read from the environment
// when they load, so they must be in place before the process starts:
//
//   OMP_WAIT_POLICY=passive  OpenMP workers sleep instead of spinning between
//       parallel regions. gemmserve runs several compute tasks side by side
//       under one core budget; spinning idle OpenMP threads steal those cores
//       (measured on the 2-core machine: 2-thread BLIS calls 20-200x slower
//       next to a busy neighbour with the default policy).
//   BLIS_ARCH_TYPE=<skx> on Intel CPUs with AVX-512 (F, DQ, BW, VL). BLIS 0.9
//       cannot count the FMA units of CPUs newer than it and falls back to its
//       AVX2 "haswell" kernels; the AVX-512 kernels ran sgemm 2.0x faster on
//       this machine (131 vs 79 GFLOP/s on one core).
//
// A variable the user has set is never overridden. Call first thing in main():
// it re-executes the program once with the settings added if any was missing.
//
//   int main(int argc, char** argv) {
//     gemmserve::ReexecWithComputeEnvironment(argv);
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_COMPUTE_ENVIRONMENT_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_COMPUTE_ENVIRONMENT_H_

namespace gemmserve {

// Returns only if nothing was missing or the re-exec failed (then the program
// runs on with the libraries' defaults).
void ReexecWithComputeEnvironment(char** argv);

// "skx", "haswell", ...: the BLIS configuration in use.
const char* BlisArchitecture();

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_COMPUTE_ENVIRONMENT_H_
