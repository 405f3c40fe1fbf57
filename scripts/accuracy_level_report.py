#!/usr/bin/python3
"""How far accuracy_level 4 (8-bit activations, integer dot products; issue 42) moves a quantized
model's answer from the exact path (DequantizeLinear, then the op): docs/quantized-models.md's
"accuracy-level" section.

  scripts/accuracy_level_report.py            # writes the section
  scripts/accuracy_level_report.py --json r.json

The weights are the example repository's `moe` experts (scripts/make_model_repository.py: 16
experts [512, 256]), quantized by scripts/quantize_model.py to INT8, UINT8, INT4 and UINT4, per
output column and in blocks of 32 and 128 rows of K. The activations: normal random rows, and the
same rows with outliers (1% of the values 100 times the rest, as LLM activations have). Both paths
are evaluated in float64 from the same integers (quantize_model.int8_activation_matmul is
accuracy_level 4's arithmetic, which the server matches: tests/integration/
test_int8_activations.py); the figures are, per case, max|a - b| / max|b| and the RMS of a - b over
the RMS of b, a being accuracy_level 4's answer and b the exact one.
"""
import argparse
import importlib.util
import json
import os
import sys
import tempfile

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import doc_sections  # noqa: E402
import quantize_model as qm  # noqa: E402
from onnx import TensorProto, numpy_helper  # noqa: E402

SECTION = "accuracy-level"
KINDS = (("INT8", 8, True), ("UINT8", 8, False), ("INT4", 4, True), ("UINT4", 4, False))
BLOCKS = (0, 32, 128)


def example_experts():
    """The example repository's moe experts [16, 512, 256], as float64."""
    spec = importlib.util.spec_from_file_location(
        "make_model_repository", os.path.join(HERE, "make_model_repository.py"))
    repo_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(repo_module)
    with tempfile.TemporaryDirectory() as repo:
        repo_module.grouped_model(repo, "moe", 512, 256, 16, 2, "fp32", True, None, seed=1)
        model = onnx.load(os.path.join(repo, "moe", "1", "model.onnx"))
    experts = next(t for t in model.graph.initializer if t.name == "experts")
    return numpy_helper.to_array(experts).astype(np.float64)


def activations(rng, m, k):
    """Normal rows, and the same rows with 1% of their values 100 times larger."""
    normal = rng.standard_normal((m, k)).astype(np.float32)
    outliers = normal.copy()
    picks = rng.random((m, k)) < 0.01
    outliers[picks] *= 100
    return {"normal": normal, "outliers": outliers}


def errors(approx, exact):
    diff = approx - exact
    return (float(np.abs(diff).max() / np.abs(exact).max()),
            float(np.sqrt(np.mean(diff ** 2)) / np.sqrt(np.mean(exact ** 2))))


def measure(w, rng, m=64):
    """Per (type, block, activations): the two figures over every expert."""
    xs = activations(rng, m, w.shape[1])
    rows = []
    for kind, bits, symmetric in KINDS:
        for block in BLOCKS:
            q, scale, zero, dequantized, _, _ = qm.quantize(w, TensorProto.FLOAT, bits, symmetric,
                                                            block)
            for name, x in xs.items():
                approx = np.stack([qm.int8_activation_matmul(
                    x, q[e], scale[e] if block else scale,
                    None if zero is None else (zero[e] if block else zero), block)
                    for e in range(w.shape[0])])
                exact = np.stack([x.astype(np.float64) @ dequantized[e]
                                  for e in range(w.shape[0])])
                max_rel, rms_rel = errors(approx, exact)
                rows.append({"type": kind, "block": block, "activations": name,
                             "max_rel": max_rel, "rms_rel": rms_rel})
    return rows


def render(results):
    begin, _ = doc_sections.markers(SECTION)
    lines = [begin, "### How much accuracy_level 4 changes the answer", "",
             "Written by `scripts/accuracy_level_report.py`: the example repository's `moe` "
             "experts quantized each way, 64 rows of activations, both paths in float64 from the "
             "same integers. `max` is max|a - b| / max|b|, `rms` the RMS of a - b over the RMS of "
             "b (a: accuracy_level 4, b: exact). Outliers: 1% of the activations 100 times the "
             "rest.", "",
             "| weights | block | normal: max | normal: rms | outliers: max | outliers: rms |",
             "|---|---|---|---|---|---|"]
    by = {(r["type"], r["block"], r["activations"]): r for r in results["rows"]}
    for kind, _, _ in KINDS:
        for block in BLOCKS:
            n, o = by[(kind, block, "normal")], by[(kind, block, "outliers")]
            lines.append(f"| {kind} | {'per column' if block == 0 else block} | "
                         f"{n['max_rel']:.2e} | {n['rms_rel']:.2e} | {o['max_rel']:.2e} | "
                         f"{o['rms_rel']:.2e} |")
    lines += ["", "Reproduce: `scripts/accuracy_level_report.py`.", ""]
    return doc_sections.finish(lines, SECTION, results.get("note", ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--doc", default=os.path.join(ROOT, "docs", "quantized-models.md"))
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    results = {"rows": measure(example_experts(), np.random.default_rng(42)), "note": args.note}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    doc_sections.write_section(args.doc, SECTION, render(results))
    for r in results["rows"]:
        print(f"{r['type']:5} block {r['block']:3} {r['activations']:8}: max {r['max_rel']:.2e} "
              f"rms {r['rms_rel']:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
