#!/usr/bin/env python3
"""GroupedMatMul (mixture of experts) on a gemmserve server, checked against numpy.

    client/python/examples/grouped_matmul.py --url 127.0.0.1:8001 [--stubs build/python]

Routes 6 tokens through 2 of 4 experts each, in FP32 with a bias and in BF16
(uint16 bit patterns named in `datatypes`); exits 0 when both match numpy, 1
otherwise.
"""
import argparse
import os
import sys

import numpy as np


def reference(x, w, idx, bias=None):
    """output[m, s] = x[m] @ w[idx[m, s]] (+ bias[idx[m, s]]), in float64."""
    out = np.einsum("mk,mskn->msn", x.astype(np.float64), w.astype(np.float64)[idx])
    return out if bias is None else out + bias.astype(np.float64)[idx]


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
    from gemmserve_client import GemmServeClient, bf16_bits_to_float32, float32_to_bf16_bits

    rng = np.random.default_rng(2)
    m, k, n, groups, top = 6, 16, 8, 4, 2
    # Each token's `top` experts, as a router would pick them.
    idx = np.argsort(rng.standard_normal((m, groups)), axis=1)[:, :top].astype(np.int64)
    ok = True
    with GemmServeClient(args.url) as client:
        client.wait_ready(timeout=args.timeout)

        x = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((groups, k, n)).astype(np.float32)
        bias = rng.standard_normal((groups, n)).astype(np.float32)
        out = client.infer("grouped_matmul", input=x, weights=w, group_indices=idx, bias=bias,
                           timeout=args.timeout)["output"]
        expected = reference(x, w, idx, bias)
        good = out.shape == expected.shape and np.allclose(out, expected, rtol=1e-5, atol=1e-5)
        ok &= good
        print(f"grouped_matmul FP32 input [{m}, {k}], weights [{groups}, {k}, {n}], "
              f"group_indices [{m}, {top}] -> {list(out.shape)}: {'OK' if good else 'MISMATCH'}")

        x16 = float32_to_bf16_bits(x)
        w16 = float32_to_bf16_bits(w)
        out16 = client.infer("grouped_matmul", input=x16, weights=w16, group_indices=idx,
                             datatypes={"input": "BF16", "weights": "BF16"},
                             timeout=args.timeout)["output"]
        xf, wf = bf16_bits_to_float32(x16), bf16_bits_to_float32(w16)
        got = bf16_bits_to_float32(out16)
        # One rounding of the FP32 sum to bfloat16's 8 significant bits.
        bound = reference(np.abs(xf), np.abs(wf), idx) / 128
        good = (got.shape == (m, top, n)
                and bool(np.all(np.abs(got - reference(xf, wf, idx)) <= bound)))
        ok &= good
        print(f"grouped_matmul BF16 -> {list(got.shape)}: {'OK' if good else 'MISMATCH'}")
        print(got[0])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
