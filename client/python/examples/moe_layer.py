#!/usr/bin/env python3
"""A whole mixture-of-experts layer on a gemmserve server (docs/moe_layer.md).

    client/python/examples/moe_layer.py --url 127.0.0.1:8001 [--model moe_layer]

Reads the layer's form from its ModelConfig parameters and its K from its metadata, sends the
hidden states of 4 tokens (and, where the caller routes, their experts and weights), and checks
the answer: out [4, K], finite, and each token's row the same when it is sent alone (a layer
computes tokens independently). `deploy/run.sh` serves the example repository's `moe_layer`.
Exits 0 when every check is OK, 1 otherwise.
"""
import argparse
import os
import sys

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="127.0.0.1:8001", help="server host:port")
    parser.add_argument("--model", default="moe_layer")
    parser.add_argument("--stubs", help="folder holding grpc_service_pb2.py "
                        "(default: PYTHONPATH, then gemmserve_client/generated/)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per call")
    args = parser.parse_args()
    if args.stubs:
        os.environ["GEMMSERVE_STUBS"] = os.path.abspath(args.stubs)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from gemmserve_client import GemmServeClient

    rng = np.random.default_rng(3)
    ok = True
    with GemmServeClient(args.url) as client:
        client.wait_ready(timeout=args.timeout)
        config = client.model_config(args.model)
        form = {k: v.string_value for k, v in config.parameters.items()}
        if form.get("layer") != "moe_ffn":
            print(f"{args.model} is not a mixture-of-experts layer: MISMATCH")
            return 1
        print(f"{args.model}: {form['gate_up']} gate/up, {form['activation']}, routing "
              f"{form['routing']}, G {form['groups']}, K {form['k']}, I {form['i']}, "
              f"S {form['s']}")
        k, groups, s = int(form["k"]), int(form["groups"]), int(form["s"])

        def run(x, ids=None, w=None):
            inputs = {"x": x}
            if form["routing"] == "given":
                inputs.update(ids=ids, w=w)
            return client.infer(args.model, timeout=args.timeout, **inputs)["out"]

        m = 4
        x = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        ids = np.stack([rng.permutation(groups)[:s] for _ in range(m)]).astype(np.int64)
        w = rng.uniform(0, 1, (m, s)).astype(np.float32)
        out = run(x, ids, w)
        good = out.shape == (m, k) and bool(np.all(np.isfinite(out)))
        ok &= good
        print(f"{args.model} x [{m}, {k}] -> {list(out.shape)}: {'OK' if good else 'MISMATCH'}")
        alone = run(x[:2], ids[:2], w[:2])
        scale = max(float(np.max(np.abs(out[:2]))), 1e-30)
        good = alone.shape == (2, k) and float(np.max(np.abs(alone - out[:2]))) <= 1e-4 * scale
        ok &= good
        print(f"tokens sent alone get the same rows: {'OK' if good else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
