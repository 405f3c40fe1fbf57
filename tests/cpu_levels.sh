#!/usr/bin/env bash
# The Release suite again under each GEMMSERVE_MAX_CPU_ISA level below what
# this CPU reaches (server/ops/kernels/cpu_features.h), so that every
# expectation a test derives from the machine (kernel builds, BLIS
# configuration, BF16 layout) is seen to hold on a CPU with less: what "no
# test assumes a CPU" is checked by (docs/testing.md). GEMMSERVE_LONG=1
# tests/run.sh runs it after the Release stage. Leaves out the capped reruns
# (they set their own level), the soak, the benchmarks and the scripts' tests.
#
#   tests/cpu_levels.sh                 # build/, every level below the CPU's
#   BUILD_DIR=b tests/cpu_levels.sh -R numerics   # extra ctest arguments
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
levels=$(PYTHONPATH=tests/python_lib /usr/bin/python3 -c \
  'from gemmserve_testing.cpu import isa_levels_below; print(*isa_levels_below())')
if [[ -z "$levels" ]]; then
  echo "cpu_levels: this CPU reaches only the portable kernels; nothing lower to run"
  exit 0
fi
failed=()
for level in $levels; do
  echo "==> cpu_levels: GEMMSERVE_MAX_CPU_ISA=$level"
  GEMMSERVE_MAX_CPU_ISA=$level ctest --test-dir "$BUILD_DIR" -j"$(nproc)" --output-on-failure \
    --timeout 900 -LE '^(capped|soak|benchmark|script)$' "$@" || failed+=("$level")
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "cpu_levels: failed under GEMMSERVE_MAX_CPU_ISA=${failed[*]}" >&2
  exit 1
fi
echo "cpu_levels: passed under GEMMSERVE_MAX_CPU_ISA=$levels"
