#!/usr/bin/env bash
# The ThreadSanitizer stage (docs/testing.md): the tests labelled `tsan`, built
# in build-tsan/ (clang, -DGEMMSERVE_TSAN=ON) and run there: the unit tests of the
# concurrent layers (the dynamic batcher and its threaded stress test, the
# worker pool, Serving and its tracer and log settings, the repository's
# loader, the gRPC and HTTP front ends, metrics, shared memory) and the
# integration suites of streams, HTTP sessions, the tracer, the loader, the
# stock Triton client and concurrent requests against a TSan-built server.
# A TSan report fails the test: a unit test's process exits 66, and a
# server's report in its stderr fails the test that ran it
# (tests/python_lib/gemmserve_testing/server.py).
#
#   tests/tsan.sh                   # build, then the stage's tests
#   tests/tsan.sh --build-only      # build only
#   tests/tsan.sh -R stream         # extra ctest arguments
#
# Abseil's locks are compiled with TSan from the installed version's source
# (tests/tsan_absl_source.sh fetches it from Debian's archive, cmake/
# ThreadSanitizer.cmake links it), or TSan could not see absl::Mutex. The
# operators (server/ops) are not instrumented: their threads are OpenMP's and
# BLIS's, which TSan cannot see either.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${TSAN_BUILD_DIR:-build-tsan}
build_only=0
if [[ "${1:-}" == --build-only ]]; then
  build_only=1
  shift
fi
scripts/install_deps.sh --test
if ! command -v clang++ >/dev/null || ! echo 'int main() {}' |
     clang++ -x c++ -fsanitize=thread -o /dev/null - 2>/dev/null; then
  echo "tsan: clang++ with the TSan runtime is missing (scripts/install_deps.sh --test" \
       "installs clang libclang-rt-14-dev)" >&2
  exit 1
fi
# A tree an older gate configured with gcc: CMake would drop every other
# setting when the compiler changes, so it is configured anew.
if [[ -f "$BUILD_DIR/CMakeCache.txt" ]] &&
   ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$BUILD_DIR/CMakeCache.txt"; then
  rm -rf "$BUILD_DIR/CMakeCache.txt" "$BUILD_DIR/CMakeFiles"
fi
source tests/build_env.sh
absl_source=$(tests/tsan_absl_source.sh "$BUILD_DIR/abseil-source")
# clang at -O0 with line tables: reports that name file and line, and the
# least compiling. The third tree of the gate, it must be cheap: clang at -O0
# compiled http_server.cc with TSan in 22 s, gcc in 38 s (-O0) and 43 s (-O1),
# clang at -O1 in 48 s (measured side by side); the stage's tests run 15 s
# longer than at -O1. lld where installed, as in the ASan tree.
linker=(-DCMAKE_EXE_LINKER_FLAGS= -DCMAKE_SHARED_LINKER_FLAGS=)
if command -v ld.lld >/dev/null; then
  linker=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld)
fi
# shellcheck disable=SC2046
cmake -S . -B "$BUILD_DIR" $(gemmserve_generator "$BUILD_DIR") "${GEMMSERVE_CMAKE_ARGS[@]}" "${linker[@]}" \
  -DCMAKE_C_COMPILER="$(command -v clang)" -DCMAKE_CXX_COMPILER="$(command -v clang++)" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGEMMSERVE_TSAN=ON -DGEMMSERVE_TSAN_ABSL_SOURCE="$absl_source" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O0 -gline-tables-only" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -gline-tables-only" >/dev/null
# What the labelled tests run: their binaries, the server, the Python stubs.
mapfile -t targets < <(ctest --test-dir "$BUILD_DIR" -N -L '^tsan$' |
                         sed -n 's/^ *Test *#[0-9]*: \([A-Za-z0-9_]*_test\)$/\1/p')
if [[ ${#targets[@]} -eq 0 ]]; then
  echo "tsan: no unit test is labelled tsan in $BUILD_DIR" >&2
  exit 1
fi
cmake --build "$BUILD_DIR" -j"$(nproc)" --target "${targets[@]}" gemmserve gemmserve_python_stubs

# Abseil's locks must be the instrumented ones: the server defines them itself.
# (exported: gRPC's and Debian's Abseil's calls resolve to it at run time).
defined=$(nm -DC --defined-only "$BUILD_DIR/bin/gemmserve" |
            grep -c ' T absl::[a-z0-9_]*::Mutex::Lock()$' || true)
if [[ "$defined" != 1 ]]; then
  echo "tsan: $BUILD_DIR/bin/gemmserve does not define absl::Mutex::Lock: TSan would not" \
       "see Abseil's locks (cmake/ThreadSanitizer.cmake)" >&2
  exit 1
fi
[[ "$build_only" == 1 ]] && exit 0
# A report makes a unit test's process exit 66 when it ends; a server keeps
# serving after one, and its test fails on the report in its stderr. tests/tsan_suppressions.txt says why each of its lines is there.
export TSAN_OPTIONS="exitcode=66:second_deadlock_stack=1:ignore_noninstrumented_modules=1:history_size=7:suppressions=$(pwd)/tests/tsan_suppressions.txt${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
cd "$BUILD_DIR"
ctest -L '^tsan$' -j"$(nproc)" --output-on-failure --test-output-size-passed 16000000 \
  --timeout 900 "$@"
