#!/usr/bin/python3
"""What sharding a mixture-of-experts layer costs per call (issue 53): docs/performance.md's
"sharded-layer" section and its plot.

  scripts/sharded_layer_benchmark.py [--build build] [--rounds 3]
  scripts/sharded_layer_benchmark.py --from_json run.json   # re-render a run

The OLMoE layer shape (K 2048, I 1024, G 64, S 8, FP32, softmax then top-8, routed in the
graph) served two ways on this machine, from the same seed: unsharded by one server (2 compute
threads), and sharded by a router and two shard servers (experts 0-31 and 32-63, 1 compute
thread each: the shards share the machine's cores and memory, so this measures the cost of
sharding, not its gain). One client, closed loop, the two ways taking turns in rounds with fresh
inputs, at M = 1, 16, 64 and 256; the figures are medians of all calls. Measured beside them,
from the servers' own metrics:
- the router's own time per call (gemmserve_router_overhead_seconds: from its batch's start to
  the shards' sum, routing, the split, the calls' overhead and the sum, less that call's
  slowest shard call): its mean, its median, and the mean's share of the sharded p50;
- bytes per token per shard, sent and received (the shards' gemmserve_bytes_total).
From those, a model (stated as one) of decode and throughput on N machines.
Targets (the issue's "the router adds at most 15% at M = 64 and 256, at most 0.3 ms at M = 1"):
the router's own time (mean) at most 0.15 of the sharded p50 at M = 64 and 256 and at most
0.3 ms at M = 1; the sharded p50 against the unsharded one is reported beside it.
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
sys.path[:0] = [HERE, os.path.join(ROOT, "tests", "python_lib"),
                os.path.join(ROOT, "client", "python")]
import doc_sections  # noqa: E402

SECTION = "sharded-layer"
SHAPE = dict(k=2048, i=1024, g=64, s=8, dtype="fp32")
MS = {1: 40, 16: 20, 64: 8, 256: 4}  # M -> calls per round
SHARE_TARGET, ROUTER_MS_TARGET = 0.15, 0.3


def _make_moe_layer():
    spec = importlib.util.spec_from_file_location("make_moe_layer",
                                                  os.path.join(HERE, "make_moe_layer.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def start_server(build, repo, threads):
    proc = subprocess.Popen([os.path.join(build, "bin", "gemmserve"), "--grpc_port=0",
                             "--metrics_port=0", "--http_port=-1", "--host=127.0.0.1",
                             f"--compute_threads={threads}", f"--model_repository={repo}"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    grpc_line, metrics_line = proc.stdout.readline(), proc.stdout.readline()
    grpc_port = re.match(r"gemmserve listening on \S+:(\d+)", grpc_line)
    metrics_port = re.match(r"gemmserve metrics on \S+:(\d+)", metrics_line)
    if not grpc_port or not metrics_port:
        proc.kill()
        raise RuntimeError(f"gemmserve did not start: {grpc_line!r} {metrics_line!r}")
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, f"127.0.0.1:{grpc_port.group(1)}", \
        f"http://127.0.0.1:{metrics_port.group(1)}/metrics"


def write_layer(root, m):
    """root/whole/layer (unsharded) and root/{router,shard0,shard1}/layer, one seed."""
    import onnx
    c = SHAPE
    whole = m.layer_model(m.layer_graph(c["k"], c["i"], c["g"], c["s"], c["dtype"],
                                        routing="softmax_topk", seed=53))
    m.write_sharded(root, "layer", whole, 2, ["pending", "pending"])
    path = os.path.join(root, "whole", "layer", "1", "model.onnx")
    os.makedirs(os.path.dirname(path))
    # (Saving to external data moves the tensors out of `whole`: last.)
    onnx.save_model(whole, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=1024)


def metric(url, family, **labels):
    from gemmserve_testing.process import metric_sum
    return metric_sum(url, family, **labels)


def mean_of(url, family, **labels):
    return metric(url, f"{family}_sum", **labels), metric(url, f"{family}_count", **labels)


def measure(args):
    import numpy as np
    from gemmserve_client import GemmServeClient
    m = _make_moe_layer()
    tmp = tempfile.mkdtemp(prefix="gemmserve-sharded-bench-")
    procs = []
    try:
        write_layer(tmp, m)
        shards = []
        for j in range(2):
            proc, address, metrics = start_server(args.build, os.path.join(tmp, f"shard{j}"), 1)
            procs.append(proc)
            shards.append((address, metrics))
        text = ";".join(f"{a}:{b}={shards[j][0]}"
                        for j, (a, b) in enumerate(m.expert_ranges(SHAPE["g"], 2)))
        with open(os.path.join(tmp, "router", "layer", "config.pbtxt"), "w") as f:
            f.write(m._config("layer", {"shards": text}))
        proc, router, router_metrics = start_server(args.build, os.path.join(tmp, "router"), 2)
        procs.append(proc)
        proc, whole, _ = start_server(args.build, os.path.join(tmp, "whole"), 2)
        procs.append(proc)
        results = []
        with GemmServeClient(router) as sharded, GemmServeClient(whole) as unsharded:
            for client in (sharded, unsharded):
                client.wait_ready(timeout=120)
            deadline = time.monotonic() + 60
            while not sharded.model_ready("layer") and time.monotonic() < deadline:
                time.sleep(0.1)
            ways = {"sharded": sharded, "unsharded": unsharded}
            rng = np.random.default_rng(1)
            for mm in (int(v) for v in args.ms.split(",")):
                calls = MS[mm]
                results.append(measure_m(ways, mm, calls, args.rounds, rng, shards,
                                         router_metrics))
                print(f"M = {mm}: {json.dumps(results[-1])}", flush=True)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def measure_m(ways, m, calls, rounds, rng, shards, router_metrics):
    import numpy as np
    check = rng.uniform(-1, 1, (m, SHAPE["k"])).astype(np.float32)
    answers = {w: c.infer("layer", x=check)["out"] for w, c in ways.items()}
    difference = float(np.max(np.abs(answers["sharded"] - answers["unsharded"])) /
                       np.max(np.abs(answers["unsharded"])))
    for _ in range(2):  # warm-up
        for c in ways.values():
            c.infer("layer", x=check)
    latency = {w: [] for w in ways}
    before = snapshot(shards, router_metrics)
    for r in range(rounds):
        for way in (("sharded", "unsharded") if r % 2 == 0 else ("unsharded", "sharded")):
            for _ in range(calls):
                x = rng.uniform(-1, 1, (m, SHAPE["k"])).astype(np.float32)
                t0 = time.perf_counter()
                ways[way].infer("layer", x=x)
                latency[way].append(time.perf_counter() - t0)
    after = snapshot(shards, router_metrics)
    d = {k: after[k] - before[k] for k in after if k != "own_buckets"}
    tokens = m * calls * rounds
    shard_call_ms = [1e3 * d[f"call_sum{j}"] / max(d[f"call_count{j}"], 1) for j in range(2)]
    router_ms = 1e3 * d["compute_sum"] / max(d["compute_count"], 1)
    own_ms = 1e3 * d["own_sum"] / max(d["own_count"], 1)
    own_p50_ms = 1e3 * histogram_median(before["own_buckets"], after["own_buckets"])
    p50 = {w: 1e3 * statistics.median(v) for w, v in latency.items()}
    return {"m": m, "calls": calls * rounds, "p50_ms": p50,
            "p50_ratio": p50["sharded"] / p50["unsharded"],
            "router_compute_ms": router_ms, "shard_call_ms": shard_call_ms,
            "router_own_ms": own_ms, "router_own_p50_ms": own_p50_ms,
            "router_own_share": own_ms / p50["sharded"],
            "bytes_per_token_per_shard": {
                "sent": [d[f"in{j}"] / tokens for j in range(2)],
                "received": [d[f"out{j}"] / tokens for j in range(2)]},
            "max_relative_difference": difference}


def buckets(url, family):
    """{upper bound: cumulative count} of a histogram of model "layer"."""
    from gemmserve_testing.process import metric_samples
    return {float(labels["le"]): value for labels, value in metric_samples(url, f"{family}_bucket")
            if labels.get("model") == "layer"}


def histogram_median(before, after):
    """The median of the observations between two scrapes, interpolated in its bucket (as
    Prometheus' histogram_quantile does)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1]
    if total <= 0:
        return float("nan")
    lower, below = 0.0, 0.0
    for bound, count in zip(bounds, counts):
        if count >= total / 2:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (total / 2 - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return lower


def snapshot(shards, router_metrics):
    out = {}
    s, c = mean_of(router_metrics, "gemmserve_compute_duration_seconds", model="layer")
    out["compute_sum"], out["compute_count"] = s, c
    s, c = mean_of(router_metrics, "gemmserve_router_overhead_seconds", model="layer")
    out["own_sum"], out["own_count"] = s, c
    out["own_buckets"] = buckets(router_metrics, "gemmserve_router_overhead_seconds")
    for j, (_, url) in enumerate(shards):
        s, c = mean_of(router_metrics, "gemmserve_shard_call_duration_seconds", model="layer",
                       shard=str(j))
        out[f"call_sum{j}"], out[f"call_count{j}"] = s, c
        out[f"in{j}"] = metric(url, "gemmserve_bytes_total", model="layer", direction="in")
        out[f"out{j}"] = metric(url, "gemmserve_bytes_total", model="layer", direction="out")
    return out


def scaling_model(results, bandwidth_gbs=50.0, link_gbits=25.0):
    """Decode (M = 1) and a batch (M = 256) on N machines, as a model. Each expert is
    3*K*I*4 bytes read at the machine's memory bandwidth; a token reaches min(N, S) shards
    (its S experts spread over them) and costs each the measured bytes both ways, which all
    cross the router's link. A call takes the longer of its shards' reads and the router's
    link, plus the router's own time measured at that M. The N past which the link, not the
    memory, bounds a call."""
    c = SHAPE
    expert_bytes = 3 * c["k"] * c["i"] * 4
    out = {"bandwidth_gbs": bandwidth_gbs, "link_gbits": link_gbits,
           "expert_bytes": expert_bytes, "cases": []}
    for m in (1, 256):
        run = next((r for r in results if r["m"] == m), None)
        if run is None:
            continue
        b = run["bytes_per_token_per_shard"]
        link_bytes = statistics.mean(b["sent"]) + statistics.mean(b["received"])
        rows = []
        for n in (1, 2, 4, 8, 16, 32, 64):
            touched = min(n, c["s"])
            # Experts a shard reads: a token's S over the shards it reaches; a batch reads
            # (nearly) every expert, G/N per shard.
            experts = c["s"] / touched if m == 1 else c["g"] / n
            memory_ms = 1e3 * experts * expert_bytes / (bandwidth_gbs * 1e9)
            link_ms = 0.0 if n == 1 else 1e3 * m * touched * link_bytes * 8 / (link_gbits * 1e9)
            router_ms = 0.0 if n == 1 else run["router_own_ms"]
            rows.append({"n": n, "memory_ms": memory_ms, "link_ms": link_ms,
                         "router_ms": router_ms,
                         "call_ms": max(memory_ms, link_ms) + router_ms})
        crossing = next((r["n"] for r in rows if r["link_ms"] > r["memory_ms"]), None)
        out["cases"].append({"m": m, "link_bytes_per_token_per_shard": link_bytes,
                             "rows": rows, "link_bound_from": crossing})
    return out


def targets(results):
    out = []
    for r in results["runs"]:
        if r["m"] in (64, 256):
            out.append((f"M = {r['m']}: the router's own time / sharded p50",
                        r["router_own_share"], f"<= {SHARE_TARGET}",
                        r["router_own_share"] <= SHARE_TARGET))
        if r["m"] == 1:
            out.append(("M = 1: the router's own ms per call", r["router_own_ms"],
                        f"<= {ROUTER_MS_TARGET}", r["router_own_ms"] <= ROUTER_MS_TARGET))
    return out


def render(results):
    begin, _ = doc_sections.markers(SECTION)
    lines = [begin, "## A sharded layer: what the router costs (issue 53)", "",
             "Written by `scripts/sharded_layer_benchmark.py`: the OLMoE layer shape (K 2048, "
             "I 1024, G 64, S 8, FP32, routed in the graph) unsharded on one server (2 compute "
             "threads) and sharded over a router (2) and two shards (1 each, experts 0-31 and "
             "32-63), all on this machine, so the shards share its cores and memory: this is "
             "the cost of sharding, not its gain. One client, closed loop, the two ways taking "
             "turns in rounds with fresh inputs; p50 over all calls.", "",
             f"Setup: {results.get('cpu', '?')}, {results.get('rounds', '?')} rounds, "
             f"{results.get('date', '')}.", "",
             "| M | unsharded p50 ms | sharded p50 ms | sharded / unsharded | router compute "
             "ms per batch | shard call ms (0, 1) | router's own ms, mean (median) | "
             "bytes/token/shard sent | received |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results["runs"]:
        b = r["bytes_per_token_per_shard"]
        lines.append(f"| {r['m']} | {r['p50_ms']['unsharded']:.3f} | "
                     f"{r['p50_ms']['sharded']:.3f} | {r['p50_ratio']:.2f} | "
                     f"{r['router_compute_ms']:.3f} | "
                     f"{r['shard_call_ms'][0]:.3f}, {r['shard_call_ms'][1]:.3f} | "
                     f"{r['router_own_ms']:.3f} ({r['router_own_p50_ms']:.3f}) | "
                     f"{statistics.mean(b['sent']):.0f} | "
                     f"{statistics.mean(b['received']):.0f} |")
    lines += ["", "The router's own time is `gemmserve_router_overhead_seconds`: from its "
              "batch's start to the shards' sum, less that call's slowest shard call (the "
              "routing, the split, the calls' overhead, the sum); its median is interpolated "
              "in the histogram's bucket. Bytes are the shards' "
              "`gemmserve_bytes_total` (tensor bytes) over the tokens sent. A shard gets only "
              "the tokens routed to it: with S = 8 of 64 experts nearly every token reaches "
              "both shards.", "", "Against the issue's targets:", "",
              "| target | measured | wanted | met |", "|---|---|---|---|"]
    for what, got, want, met in targets(results):
        lines.append(f"| {what} | {got:.2f} | {want} | {'yes' if met else '**no**'} |")
    model = results["model"]
    lines += ["", f"**A model of N machines** (a model, not a measurement). Its inputs: "
              f"{model['expert_bytes'] / 1e6:.1f} MB per expert (3·K·I FP32), "
              f"{model['bandwidth_gbs']:.0f} GB/s of memory bandwidth per machine, a "
              f"{model['link_gbits']:.0f} Gbit/s link at the router, and, measured above, the "
              "bytes per token per shard (both ways) and the router's own time at that M. A "
              "token reaches min(N, S) shards; a decode token's shards each read S/min(N, S) "
              "experts, a batch's shards G/N each; a call takes the longer of the reads and "
              "the router's link, plus the router's own time. Compute is left out (it bounds "
              "large batches before either)."]
    for case in model["cases"]:
        lines += ["", f"M = {case['m']} per call:", "",
                  "| N | memory ms | link ms | router ms | call ms | tokens/s |",
                  "|---|---|---|---|---|---|"]
        for row in case["rows"]:
            lines.append(f"| {row['n']} | {row['memory_ms']:.3f} | {row['link_ms']:.3f} | "
                         f"{row['router_ms']:.3f} | {row['call_ms']:.3f} | "
                         f"{case['m'] * 1e3 / row['call_ms']:.0f} |")
        lines += ["", (f"The link bounds it from N = {case['link_bound_from']} on."
                       if case["link_bound_from"] else
                       "The link bounds it for no N here: a decode token's few KB per shard "
                       "cross the link in microseconds, while each expert is megabytes; past "
                       "N = S a token's experts stop spreading, and the router's own time "
                       "is what sharding adds.")]
    lines += ["", "![sharded against unsharded](sharded-layer.png)", "",
              "Reproduce: `scripts/sharded_layer_benchmark.py` (`--json run.json` keeps the "
              "run).", ""]
    return doc_sections.finish(lines, SECTION, results.get("note", ""))


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = results["runs"]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ms = [str(r["m"]) for r in runs]
    width = 0.38
    xs = range(len(runs))
    ax.bar([x - width / 2 for x in xs], [r["p50_ms"]["unsharded"] for r in runs], width,
           label="unsharded", color="tab:gray")
    ax.bar([x + width / 2 for x in xs], [r["p50_ms"]["sharded"] for r in runs], width,
           label="router + 2 shards", color="tab:blue")
    ax.set_xticks(list(xs), ms)
    ax.set_xlabel("M (tokens per call)")
    ax.set_ylabel("p50 ms (log)")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("OLMoE layer, FP32: sharded against unsharded", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ms", default=",".join(str(m) for m in MS),
                        help="the M to measure, comma-separated")
    parser.add_argument("--plot", default=os.path.join(ROOT, "docs", "sharded-layer.png"))
    doc_sections.add_arguments(parser, ROOT)
    args = parser.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
        results["note"] = args.note
    else:
        sys.path.insert(0, os.path.join(args.build, "python"))
        runs = measure(args)
        results = {"runs": runs, "model": scaling_model(runs), "cpu": doc_sections.cpu_model(),
                   "rounds": args.rounds, "note": args.note,
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    doc_sections.write_section(args.doc, SECTION, render(results))
    plot(results, args.plot)
    for what, got, want, met in targets(results):
        print(f"{what}: {got:.2f} (wanted {want}){'' if met else '  NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
