#!/usr/bin/env bash
# The whole ctest suite built with ASan + UBSan (issue 7): the unit tests,
# which drive every kernel over its edge shapes, and the integration tests and
# clients against a sanitized server. Builds everything in the sanitizer tree
# (tests/asan_tree.sh) and runs ctest there. Any ASan or UBSan report aborts
# the process; a leak found by LeakSanitizer at exit makes it exit non-zero,
# so a server's leak fails the test that stopped it (ServerProcess.stop()
# expects exit code 0 and shows the server's stderr). About 6 minutes on 2
# cores, build included.
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
# The integration tests get their sanitizer options from tests/CMakeLists.txt.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
cd "$BUILD_DIR"
ctest -E '^integration_deploy$' --output-on-failure --timeout 900 "$@"
