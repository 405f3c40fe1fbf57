#!/usr/bin/python3
"""Assembles NVIDIA's tritonclient, unchanged, as its wheel would install it.

Copies the vendored Python package (tritonclient/, from
triton-inference-server/client) into OUT and generates its gRPC modules from
Triton's own protos (protos/, from triton-inference-server/common) with
Debian's protoc and grpc_python_plugin, renamed and re-imported exactly as the
client's build_wheel.py does. Prints OUT, to put first on sys.path.

  /usr/bin/python3 tests/third_party/tritonclient/build_package.py /tmp/tc
"""
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def rewrite(path, pattern, replacement):
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(re.sub(pattern, replacement, text, flags=re.MULTILINE))


def build(out):
    package = os.path.join(out, "tritonclient")
    shutil.rmtree(package, ignore_errors=True)
    shutil.copytree(os.path.join(HERE, "tritonclient"), package)
    generated = os.path.join(out, "_generated")
    os.makedirs(generated, exist_ok=True)
    protos = os.path.join(HERE, "protos")
    subprocess.run(["protoc", f"-I{protos}", f"--python_out={generated}",
                    f"--grpc_python_out={generated}",
                    "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin",
                    "grpc_service.proto", "model_config.proto", "health.proto"],
                   check=True)
    grpc_dir = os.path.join(package, "grpc")
    # build_wheel.py's names and import fixes.
    for source, target in (("model_config_pb2.py", "model_config_pb2.py"),
                           ("grpc_service_pb2.py", "service_pb2.py"),
                           ("grpc_service_pb2_grpc.py", "service_pb2_grpc.py")):
        shutil.copy(os.path.join(generated, source), os.path.join(grpc_dir, target))
    for name in ("model_config_pb2.py", "service_pb2.py"):
        rewrite(os.path.join(grpc_dir, name), r"^import ([^ ]*)_pb2 as ([^ ]*)$",
                r"from tritonclient.grpc import \1_pb2 as \2")
    rewrite(os.path.join(grpc_dir, "service_pb2_grpc.py"),
            r"^import grpc_([^ ]*)_pb2 as ([^ ]*)$", r"from tritonclient.grpc import \1_pb2 as \2")
    return out


if __name__ == "__main__":
    print(build(sys.argv[1]))
