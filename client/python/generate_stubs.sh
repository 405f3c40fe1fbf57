#!/bin/sh
# Generates the Python gRPC stubs of gemmserve's protocol (grpc_service_pb2.py,
# grpc_service_pb2_grpc.py, model_config_pb2.py) with Debian's protoc and
# grpc_python_plugin, the same way the CMake build does.
#
#   client/python/generate_stubs.sh            # into client/python/gemmserve_client/generated/
#   client/python/generate_stubs.sh OUT_DIR    # anywhere else
set -eu

here=$(cd "$(dirname "$0")" && pwd)
proto_dir=$(cd "$here/../../proto" && pwd)
out_dir=${1:-"$here/gemmserve_client/generated"}

protoc=$(command -v protoc) || { echo "protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }
plugin=$(command -v grpc_python_plugin) ||
  { echo "grpc_python_plugin not found (apt-get install protobuf-compiler-grpc)" >&2; exit 1; }

mkdir -p "$out_dir"
"$protoc" -I "$proto_dir" \
  --python_out="$out_dir" --grpc_out="$out_dir" --plugin=protoc-gen-grpc="$plugin" \
  grpc_service.proto model_config.proto
echo "stubs written to $out_dir"
