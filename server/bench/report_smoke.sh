#!/bin/sh
# benchmark_report (CMakeLists.txt): a tiny gemmserve-bench run, with its limits
# at every checkpoint, turned into a report whose limits section names them.
#   report_smoke.sh BENCH_BINARY PERFORMANCE_REPORT_PY
set -eu
bench=$1 report=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bench" --threads=1 --benchmark_min_time=0.01 \
  '--benchmark_filter=^(Limit/.*|GroupedMatMul/(fused|resident)/fp32/mixtral-small/4)$' \
  --benchmark_out="$dir/run.json" --benchmark_out_format=json >/dev/null
/usr/bin/python3 "$report" "$dir/run.json" --markdown "$dir/p.md" --plot "$dir/p.png"
grep -q 'checkpoints); every case is judged against' "$dir/p.md"
