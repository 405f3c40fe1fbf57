"""gemmserve_client: a small client for gemmserve (KServe v2 over gRPC).

    from gemmserve_client import GemmServeClient, bf16
    with GemmServeClient("127.0.0.1:8001") as client:
        y = client.infer("matmul", A=a, B=b)["Y"]
        y16 = client.infer("matmul", A=bf16(a_bits), B=bf16(b_bits))["Y"]  # uint16 bits

The protocol stubs are found as described in _stubs.py (GEMMSERVE_STUBS,
PYTHONPATH, or gemmserve_client/generated/ from generate_stubs.sh).
"""
from .client import DEFAULT_URL, GemmServeClient
from .tensors import (DTYPE_OF, TYPED_FIELD_OF, Tensor, bf16, bf16_bits_to_float32, datatype_of,
                      decode_outputs, float32_to_bf16_bits, input_entries, make_infer_request,
                      pb2, pb2_grpc)

__all__ = [
    "DEFAULT_URL", "DTYPE_OF", "GemmServeClient", "TYPED_FIELD_OF", "Tensor", "bf16",
    "bf16_bits_to_float32", "datatype_of", "decode_outputs", "float32_to_bf16_bits",
    "input_entries", "make_infer_request", "pb2", "pb2_grpc",
]
