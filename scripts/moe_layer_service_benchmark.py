#!/usr/bin/python3
"""One mixture-of-experts layer call against the same layer composed by a client, end to end
through gRPC (issue 41): docs/performance.md's "moe-layer-service" section and its plot.

  scripts/moe_layer_service_benchmark.py [--build build] [--rounds 5]
  scripts/moe_layer_service_benchmark.py --from_json run.json   # re-render a run

For each case a server on loopback serves the layer (routing given, gate/up fused, SiLU) and,
with the same weights, two resident GroupedMatMul models: gate/up [G, K, 2I] and down
[G, I, K]. The composed client sends x and ids to gate/up, computes SiLU(g) * u itself, sends
that with the ids to down, and sums the S rows weighted itself. One client, closed loop; the
two ways take turns in rounds of calls with fresh inputs, and the figures are medians over all
calls (latency) or over the rounds (throughput).
- small (K 512, I 256, G 16, S 2, FP32, M = 1): round trips dominate; wanted: the layer's p50
  at most 0.6 of the composed p50;
- olmoe (K 2048, I 1024, G 64, S 8, BF16, M = 64): wanted: the layer's tokens/s at least the
  composed one's.
Also the tensor bytes each way sends and receives per token.
"""
import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(ROOT, "tests", "python_lib"), os.path.join(ROOT, "client",
                                                                              "python")]
import doc_sections  # noqa: E402

SECTION = "moe-layer-service"
CASES = {"small": dict(k=512, i=256, g=16, s=2, dtype="fp32", m=1, calls=200),
         "olmoe": dict(k=2048, i=1024, g=64, s=8, dtype="bf16", m=64, calls=6)}
P50_TARGET, THROUGHPUT_TARGET = 0.6, 1.0
ES = {"fp32": 4, "bf16": 2}


