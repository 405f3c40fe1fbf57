#!/usr/bin/env bash
# The ASan + UBSan stage (issue 7): the suite built in the clang sanitizer tree
# (tests/asan_tree.sh) and run there: the unit tests, which drive every kernel
# over its edge shapes on every ISA build the CPU has, and the integration
# tests and clients against a sanitized server. Any ASan or UBSan report, or a
# leak found by LeakSanitizer at exit, ends the process with exit code 86
# (ASAN_OPTIONS below), and a report in a server's stderr fails the test that
# ran it. Run the tree's tests through this script, which sets those options.
#
#   tests/asan.sh                      # build, then the stage's tests
#   tests/asan.sh --build-only         # build only
#   tests/asan.sh -R security          # extra ctest arguments
#
# Not here, by label (cmake/Testing.cmake; each runs in the Release stage):
# capped (reruns whose only difference is a CPU cap or a BLIS configuration:
# the kernels they reach are each run under ASan by ops_test), soak, benchmark
# (smoke tests and reports), script (Python only), release_only
# (integration_deploy checks the Release binary's shared libraries against the
# Dockerfile; this clang build links others, libomp).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
build_only=0
if [[ "${1:-}" == --build-only ]]; then
  build_only=1
  shift
fi
scripts/install_deps.sh --test
tests/asan_tree.sh all

# A binary that silently lost its instrumentation would pass everything: each
# instrumented translation unit carries an asan.module_ctor.
instrumented=$(nm "$BUILD_DIR/bin/gemmserve" | grep -c "asan.module_ctor" || true)
if [ "$instrumented" -lt 10 ]; then
  echo "asan: $BUILD_DIR/bin/gemmserve has $instrumented ASan-instrumented" \
       "translation units; expected the whole server" >&2
  exit 1
fi
echo "asan: gemmserve has $instrumented instrumented translation units"
[[ "$build_only" == 1 ]] && exit 0
# For every test and every process it starts: a report or a leak ends the
# process with exit code 86, which no test expects (the CLI's and the
# example's expected failures exit 1, the server's 0), and
# ServerProcess fails any test whose server printed a report
# (tests/python_lib/gemmserve_testing/server.py).
export ASAN_OPTIONS="exitcode=86:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="exitcode=86:halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
cd "$BUILD_DIR"
# Every passing test's whole output (ctest keeps 1 KiB by default) in the
# JUnit file, where tests/gate_summary.py finds the skips and their reasons.
ctest -LE '^(capped|soak|benchmark|script|release_only|client)$' -j"$(nproc)" --output-on-failure \
  --test-output-size-passed 16000000 --timeout 900 "$@"
