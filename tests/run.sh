#!/usr/bin/env bash
# The whole test suite, and the gate CI runs (.ci/run): installs dependencies,
# builds, runs every stage, and prints each stage's wall time and the slowest
# ten tests at the end. Exits non-zero if anything fails. docs/testing.md says
# which stage runs which test, and why.
#
#   tests/run.sh                     # every stage
#   GEMMSERVE_LONG=1 tests/run.sh    # before a release: the 60 s soak, 5 minutes
#                                    # of fuzzing per target, the image from source,
#                                    # the suite at each lower CPU level
#   GEMMSERVE_SKIP_TSAN=1 GEMMSERVE_SKIP_ASAN=1 GEMMSERVE_SKIP_FUZZ=1 \
#     GEMMSERVE_SKIP_CONTAINER=1 tests/run.sh
#                                    # the Release stage only
#
# Stages: Release build (build/, gcc -O3), Release tests (ctest, as many at
# once as the machine has cores), TSan build and tests (build-tsan/), ASan + UBSan
# build and tests (build-asan/, clang), fuzzing (the same tree), container.
# CI=true or GEMMSERVE_WERROR=1 makes our warnings errors (tests/build_env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

export GEMMSERVE_LONG=${GEMMSERVE_LONG:-0}
BUILD_DIR=${BUILD_DIR:-build}
if [[ "$BUILD_DIR" == build-asan || "$BUILD_DIR" == build-tsan ]]; then
  echo "tests/run.sh: $BUILD_DIR is a sanitizer stage's tree; pick another BUILD_DIR" >&2
  exit 2
fi
JOBS=$(nproc)
GATE_DIR="$(pwd)/$BUILD_DIR/gate"
rm -rf "$GATE_DIR"
mkdir -p "$GATE_DIR"

# record NAME START_NS RC: notes a stage's wall time and outcome.
record() {
  printf '%s\t%s\t%s\n' "$1" "$(awk "BEGIN { print ($(date +%s%N) - $2) / 1e9 }")" \
    "$([[ $3 -eq 0 ]] && echo passed || echo "FAILED ($3)")" >>"$GATE_DIR/stages.tsv"
}
# stage NAME COMMAND...: runs a stage and records it. The command runs as a
# job of its own: under `cmd || rc=$?` bash would ignore set -e inside a
# function, and a failed step would go on to the next.
stage() {
  local name=$1 start rc=0
  shift
  echo "==> gate: $name"
  start=$(date +%s%N)
  "$@" &
  wait $! || rc=$?
  record "$name" "$start" "$rc"
  return "$rc"
}
container_pid=""
finish() {
  if [[ -n "$container_pid" ]] && kill -0 "$container_pid" 2>/dev/null; then
    kill -TERM "$container_pid" 2>/dev/null || true  # it removes what it made
    wait "$container_pid" 2>/dev/null || true
  fi
  /usr/bin/python3 tests/gate_summary.py "$GATE_DIR" || true
}
trap finish EXIT
skipped() {  # NAME VARIABLE
  printf '%s\t0\tskipped (%s=1)\n' "$1" "$2" >>"$GATE_DIR/stages.tsv"
}

stage dependencies scripts/install_deps.sh --test
source tests/build_env.sh

release_build() {
  # shellcheck disable=SC2046,SC2086
  cmake -S . -B "$BUILD_DIR" $(gemmserve_generator "$BUILD_DIR") -DCMAKE_BUILD_TYPE=Release \
    "${GEMMSERVE_CMAKE_ARGS[@]}" ${CMAKE_ARGS:-}
  cmake --build "$BUILD_DIR" -j"$JOBS"
}
stage release-build release_build
# Every passing test's whole output in the JUnit file (ctest keeps 1 KiB by
# default), where tests/gate_summary.py finds the skips and their reasons.
stage release-tests ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 600 -j"$JOBS" \
  --test-output-size-passed 16000000 --output-junit "$GATE_DIR/ctest-release.xml"

# Before a release (GEMMSERVE_LONG=1): the Release suite again under each
# GEMMSERVE_MAX_CPU_ISA level below this CPU's (tests/cpu_levels.sh).
if [[ "$GEMMSERVE_LONG" == 1 ]]; then
  stage cpu-levels env BUILD_DIR="$BUILD_DIR" tests/cpu_levels.sh
