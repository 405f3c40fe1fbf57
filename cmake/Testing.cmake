# What the test registrations share (server/, client/, tests/): the CPU guards
# of the variants that need a feature, and the labels that place each test in
# the stages of tests/run.sh (docs/testing.md):
#
#   unit, integration   Release, and ASan + UBSan (the TSan stage: those also
#                       labelled tsan)
#   capped              Release only: a suite again under GEMMSERVE_MAX_CPU_ISA
#                       or a forced BLIS configuration
#   benchmark           Release only: benchmark smoke tests and reports
#   script              Release only: the Python-only tests of scripts/
#   soak                Release only: the soak (10 s; 60 s with GEMMSERVE_LONG=1)
#   release_only        Release only: checks of the Release binary itself
#   client              Release only: the clients' own tests (language clients, perf)
#   tsan                the TSan stage too (tests/tsan.sh)
#
# tests/asan.sh and tests/tsan.sh select their stages' tests by these labels.

# gemmserve_cpu_guard(OUT FLAG...): the start of a `sh -c` command that exits
# 77 (ctest's skip, SKIP_RETURN_CODE) unless /proc/cpuinfo lists every FLAG.
function(gemmserve_cpu_guard out)
  set(guard "")
  foreach(flag ${ARGN})
    string(APPEND guard "grep -qw ${flag} /proc/cpuinfo || { echo 'this CPU lacks ${flag}'; exit 77; }; ")
  endforeach()
  set(${out} "${guard}" PARENT_SCOPE)
endfunction()

# The flags the server's AVX-512 and AVX2 builds need (CpuFeatures::Avx512Build
# and Avx2Build in server/ops/kernels/cpu_features.h).
set(GEMMSERVE_AVX512_FLAGS avx512f avx512bw avx512vl avx512dq fma)
set(GEMMSERVE_AVX2_FLAGS avx2 fma f16c)

# What the test binaries' own sources compile at (gemmserve_test in
# server/CMakeLists.txt): -O0 in the sanitizer tree, -O1 in a Release tree,
# the tree's level otherwise (the TSan tree's RelWithDebInfo).
if(GEMMSERVE_SANITIZE)
  set(GEMMSERVE_TEST_OPTIMIZATION -O0)
else()
  set(GEMMSERVE_TEST_OPTIMIZATION $<$<CONFIG:Release>:-O1>)
endif()
