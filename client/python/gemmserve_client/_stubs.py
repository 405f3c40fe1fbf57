"""Finds and imports the generated protocol stubs.

protoc's Python output imports its siblings as top-level modules
(`import grpc_service_pb2`), so the folder holding the stubs must be on
sys.path. Looked for, in order: the folder named by GEMMSERVE_STUBS, whatever
is already importable (e.g. the build's `build/python` on PYTHONPATH), and
`gemmserve_client/generated/` as written by generate_stubs.sh.
"""
import importlib
import os
import sys

_GENERATED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "generated")


def _prepend(path):
    if path not in sys.path:
        sys.path.insert(0, path)


def load():
    """Returns the modules (grpc_service_pb2, grpc_service_pb2_grpc)."""
    explicit = os.environ.get("GEMMSERVE_STUBS")
    if explicit:
        if not os.path.isfile(os.path.join(explicit, "grpc_service_pb2.py")):
            raise ImportError(f"GEMMSERVE_STUBS={explicit} holds no grpc_service_pb2.py")
        _prepend(explicit)
    try:
        pb2 = importlib.import_module("grpc_service_pb2")
    except ImportError:
        if not os.path.isfile(os.path.join(_GENERATED, "grpc_service_pb2.py")):
            raise ImportError(
                "gemmserve protocol stubs not found: run client/python/generate_stubs.sh, "
                "or put a folder holding grpc_service_pb2.py on PYTHONPATH or in GEMMSERVE_STUBS"
            ) from None
        _prepend(_GENERATED)
        pb2 = importlib.import_module("grpc_service_pb2")
    pb2_grpc = importlib.import_module("grpc_service_pb2_grpc")
    return pb2, pb2_grpc
