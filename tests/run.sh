#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds, runs every test through
# ctest. Exits non-zero if anything fails.
#   tests/run.sh                 # Release build in build/, then the sanitizer stages
#   GEMMSERVE_SKIP_TSAN=1 GEMMSERVE_SKIP_ASAN=1 GEMMSERVE_SKIP_FUZZ=1 \
#     GEMMSERVE_SKIP_CONTAINER=1 tests/run.sh
#                                # the Release stage only
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh --test
BUILD_DIR=${BUILD_DIR:-build}
if [[ "$BUILD_DIR" == build-asan || "$BUILD_DIR" == build-tsan ]]; then
  echo "tests/run.sh: $BUILD_DIR is a sanitizer stage's tree; pick another BUILD_DIR" >&2
  exit 2
fi
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j"$(nproc)"
(cd "$BUILD_DIR" && ctest --output-on-failure --timeout 600)

# ThreadSanitizer on the dynamic batcher's tests (their threaded stress test
# included): the batcher locks with std::mutex, which TSan sees; Debian's
# Abseil is not TSan-built, so the rest of the server would report its
# absl::Mutex locking as races. About 2 minutes.
if [[ "${GEMMSERVE_SKIP_TSAN:-0}" != 1 ]]; then
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGEMMSERVE_TSAN=ON >/dev/null
  cmake --build build-tsan -j"$(nproc)" --target dynamic_batcher_test
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1" build-tsan/bin/dynamic_batcher_test
fi

# The suite again, built with ASan + UBSan in the clang sanitizer tree
# build-asan/ (tests/asan.sh): unit tests, and integration tests against a
# sanitized server. About 6 minutes on 2 cores, build included.
if [[ "${GEMMSERVE_SKIP_ASAN:-0}" != 1 ]]; then
  tests/asan.sh
fi

# Fuzzing under ASan + UBSan (fuzz/README.md): every saved regression input,
# then each libFuzzer target for GEMMSERVE_FUZZ_SECONDS (default 30) from its
# seed corpus, in the same build-asan/ tree.
if [[ "${GEMMSERVE_SKIP_FUZZ:-0}" != 1 ]]; then
  tests/fuzz.sh "${GEMMSERVE_FUZZ_SECONDS:-30}"
fi

# The container (tests/container.sh, README: Docker): builds the image from this
# checkout in a real Docker engine (starting dockerd if none runs) and checks it
# serving under the Kubernetes manifest's restrictions, its HEALTHCHECK, docker
# stop, a mounted repository, and docker-compose with Prometheus. Skipped with a
# message where no engine can start. About 7 minutes on a fresh machine.
if [[ "${GEMMSERVE_SKIP_CONTAINER:-0}" != 1 ]]; then
  tests/container.sh
fi
