#!/usr/bin/env python3
"""Runs one MatMul and one GroupedMatMul on a gemmserve server and checks both
against numpy.

    client/python/example.py --url 127.0.0.1:8001 [--stubs build/python]

Exits 0 when both results match, 1 otherwise.
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
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gemmserve_client import GemmServeClient, bf16_bits_to_float32, float32_to_bf16_bits

    rng = np.random.default_rng(0)
    ok = True
    with GemmServeClient(args.url) as client:
        client.wait_ready(timeout=args.timeout)

        # MatMul, FP32, with batch broadcasting: [2,3,4] x [4,5] -> [2,3,5].
        a = rng.standard_normal((2, 3, 4)).astype(np.float32)
        b = rng.standard_normal((4, 5)).astype(np.float32)
        y = client.infer("matmul", [("A", a), ("B", b)], timeout=args.timeout)["Y"]
        expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
        good = y.shape == expected.shape and np.allclose(y, expected, rtol=1e-5, atol=1e-5)
        ok &= good
        print(f"matmul FP32 {list(a.shape)} x {list(b.shape)} -> {list(y.shape)}: "
              f"{'OK' if good else 'MISMATCH'}")
        print(y)

        # GroupedMatMul, BF16 values as uint16 bits, with bias: each of 4 tokens
        # goes through 2 of 3 groups.
        x = float32_to_bf16_bits(rng.standard_normal((4, 8)))
        w = float32_to_bf16_bits(rng.standard_normal((3, 8, 2)))
        bias = float32_to_bf16_bits(rng.standard_normal((3, 2)))
        idx = np.array([[0, 1], [2, 0], [1, 1], [2, 2]], dtype=np.int64)
        out = client.infer("grouped_matmul",
                           [("input", x, "BF16"), ("weights", w, "BF16"),
                            ("group_indices", idx), ("bias", bias, "BF16")],
                           timeout=args.timeout)["output"]
        xf, wf, bf = (bf16_bits_to_float32(t).astype(np.float64) for t in (x, w, bias))
        expected = np.einsum("mk,mskn->msn", xf, wf[idx]) + bf[idx]
        got = bf16_bits_to_float32(out)
        # bfloat16 keeps 8 significant bits: allow two roundings of the terms' magnitude.
        scale = np.einsum("mk,mskn->msn", np.abs(xf), np.abs(wf)[idx]) + np.abs(bf)[idx]
        good = got.shape == expected.shape and bool(np.all(np.abs(got - expected) <= scale / 128))
        ok &= good
        print(f"grouped_matmul BF16 input [4,8], weights [3,8,2], group_indices [4,2] "
              f"-> {list(got.shape)}: {'OK' if good else 'MISMATCH'}")
        print(got)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
