#!/bin/sh
# benchmark_report (CMakeLists.txt): a tiny gemmserve-bench run of two cases
# with the limits measured around their group (the checkpoints before and
# after it; not all of the run's), turned into a report whose limits section
# names them.
#   report_smoke.sh BENCH_BINARY PERFORMANCE_REPORT_PY
set -eu
bench=$1 report=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cases='GroupedMatMul/(fused|resident)/fp32/mixtral-small/4'
# The checkpoint a case's group starts from is the last one listed before it;
# the group ends at the next.
before=$("$bench" --threads=1 --benchmark_list_tests | awk -v cases="^$cases\$" '
  /^Limit\/read_bandwidth/ { n = split($0, part, ":"); checkpoint = (n > 1 ? part[n] : 0) }
  $0 ~ cases { print checkpoint; exit }')
[ -n "$before" ] || { echo "report_smoke: no case matches $cases" >&2; exit 1; }
limits() {  # the limits' names at checkpoint $1 (checkpoint 0's are plain)
  if [ "$1" -eq 0 ]; then echo 'Limit/[a-z_]+(/2048)?'; else echo "Limit/[a-z_]+(/2048)?/checkpoint:$1"; fi
}
"$bench" --threads=1 --benchmark_min_time=0.01 \
  "--benchmark_filter=^($(limits "$before")|$(limits $((before + 1)))|$cases)\$" \
  --benchmark_out="$dir/run.json" --benchmark_out_format=json >/dev/null
/usr/bin/python3 "$report" "$dir/run.json" --markdown "$dir/p.md" --plot "$dir/p.png"
# Both checkpoints were found, and the cases' ratio (resident over fused) made.
grep -q '(2 checkpoints); every case is judged against' "$dir/p.md"
grep -Eq '^\| mixtral-small \| FP32 \|.*[0-9]\.[0-9]+×' "$dir/p.md"
