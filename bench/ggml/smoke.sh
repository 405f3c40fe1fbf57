#!/usr/bin/env bash
# ctest ggml_baseline_smoke: installs llama.cpp's libraries (install.sh, into
# the build directory), then runs gemmserve-bench's ggml cases on a small
# case (each checks its output against ggml's own weights in float64 first).
# Fails when a case errs, when no ggml case ran, or when the run does not name
# the CPU backend it loaded.
#
#   bench/ggml/smoke.sh build/bin/gemmserve-bench build/ggml
set -euo pipefail
bench=${1:?usage: smoke.sh GEMMSERVE_BENCH NPM_DIR}
dir=$("$(dirname "$0")/install.sh" "${2:?usage: smoke.sh GEMMSERVE_BENCH NPM_DIR}")
out=$("$bench" --ggml_dir="$dir" --threads=1 --benchmark_min_time=0.01 \
  '--benchmark_filter=^GroupedMatMul/ggml[a-z0-9_]*/(fp32|bf16)/mixtral-small/4$' 2>&1) || {
  echo "$out"; echo "ggml smoke: gemmserve-bench failed" >&2; exit 1; }
echo "$out"
for c in ggml/fp32 ggml/bf16 ggml_q8_0/fp32 ggml_q4_0/fp32; do
  if ! grep -q "^GroupedMatMul/$c/mixtral-small/4 " <<<"$out"; then
    echo "ggml smoke: GroupedMatMul/$c/mixtral-small/4 did not run" >&2
    exit 1
  fi
done
grep -q "^ggml: ggml 0.25.1 .*CPU backend libggml-cpu-" <<<"$out" || {
  echo "ggml smoke: the run does not name ggml's version and CPU backend" >&2; exit 1; }
