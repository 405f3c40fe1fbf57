#!/usr/bin/env bash
# The integration suite against a server built with ASan + UBSan (issue 7):
# builds the server, the CLI, the Python stubs and the C++ client in the
# sanitizer tree (tests/asan_tree.sh) and runs every ctest test labelled
# "integration" there. Any ASan or UBSan report aborts the server, and a leak
# found by LeakSanitizer at exit makes it exit non-zero, so the test that
# drove it fails (each test's ServerProcess.stop() expects exit code 0 and
# shows the server's stderr). About 5 minutes on 2 cores, build included.
#
#   tests/asan_integration.sh                 # all of it
#   tests/asan_integration.sh -R security     # extra ctest arguments
#
# integration_deploy is left out: it checks the Release binary's shared
# libraries against the Dockerfile, and this clang build links others
# (libomp); it runs in the Release stage of tests/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
tests/asan_tree.sh gemmserve gemmserve-cli gemmserve_python_stubs gemmserve_client

# A binary that silently lost its instrumentation would pass everything: each
# instrumented translation unit carries an asan.module_ctor.
instrumented=$(nm "$BUILD_DIR/bin/gemmserve" | grep -c "asan.module_ctor" || true)
if [ "$instrumented" -lt 10 ]; then
  echo "asan_integration: $BUILD_DIR/bin/gemmserve has $instrumented ASan-instrumented" \
       "translation units; expected the whole server" >&2
  exit 1
fi
echo "asan_integration: gemmserve has $instrumented instrumented translation units"
# The sanitizer options the tests run with are set by tests/CMakeLists.txt.
cd "$BUILD_DIR"
ctest -L integration -E '^integration_deploy$' --output-on-failure --timeout 900 "$@"
