#!/usr/bin/env bash
# The whole ctest suite built with ASan + UBSan (issue 7): the unit tests,
# which drive every kernel over its edge shapes, and the integration tests and
# clients against a sanitized server. Builds everything in the sanitizer tree
# (tests/asan_tree.sh) and runs ctest there. Any ASan or UBSan report, or a
# leak found by LeakSanitizer at exit, ends the process with exit code 86
# (ASAN_OPTIONS below), and a report in a server's stderr fails the test that
# ran it. Run the tree's tests through this script, which sets those options.
# About 6 minutes on 2 cores, build included.
#
#   tests/asan.sh                      # all of it
#   tests/asan.sh -R security          # extra ctest arguments
#
# integration_deploy is left out: it checks the Release binary's shared
# libraries against the Dockerfile, and this clang build links others
# (libomp); it runs in the Release stage of tests/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
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
# For every test and every process it starts: a report or a leak ends the
# process with exit code 86, which no test expects (the CLI's and the
# example's expected failures exit 1, the server's 0), and
# ServerProcess fails any test whose server printed a report
# (tests/python_lib/gemmserve_testing/server.py).
export ASAN_OPTIONS="exitcode=86:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="exitcode=86:halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
cd "$BUILD_DIR"
ctest -E '^integration_deploy$' --output-on-failure --timeout 900 "$@"
