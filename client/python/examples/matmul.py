#!/usr/bin/env python3
"""MatMul on a gemmserve server with keyword arrays, checked against numpy.

    client/python/examples/matmul.py --url 127.0.0.1:8001 [--stubs build/python]

Sends an FP32 product with a broadcast batch dimension and a BF16 one (uint16
bit patterns marked with bf16()); exits 0 when both match numpy, 1 otherwise.
"""
import argparse
import os
import sys

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="127.0.0.1:8001", help="server host:port")
    parser.add_argument("--stubs", help="folder holding grpc_service_pb2.py "
                        "(default: PYTHONPATH, then gemmserve_client/generated/)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per call")
    args = parser.parse_args()
    if args.stubs:
        os.environ["GEMMSERVE_STUBS"] = os.path.abspath(args.stubs)
    # The package sits one folder up, in client/python.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from gemmserve_client import (GemmServeClient, bf16, bf16_bits_to_float32,
                                  float32_to_bf16_bits)

    rng = np.random.default_rng(1)
    ok = True
    with GemmServeClient(args.url) as client:
        client.wait_ready(timeout=args.timeout)

        # FP32 with numpy's broadcasting: [2,3,4] x [4,5] -> [2,3,5].
        a = rng.standard_normal((2, 3, 4)).astype(np.float32)
        b = rng.standard_normal((4, 5)).astype(np.float32)
        y = client.infer("matmul", A=a, B=b, timeout=args.timeout)["Y"]
        expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
        good = y.shape == expected.shape and np.allclose(y, expected, rtol=1e-5, atol=1e-5)
        ok &= good
        print(f"matmul FP32 {list(a.shape)} x {list(b.shape)} -> {list(y.shape)}: "
              f"{'OK' if good else 'MISMATCH'}")

        # BF16: numpy has no bfloat16, so the values travel as uint16 bit patterns.
        a16 = float32_to_bf16_bits(rng.standard_normal((3, 8)))
        b16 = float32_to_bf16_bits(rng.standard_normal((8, 2)))
        y16 = client.infer("matmul", A=bf16(a16), B=bf16(b16), timeout=args.timeout)["Y"]
        af, bf = (bf16_bits_to_float32(t).astype(np.float64) for t in (a16, b16))
        got = bf16_bits_to_float32(y16)
        # One rounding of the FP32 sum to bfloat16's 8 significant bits.
        bound = (np.abs(af) @ np.abs(bf)) / 128
        good = got.shape == (3, 2) and bool(np.all(np.abs(got - af @ bf) <= bound))
        ok &= good
        print(f"matmul BF16 [3, 8] x [8, 2] -> {list(got.shape)}: {'OK' if good else 'MISMATCH'}")
        print(got)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
