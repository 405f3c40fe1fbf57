#!/usr/bin/env bash
# Fuzzing (fuzz/README.md): builds the libFuzzer targets with clang, ASan and
# UBSan in the sanitizer tree (tests/asan_tree.sh), replays every saved
# regression input, then fuzzes each target for SECONDS (default 30) from a
# copy of its seed corpus, so the repository is never written; as many
# targets at once as the machine has cores (each libFuzzer run is one
# process on one core). Exits non-zero on any crash, sanitizer report or
# failed check, and prints the reproducer's path.
#
#   tests/fuzz.sh            # 30 s per target
#   tests/fuzz.sh 600        # longer
#   ASAN_BUILD_DIR=/tmp/ba tests/fuzz.sh 10
#
# Reproduce a crash:  build-asan/bin/<target> <reproducer>
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=${1:-30}
if ! [[ "$SECONDS_PER_TARGET" =~ ^[0-9]+$ ]]; then
  echo "usage: tests/fuzz.sh [SECONDS]" >&2
  exit 2
fi
# The sanitizer tree (tests/asan_tree.sh), shared with tests/asan.sh.
BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
TARGETS=(fuzz_infer_request fuzz_shapes fuzz_grouped_indices fuzz_resident_model fuzz_model_loader
         fuzz_http_infer_json fuzz_http_connection)

scripts/install_deps.sh --test
# Every library is instrumented (coverage for libFuzzer, ASan, UBSan made
# fatal so that libFuzzer sees it); only the fuzzers link libFuzzer itself.
ASAN_BUILD_DIR="$BUILD_DIR" tests/asan_tree.sh "${TARGETS[@]}"

BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
WORK="$BUILD_DIR/fuzz-work"
rm -rf "$WORK"
mkdir -p "$WORK"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
if [ -x /usr/lib/llvm-14/bin/llvm-symbolizer ] && [ -z "${ASAN_SYMBOLIZER_PATH:-}" ]; then
  export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
fi

failed=0
report_failure() {  # target, log, what
  failed=$((failed + 1))
  echo "fuzz: $1 FAILED ($3); log: $2" >&2
  grep -E "^(==[0-9]+==ERROR|SUMMARY|.*FUZZ_CHECK|.*runtime error)" "$2" | head -5 >&2 || true
  local unit
  unit=$(grep -oE "Test unit written to [^ ]+" "$2" | tail -1 | cut -d' ' -f5 || true)
  # Replaying files writes no new unit: the input is the last one started.
  [ -n "$unit" ] || unit=$(grep -oE "^Running: .+" "$2" | tail -1 | cut -d' ' -f2- || true)
  if [ -n "$unit" ]; then
    echo "fuzz: reproducer: $unit   (run: $BUILD_DIR/bin/$1 $unit)" >&2
  fi
}

# Saved crash inputs first: each must now pass (run once each, no fuzzing).
fuzzable=()
for target in "${TARGETS[@]}"; do
  bin="$BUILD_DIR/bin/$target"
  mkdir -p "$WORK/$target/artifacts" "$WORK/$target/corpus"
  regressions=()
  if [ -d "fuzz/regressions/$target" ]; then
    while IFS= read -r -d '' f; do regressions+=("$f"); done \
      < <(find "fuzz/regressions/$target" -type f ! -name '*.md' -print0 | sort -z)
  fi
  if [ ${#regressions[@]} -gt 0 ]; then
    log="$WORK/$target/regressions.log"
    if "$bin" -rss_limit_mb=2048 -timeout=10 -artifact_prefix="$WORK/$target/artifacts/" \
        "${regressions[@]}" >"$log" 2>&1; then
      echo "fuzz: $target: ${#regressions[@]} regression inputs pass"
    else
      report_failure "$target" "$log" "a regression input in fuzz/regressions/$target"
      continue
    fi
  fi
  fuzzable+=("$target")
done

# fuzz_one TARGET: one libFuzzer run; its exit code in WORK/TARGET/status.
fuzz_one() {
  local target=$1 rc=0
  cp -R "fuzz/corpus/$target/." "$WORK/$target/corpus/"
  "$BUILD_DIR/bin/$target" -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$WORK/$target/artifacts/" -print_final_stats=1 "$WORK/$target/corpus" \
    >"$WORK/$target/fuzz.log" 2>&1 || rc=$?
  echo "$rc" >"$WORK/$target/status"
}
jobs_at_once=$(nproc)
echo "fuzz: ${#fuzzable[@]} targets for ${SECONDS_PER_TARGET}s each, $jobs_at_once at once ..."
running=0
for target in "${fuzzable[@]}"; do
  if [ "$running" -ge "$jobs_at_once" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$target" &
  running=$((running + 1))
done
wait

passed=0
for target in "${fuzzable[@]}"; do
  log="$WORK/$target/fuzz.log"
  if [ "$(cat "$WORK/$target/status" 2>/dev/null)" == 0 ]; then
    passed=$((passed + 1))
    stats=$(grep -E "^#[0-9]+[[:space:]]+DONE" "$log" | tail -1 | sed -E 's/^#([0-9]+)[[:space:]]+DONE[[:space:]]+/\1 runs, /')
    echo "fuzz: $target ok: ${stats:-done}"
  else
    report_failure "$target" "$log" "crash or failed check"
  fi
done

echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
