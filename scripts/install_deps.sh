#!/usr/bin/env bash
# Installs what gemmserve needs to build, test and run, from Debian bookworm's
# archive only. Shared by deploy/run.sh, tests/run.sh and the Dockerfile.
# Does nothing (and needs no network) when everything is already installed.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  libgrpc++-dev libgrpc-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libabsl-dev libblis-dev libonnx-dev prometheus-cpp-dev
  libboost-dev rapidjson-dev zlib1g-dev libssl-dev  # the HTTP front end
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-grpcio python3-numpy python3-onnx python3-protobuf
  python3-matplotlib  # scripts/performance_report.py's plot
)
# Only for the test suite (scripts/install_deps.sh --test): the real Prometheus
# server the metrics test scrapes with; not on machines that only run gemmserve.
if [[ "${1:-}" == "--test" ]]; then
  PACKAGES+=(prometheus python3-yaml nginx openssl curl)
  # tests/fuzz.sh: clang with libFuzzer and the sanitizer runtimes, clang's
  # OpenMP, and llvm-symbolizer for readable stacks.
  PACKAGES+=(clang libclang-rt-14-dev libomp-dev llvm)
  PACKAGES+=(libdnnl-dev)  # oneDNN: gemmserve-bench's baseline for resident GroupedMatMul
  PACKAGES+=(ccache)  # the gate's compiler cache (tests/build_env.sh)
  # tests/integration/test_tritonclient.py: NVIDIA's tritonclient (vendored in
  # tests/third_party/, unchanged) needs these for its HTTP, asyncio and gRPC clients.
  PACKAGES+=(python3-geventhttpclient python3-gevent python3-rapidjson python3-packaging
             python3-aiohttp)
fi

# The container stage (tests/container.sh): a Docker engine and client,
# Debian's docker-compose, and debootstrap for a base image without Docker Hub.
if [[ "${1:-}" == "--container" ]]; then
  PACKAGES=(docker.io docker-compose debootstrap)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install_deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
