#!/bin/bash
# The cost of tracing 1 request in 1000 against tracing off, side by side on one
# server: five alternating 3-second closed-loop runs of each (gemmserve-cli perf,
# matmul 16x64 @ 64x64, concurrency 2), then the medians of throughput and p50.
#   scripts/trace_cost.sh [BUILD_DIR]      (default: build)
set -euo pipefail
BUILD=${1:-build}
OUT=$(mktemp -d /tmp/gemmserve-trace-cost-XXXXXX)
"$BUILD/bin/gemmserve" --grpc_port=0 --http_port=0 --metrics_port=-1 --compute_threads=1 \
  --trace_file="$OUT/trace.json" > "$OUT/server.out" 2> "$OUT/server.err" &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q "http on" "$OUT/server.out" 2>/dev/null && break; sleep 0.1; done
GRPC=$(grep -o "listening on [0-9.]*:[0-9]*" "$OUT/server.out" | grep -o "[0-9]*$")
HTTP=$(grep -o "http on [0-9.]*:[0-9]*" "$OUT/server.out" | grep -o "[0-9]*$")
for i in 1 2 3 4 5; do
  for mode in off on; do
    body='{"trace_level":["OFF"]}'
    [ "$mode" = on ] && body='{"trace_level":["TIMESTAMPS"],"trace_rate":"1000","log_frequency":"100"}'
    curl -sf -X POST -d "$body" "http://127.0.0.1:$HTTP/v2/trace/setting" > /dev/null
    "$BUILD/bin/gemmserve-cli" perf --url="127.0.0.1:$GRPC" --model=matmul --shape=A:16,64 \
      --shape=B:64,64 --concurrency=2 --duration=3 --warmup=0.5 --json_out="$OUT/$mode.$i.json" \
      > /dev/null
  done
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
runs = {m: [json.load(open(f"{out}/{m}.{i}.json")) for i in range(1, 6)] for m in ("off", "on")}
med = {m: (statistics.median(r["throughput"] for r in rs), statistics.median(r["p50_us"] for r in rs))
       for m, rs in runs.items()}
for m, (t, p) in med.items():
    print(f"tracing {m:3}: median {t:.0f} infer/s, p50 {p:.0f} us")
print(f"throughput on/off: {med['on'][0] / med['off'][0]:.3f}")
PY
