#!/usr/bin/env bash
# Installs dependencies, builds Release and starts gemmserve in the foreground
# on the built-in models: gRPC on 8001, metrics on 8002. Extra arguments go to
# the server, e.g. deploy/run.sh --compute_threads=2
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)" --target gemmserve gemmserve-cli
exec build/bin/gemmserve --grpc_port=8001 --metrics_port=8002 "$@"
