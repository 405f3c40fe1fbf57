#!/usr/bin/env bash
# The sanitizer build tree shared by tests/asan.sh and
# tests/fuzz.sh: clang, -DGEMMSERVE_SANITIZE=ON (ASan + UBSan, UB fatal) and
# -DGEMMSERVE_FUZZ=ON (libFuzzer coverage on every library, plus the fuzz
# targets). Configures it if needed and builds the targets given.
#
#   tests/asan_tree.sh TARGET...      # in build-asan/, or $ASAN_BUILD_DIR
#                                     # (relative to the repository root)
#
# -O1 with line tables: fast enough to run the integration suite and to fuzz,
# and stacks that name file and line. One tree for both uses: the fuzzers
# link the server's libraries, so the second build reuses the first's objects.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -eq 0 ]; then
  echo "usage: tests/asan_tree.sh TARGET..." >&2
  exit 2
fi
BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}

if ! command -v clang++ >/dev/null || ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, long) { return 0; }' |
     clang++ -x c++ -fsanitize=fuzzer,address,undefined -o /dev/null - 2>/dev/null; then
  echo "asan_tree: clang++ with libFuzzer and the sanitizer runtimes is missing" \
       "(scripts/install_deps.sh --test installs clang libclang-rt-14-dev libomp-dev llvm)" >&2
  exit 1
fi

# Compilers named explicitly (CMake starts a tree once configured with gcc anew,
# keeping only the compilers: run this script on it twice, or remove it).
# The compiler cache and -Werror as in every tree of the gate.
source tests/build_env.sh
# lld where installed (an option: this project's machines have it; Debian's
# clang does not pull it in, and without it ld.bfd links): the two dozen
# sanitized binaries took 34 s with ld.bfd and 16 s with it on 2 cores.
linker=(-DCMAKE_EXE_LINKER_FLAGS= -DCMAKE_SHARED_LINKER_FLAGS=)
if command -v ld.lld >/dev/null; then
  linker=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld)
fi
# shellcheck disable=SC2046
cmake -S . -B "$BUILD_DIR" $(gemmserve_generator "$BUILD_DIR") "${GEMMSERVE_CMAKE_ARGS[@]}" "${linker[@]}" \
  -DCMAKE_C_COMPILER="$(command -v clang)" \
  -DCMAKE_CXX_COMPILER="$(command -v clang++)" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGEMMSERVE_SANITIZE=ON -DGEMMSERVE_FUZZ=ON \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target "$@"
