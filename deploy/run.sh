#!/usr/bin/env bash
# Installs dependencies, builds Release and starts gemmserve in the foreground
# on the embedded default models: the built-in matmul and grouped_matmul, and
# an example model repository (build/model_repository: `moe`, a small
# mixture-of-experts expert layer, `moe_int4`, its experts in INT4 (and
# `moe_int4_a8`, those on 8-bit activations), `linear`, a
# MatMul layer, and `moe_layer`, a whole mixture-of-experts FFN layer, all with
# dynamic batching) that scripts/make_model_repository.py writes on first run.
# gRPC on 8001, metrics on 8002. Extra arguments go to the server, e.g.
#   deploy/run.sh --compute_threads=2
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)" --target gemmserve gemmserve-cli
if [[ ! -f build/model_repository/moe_int4_a8/1/model.onnx ||
      ! -f build/model_repository/moe_layer/1/model.onnx ]]; then
  /usr/bin/python3 scripts/make_model_repository.py build/model_repository
fi
exec build/bin/gemmserve --grpc_port=8001 --metrics_port=8002 \
  --model_repository=build/model_repository "$@"