def _make_moe_layer():
    spec = importlib.util.spec_from_file_location("make_moe_layer",
                                                  os.path.join(HERE, "make_moe_layer.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_models(repo, c):
    """layer, gate_up and down of one case, the two GroupedMatMuls on the layer's weights."""
    import onnx
    from onnx import helper
    moe = _make_moe_layer()
    graph = moe.layer_graph(c["k"], c["i"], c["g"], c["s"], c["dtype"], routing="given", seed=7)
    inits = {t.name: t for t in graph.initializer}
    t = inits["W_gu"].data_type
    models = {"layer": moe.layer_model(graph)}
    for name, weights, width, n in (("gate_up", "W_gu", c["k"], 2 * c["i"]),
                                    ("down", "W_d", c["i"], c["k"])):
        node = helper.make_node("GroupedMatMul", ["tokens", weights, "routing"], ["expert_out"])
        s = c["s"] if name == "gate_up" else 1
        g = helper.make_graph([node], name,
                              [helper.make_tensor_value_info("tokens", t, ["M", width]),
                               helper.make_tensor_value_info("routing", 7, ["M", s])],
                              [helper.make_tensor_value_info("expert_out", t, ["M", s, n])],
                              initializer=[inits[weights]])
        models[name] = moe.layer_model(g)
    for name, model in models.items():
        os.makedirs(os.path.join(repo, name, "1"))
        onnx.save_model(model, os.path.join(repo, name, "1", "model.onnx"),
                        save_as_external_data=True, all_tensors_to_one_file=True,
                        location="weights.bin", size_threshold=1024)


def start_server(build, repo, threads):
    proc = subprocess.Popen([os.path.join(build, "bin", "gemmserve"), "--grpc_port=0",
                             "--metrics_port=-1", "--http_port=-1", "--host=127.0.0.1",
                             f"--compute_threads={threads}", f"--model_repository={repo}"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    match = re.match(r"gemmserve listening on \S+:(\d+)", proc.stdout.readline())
    if not match:
        proc.kill()
        raise RuntimeError("gemmserve did not start")
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, f"127.0.0.1:{match.group(1)}"


class Ways:
    """The two ways of computing one case's layer from one client."""

    def __init__(self, client, c):
        import numpy as np
        from gemmserve_client import bf16_bits_to_float32, float32_to_bf16_bits
        self.np, self.client, self.c = np, client, c
        self.dt = "BF16" if c["dtype"] == "bf16" else "FP32"
        self.to_float = bf16_bits_to_float32 if c["dtype"] == "bf16" else (lambda a: a)
        self.to_wire = float32_to_bf16_bits if c["dtype"] == "bf16" else (lambda a: a)

    def inputs(self, rng):
        np, c = self.np, self.c
        x = self.to_wire(rng.uniform(-1, 1, (c["m"], c["k"])).astype(np.float32))
        ids = np.stack([rng.permutation(c["g"])[:c["s"]] for _ in range(c["m"])]).astype(np.int64)
        w = self.to_wire(rng.uniform(0, 1, (c["m"], c["s"])).astype(np.float32))
        return x, ids, w

    def layer(self, x, ids, w):
        return self.client.infer("layer", x=x, ids=ids, w=w,
                                 datatypes={"x": self.dt, "w": self.dt})["out"]

    def composed(self, x, ids, w):
        np, c = self.np, self.c
        gu = self.to_float(self.client.infer("gate_up", tokens=x, routing=ids,
                                             datatypes={"tokens": self.dt})["expert_out"])
        g, u = gu[..., :c["i"]], gu[..., c["i"]:]
        a = self.to_wire((g / (1 + np.exp(-g)) * u).astype(np.float32))
        y = self.to_float(self.client.infer("down", tokens=a.reshape(-1, c["i"]),
                                            routing=ids.reshape(-1, 1),
                                            datatypes={"tokens": self.dt})["expert_out"])
        out = (self.to_float(w)[..., None] * y.reshape(c["m"], c["s"], c["k"])).sum(axis=1)
        return self.to_wire(out.astype(np.float32))


def payload_bytes(c):
    """Tensor bytes per token each way sends and receives (the requests' raw contents)."""
    es, k, i, s = ES[c["dtype"]], c["k"], c["i"], c["s"]
    return {"layer": {"sent": k * es + s * (8 + es), "received": k * es},
            "composed": {"sent": k * es + s * 8 + s * i * es + s * 8,
                         "received": s * 2 * i * es + s * k * es}}


def measure_case(name, c, args):
    import numpy as np
    from gemmserve_client import GemmServeClient
    tmp = tempfile.mkdtemp(prefix="gemmserve-layer-service-")
    try:
        write_models(tmp, c)
        proc, address = start_server(args.build, tmp, args.threads)
        try:
            with GemmServeClient(address) as client:
                client.wait_ready(timeout=60)
                ways = Ways(client, c)
                rng = np.random.default_rng(1)
                check = ways.inputs(rng)
                a, b = ways.to_float(ways.layer(*check)), ways.to_float(ways.composed(*check))
                error = float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))
                for _ in range(3):  # warm-up
                    ways.layer(*check), ways.composed(*check)
                latency = {"layer": [], "composed": []}
                rounds = {"layer": [], "composed": []}
                for r in range(args.rounds):
                    for way in (("layer", "composed") if r % 2 == 0 else ("composed", "layer")):
                        fn = getattr(ways, way)
                        start = time.perf_counter()
                        for _ in range(c["calls"]):
                            x = ways.inputs(rng)
                            t0 = time.perf_counter()
                            fn(*x)
                            latency[way].append(time.perf_counter() - t0)
                        rounds[way].append(c["m"] * c["calls"] / (time.perf_counter() - start))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    p50 = {w: statistics.median(v) * 1e3 for w, v in latency.items()}
    tps = {w: statistics.median(v) for w, v in rounds.items()}
    return {"case": name, **c, "p50_ms": p50, "tokens_per_s": tps,
            "p50_ratio": p50["layer"] / p50["composed"],
            "throughput_ratio": tps["layer"] / tps["composed"],
            "bytes_per_token": payload_bytes(c), "max_relative_difference": error}


def render(results):
    begin, _ = doc_sections.markers(SECTION)
    lines = [begin, "## Mixture-of-experts layers end to end (issue 41)", "",
             "Written by `scripts/moe_layer_service_benchmark.py`: one layer call against the "
             "same layer composed by a client from two GroupedMatMul calls (gate/up, then down) "
             "with SiLU(g)·u and the weighted sum over the S slots computed in the client "
             "(numpy), through gRPC on loopback, one client in a closed loop, the two ways taking "
             "turns in rounds with fresh inputs per call.", "",
             f"Setup: {results.get('cpu', '?')}, {results.get('threads', '?')} compute threads, "
             f"{results.get('rounds', '?')} rounds, {results.get('date', '')}.", "",
             "| case | M | layer p50 ms | composed p50 ms | p50 layer / composed | layer tokens/s "
             "| composed tokens/s | throughput layer / composed |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results["cases"]:
        lines.append(f"| {r['case']} (K {r['k']}, I {r['i']}, G {r['g']}, S {r['s']}, "
                     f"{r['dtype'].upper()}) | {r['m']} | {r['p50_ms']['layer']:.3f} | "
                     f"{r['p50_ms']['composed']:.3f} | {r['p50_ratio']:.2f} | "
                     f"{r['tokens_per_s']['layer']:.0f} | {r['tokens_per_s']['composed']:.0f} | "
                     f"{r['throughput_ratio']:.2f} |")
    lines += ["", "Tensor bytes per token (raw contents; the messages add a few dozen bytes):", "",
              "| case | layer sends | layer receives | composed sends | composed receives |",
              "|---|---|---|---|---|"]
    for r in results["cases"]:
        b = r["bytes_per_token"]
        lines.append(f"| {r['case']} | {b['layer']['sent']} | {b['layer']['received']} | "
                     f"{b['composed']['sent']} | {b['composed']['received']} |")
    lines += ["", "Against the issue's targets:", "", "| target | measured | wanted | met |",
              "|---|---|---|---|"]
    for what, got, want, met in targets(results):
        lines.append(f"| {what} | {got:.2f} | {want} | {'yes' if met else '**no**'} |")
    lines += ["", "![layer call against the composed layer](moe-layer-service.png)", "",
              "Reproduce: `scripts/moe_layer_service_benchmark.py` (`--json run.json` keeps the "
              "run).", ""]
    return doc_sections.finish(lines, SECTION, results.get("note", ""))


def targets(results):
    out = []
    for r in results["cases"]:
        if r["case"] == "small":
            out.append(("small, M = 1: layer p50 / composed p50", r["p50_ratio"],
                        f"<= {P50_TARGET}", r["p50_ratio"] <= P50_TARGET))
        if r["case"] == "olmoe":
            out.append(("olmoe, M = 64: layer tokens/s / composed", r["throughput_ratio"],
                        f">= {THROUGHPUT_TARGET}", r["throughput_ratio"] >= THROUGHPUT_TARGET))
    return out


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cases = results["cases"]
    fig, axes = plt.subplots(1, len(cases), figsize=(4.5 * len(cases), 3.4))
    axes = axes if len(cases) > 1 else [axes]
    for ax, r in zip(axes, cases):
        small = r["case"] == "small"
        values = r["p50_ms"] if small else r["tokens_per_s"]
        ax.bar(["layer call", "composed by client"], [values["layer"], values["composed"]],
               color=["tab:blue", "tab:gray"])
        ax.set_title(f"{r['case']}, M = {r['m']}: " + ("p50 ms (lower is better)" if small
                                                       else "tokens/s (higher is better)"),
                     fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated: small,olmoe")
    parser.add_argument("--plot", default=os.path.join(ROOT, "docs", "moe-layer-service.png"))
    doc_sections.add_arguments(parser, ROOT)
    args = parser.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
        results["note"] = args.note
    else:
        sys.path.insert(0, os.path.join(args.build, "python"))
        results = {"cases": [measure_case(n, CASES[n], args) for n in args.cases.split(",")],
                   "cpu": doc_sections.cpu_model(), "threads": args.threads,
                   "rounds": args.rounds, "note": args.note,
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    doc_sections.write_section(args.doc, SECTION, render(results))
    plot(results, args.plot)
    for what, got, want, met in targets(results):
        print(f"{what}: {got:.2f} (wanted {want}){'' if met else '  NOT MET'}")
    for r in results["cases"]:
        print(f"{r['case']}: layer and composed differ by {r['max_relative_difference']:.2g} "
              "of the largest output")
    return 0


if __name__ == "__main__":
    sys.exit(main())
