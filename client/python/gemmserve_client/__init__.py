"""gemmserve_client: a small client for gemmserve (KServe v2 over gRPC).

    from gemmserve_client import GemmServeClient, bf16
    with GemmServeClient("127.0.0.1:8001") as client:
        y = client.infer("matmul", A=a, B=b)["Y"]
        y16 = client.infer("matmul", A=bf16(a_bits), B=bf16(b_bits))["Y"]  # uint16 bits
        for answer in client.stream_infer(("matmul", {"A": a, "B": b}, i) for i in range(4)):
            print(answer.id, answer.outputs["Y"])               # ModelStreamInfer

The protocol stubs are found as described in _stubs.py (GEMMSERVE_STUBS,
PYTHONPATH, or gemmserve_client/generated/ from generate_stubs.sh).
"""
import importlib

# Where each public name lives. They are imported on first use (PEP 562), so
# that `gemmserve_client.http`, which needs neither grpcio nor the stubs, can
# be imported where they are absent.
_MODULE_OF = {
    "DEFAULT_URL": "client", "GemmServeClient": "client", "StreamAnswer": "client",
    **{name: "tensors" for name in (
        "DTYPE_OF", "TYPED_FIELD_OF", "Tensor", "bf16", "bf16_bits_to_float32", "datatype_of",
        "decode_outputs", "float32_to_bf16_bits", "input_entries", "make_infer_request", "pb2",
        "pb2_grpc")},
}

__all__ = sorted(_MODULE_OF)


def __getattr__(name):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_MODULE_OF))