fi

# The container image (tests/container.sh) is made in the background from
# here on: a base image by debootstrap and the runtime stage's packages are
# downloads and unpacking, which the sanitizer stages' compiling hardly
# notices. Its checks wait for the last stage, on a quiet machine.
if [[ "${GEMMSERVE_SKIP_CONTAINER:-0}" != 1 ]]; then
  tests/container.sh --checks-after "$GATE_DIR/container.go" >"$GATE_DIR/container.log" 2>&1 &
  container_pid=$!
fi

# ThreadSanitizer in build-tsan/ (tests/tsan.sh): the unit tests of the
# concurrent layers and the integration suites of streams, HTTP sessions, the
# tracer, the loader and concurrent callers, against a TSan-built server, with
# Abseil's locks built with TSan from the installed version's source.
if [[ "${GEMMSERVE_SKIP_TSAN:-0}" != 1 ]]; then
  stage tsan-build tests/tsan.sh --build-only
  stage tsan-tests tests/tsan.sh --output-junit "$GATE_DIR/ctest-tsan.xml"
else
  skipped tsan GEMMSERVE_SKIP_TSAN
fi

# ASan + UBSan in the clang tree build-asan/ (tests/asan.sh): the unit tests,
# the request paths, loaders and front ends through the integration suites
# and cli_test, against a sanitized server; not the reruns under a CPU cap, the
# soak, the benchmarks or the scripts' own tests (their labels).
if [[ "${GEMMSERVE_SKIP_ASAN:-0}" != 1 ]]; then
  stage asan-build tests/asan.sh --build-only
  stage asan-tests tests/asan.sh --output-junit "$GATE_DIR/ctest-asan.xml"
else
  skipped asan GEMMSERVE_SKIP_ASAN
fi

# Fuzzing under ASan + UBSan (fuzz/README.md): every saved regression input,
# then each libFuzzer target from its seed corpus, as many at once as there
# are cores: 15 s each (GEMMSERVE_FUZZ_SECONDS), 300 s with GEMMSERVE_LONG=1.
if [[ "${GEMMSERVE_SKIP_FUZZ:-0}" != 1 ]]; then
  fuzz_seconds=${GEMMSERVE_FUZZ_SECONDS:-$([[ "$GEMMSERVE_LONG" == 1 ]] && echo 300 || echo 15)}
  stage fuzz tests/fuzz.sh "$fuzz_seconds"
else
  skipped fuzz GEMMSERVE_SKIP_FUZZ
fi

# The container (tests/container.sh, docs/deployment.md): the image from the
# Release stage's binaries (from source when the Dockerfile, deploy/ or the
# dependency list changed, or with GEMMSERVE_LONG=1) in a real Docker engine,
# checked serving under the Kubernetes manifest's restrictions, its
# HEALTHCHECK, docker stop, a mounted repository, and docker-compose with
# Prometheus. Skipped with a message where no engine can start.
# In this shell, not as a stage's job: only this shell can wait for the image's.
container_checks() {
  local start rc=0 image
  echo "==> gate: container-checks"
  start=$(date +%s%N)
  touch "$GATE_DIR/container.go"
  wait "$container_pid" || rc=$?
  container_pid=""
  cat "$GATE_DIR/container.log"
  if [[ $rc -eq 77 ]]; then  # could not run, outside CI: a skip, with its reason
    printf 'container\t0\tskipped (%s)\n' \
      "$(sed -n 's/^container: skipped: //p' "$GATE_DIR/container.log" | head -1)" \
      >>"$GATE_DIR/stages.tsv"
    return 0
  fi
  image=$(sed -n 's/^container: image ready after \([0-9]*\) s.*/\1/p' "$GATE_DIR/container.log")
  printf 'container-image\t%s\tbackground, beside the sanitizer stages\n' "${image:-0}" \
    >>"$GATE_DIR/stages.tsv"
  record container-checks "$start" "$rc"
  return "$rc"
}
if [[ -n "$container_pid" ]]; then
  container_checks
else
  skipped container GEMMSERVE_SKIP_CONTAINER
fi
