#!/usr/bin/python3
"""Whole mixture-of-experts layers (issue 41) against their targets, from one gemmserve-bench
run: docs/performance.md's "moe-layer-benchmark" section and its plot.

  scripts/moe_layer_benchmark.py [--build build] [--repetitions 3]
  scripts/moe_layer_benchmark.py --from_json run.json   # re-render a run

Cases: MoeLayer/fused (RunMoeLayer) and MoeLayer/composed (two resident GroupedMatMul calls
with the activation and the weighted sum between them, in-process) on olmoe-layer (K 2048,
I 1024, G 64, S 8) and mixtral-small-layer (K 1024, I 3584, G 8, S 2), FP32 and BF16,
M = 1 ... 1024. Every figure is a ratio within the run, each case judged by the limits
measured just before and after its group (Limit/read_bandwidth, Limit/sgemm/2048):
- decode (M = 1, 4): time / memory floor (the distinct experts' three matrices over the
  read bandwidth), wanted <= 1.2;
- M = 64, 256: roofline fraction, max(flops / sgemm, bytes / bandwidth) / time, >= 0.75;
- M = 1024: FP32 GFLOP/s over sgemm >= 0.8; BF16 over FP32 >= 1.3x where BF16 runs on panels;
- fused never slower than composed (composed time / fused time >= 1, a shortfall within the
  spread of the two cases' own repetitions counted as equal).
Times are medians of the repetitions.
"""
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import doc_sections  # noqa: E402

SECTION = "moe-layer-benchmark"
FILTER = "Limit/(read_bandwidth|sgemm/2048)|MoeLayer/"
SHAPES = ("olmoe-layer", "mixtral-small-layer")
TYPES = ("fp32", "bf16")
TOKENS = (1, 4, 16, 64, 256, 1024)
LIMIT = re.compile(r"Limit/(read_bandwidth|sgemm/2048)(?:/checkpoint:(\d+))?")
CASE = re.compile(r"MoeLayer/(fused|composed)/(fp32|bf16)/([\w-]+)/(\d+)")
DECODE_TARGET, ROOFLINE_TARGET, PREFILL_TARGET, BF16_TARGET = 1.2, 0.75, 0.8, 1.3


def _ms(entry):
    return entry["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[entry["time_unit"]]


def summarize(run):
    """Medians per case with their counters, and the limits per checkpoint."""
    times, counters, limits = {}, {}, {}
    for b in run["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        name = b["run_name"]
        limit = LIMIT.fullmatch(name)
        if limit:
            key = "gbps" if limit.group(1) == "read_bandwidth" else "sgemm"
            value = b.get("GBps") if key == "gbps" else b.get("GFLOPS")
            limits.setdefault(int(limit.group(2) or 0), {}).setdefault(key, []).append(value)
            continue
        times.setdefault(name, []).append(_ms(b))
        counters[name] = b
    limits = {c: {k: statistics.median(v) for k, v in d.items()} for c, d in limits.items()}
    spread = {n: (max(v) - min(v)) / statistics.median(v) for n, v in times.items()}
    return {n: statistics.median(v) for n, v in times.items()}, counters, limits, spread


def case_limits(limits, checkpoint):
    """The mean of the limits measured at the case's checkpoint and at the next one."""
    near = [limits[c] for c in (checkpoint, checkpoint + 1) if c in limits] or list(limits.values())
    out = {}
    for key in ("gbps", "sgemm"):
        values = [d[key] for d in near if d.get(key)]
        out[key] = sum(values) / len(values) if values else None
    return out


def results_from_run(run, meta):
    times, counters, limits, spread = summarize(run)
    cases = []
    for name, ms in sorted(times.items()):
        match = CASE.fullmatch(name)
        if not match:
            continue
        impl, dtype, shape, m = match.groups()
        c = counters[name]
        lim = case_limits(limits, int(c.get("limits_checkpoint", 0)))
        seconds = ms / 1e3
        flops = c["GFLOPS"] * 1e9 * seconds
        floor = c["bytes_touched"] / (lim["gbps"] * 1e9) if lim["gbps"] else None
        compute = flops / (lim["sgemm"] * 1e9) if lim["sgemm"] else None
        cases.append({"impl": impl, "dtype": dtype, "shape": shape, "m": int(m), "ms": ms,
                      "spread": spread[name],
                      "gflops": c["GFLOPS"], "panels": bool(c.get("panels", 0)),
                      "floor_ratio": seconds / floor if floor else None,
                      "roofline": max(floor or 0, compute or 0) / seconds,
                      "of_sgemm": c["GFLOPS"] / lim["sgemm"] if lim["sgemm"] else None})
    gbps = [d["gbps"] for d in limits.values() if d.get("gbps")]
    sgemm = [d["sgemm"] for d in limits.values() if d.get("sgemm")]
    return dict(meta, cases=cases,
                bandwidth_range=[min(gbps), max(gbps)] if gbps else None,
                sgemm_range=[min(sgemm), max(sgemm)] if sgemm else None)


def _find(results, impl, dtype, shape, m):
    return next((c for c in results["cases"] if (c["impl"], c["dtype"], c["shape"], c["m"]) ==
                 (impl, dtype, shape, m)), None)


def targets(results):
    """(what, measured, wanted, met) for each of the issue's targets, on the fused cases."""
    out = []
    for shape in SHAPES:
        for dtype in TYPES:
            for m in (1, 4):
                c = _find(results, "fused", dtype, shape, m)
                if c and c["floor_ratio"]:
                    out.append((f"{shape} {dtype.upper()} M = {m}: time / memory floor",
                                c["floor_ratio"], f"<= {DECODE_TARGET}",
                                c["floor_ratio"] <= DECODE_TARGET))
            for m in (64, 256):
                c = _find(results, "fused", dtype, shape, m)
                if c:
                    out.append((f"{shape} {dtype.upper()} M = {m}: roofline fraction",
                                c["roofline"], f">= {ROOFLINE_TARGET}",
                                c["roofline"] >= ROOFLINE_TARGET))
        fp32, bf16 = (_find(results, "fused", t, shape, 1024) for t in TYPES)
        if fp32 and fp32["of_sgemm"]:
            out.append((f"{shape} FP32 M = 1024: GFLOP/s / sgemm", fp32["of_sgemm"],
                        f">= {PREFILL_TARGET}", fp32["of_sgemm"] >= PREFILL_TARGET))
        if fp32 and bf16 and bf16["panels"]:
            speedup = fp32["ms"] / bf16["ms"]
            out.append((f"{shape} M = 1024: BF16 speed over FP32 (BF16 panels)", speedup,
                        f">= {BF16_TARGET}", speedup >= BF16_TARGET))
    slower, compared = [], 0
    for c in results["cases"]:
        other = _find(results, "composed", c["dtype"], c["shape"], c["m"])
        if c["impl"] == "fused" and other:
            compared += 1
            ratio = other["ms"] / c["ms"]
            # Slower only beyond the spread of the two cases' own repetitions.
            if ratio < 1.0 - max(c.get("spread", 0.0), other.get("spread", 0.0)):
                slower.append(f"{c['shape']} {c['dtype'].upper()} M = {c['m']}")
    if compared:
        worst = min(_find(results, "composed", c["dtype"], c["shape"], c["m"])["ms"] / c["ms"]
                    for c in results["cases"] if c["impl"] == "fused" and
                    _find(results, "composed", c["dtype"], c["shape"], c["m"]))
        out.append((f"fused never slower than composed beyond the repetitions' spread "
                    f"({compared - len(slower)} of {compared} cases; lowest composed / fused)",
                    worst, ">= 1 - spread", not slower))
    return out


def _fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def render(results):
    begin, _ = doc_sections.markers(SECTION)
    lo, hi = results["bandwidth_range"] or (0, 0)
    slo, shi = results["sgemm_range"] or (0, 0)
    lines = [
        begin,
        "## Mixture-of-experts layers (issue 41)",
        "",
        "Written by `scripts/moe_layer_benchmark.py` from one `gemmserve-bench` run.",
        "`fused` is the layer model's op (`server/ops/moe_layer.h`): pairs sorted by expert, run",
        "in waves whose gate/up tile is activated in place and fed to down, weighted into one",
        "FP32 accumulator. `composed` is the same layer as two resident GroupedMatMul calls",
        "with the activation and the weighted sum between and after them, in-process. Both",
        "read the same resident weights (panels where the type packs at load). Decode cases",
        "(M <= 64) evict the chosen experts before every call.",
        "",
        f"Setup: {results.get('cpu', '?')}, {results.get('threads', '?')} threads, medians of "
        f"{results.get('repetitions', '?')} repetitions, {results.get('date', '')}. Limits "
        f"measured beside every group: read bandwidth {lo:.0f}-{hi:.0f} GB/s, sgemm "
        f"{slo:.0f}-{shi:.0f} GFLOP/s; each case is judged by those just before and after it.",
        "",
        "| shape | type | M | fused ms | composed / fused | GFLOP/s | time / floor | roofline |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for shape in SHAPES:
        for dtype in TYPES:
            for m in TOKENS:
                c = _find(results, "fused", dtype, shape, m)
                if not c:
                    continue
                other = _find(results, "composed", dtype, shape, m)
                ratio = other["ms"] / c["ms"] if other else None
                lines.append(f"| {shape} | {dtype.upper()} | {m} | {_fmt(c['ms'], 3)} | "
                             f"{_fmt(ratio)}x | {_fmt(c['gflops'], 1)} | "
                             f"{_fmt(c['floor_ratio']) if m <= 64 else '-'} | "
                             f"{_fmt(c['roofline'])} |")
    lines += ["", "Against the issue's targets:", "", "| target | measured | wanted | met |",
              "|---|---|---|---|"]
    for what, got, want, met in targets(results):
        lines.append(f"| {what} | {got:.2f} | {want} | {'yes' if met else '**no**'} |")
    lines += ["", "![layers: roofline fraction against M](moe-layer-benchmark.png)", "",
              "Reproduce: `scripts/moe_layer_benchmark.py --repetitions 3` (writes this section",
              "and the plot; `--json run.json` keeps the run).", ""]
    return doc_sections.finish(lines, SECTION, results.get("note", ""))


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(SHAPES), figsize=(11, 3.8), sharey=True)
    for ax, shape in zip(axes, SHAPES):
        for dtype, color in zip(TYPES, ("tab:blue", "tab:orange")):
            for impl, style in (("fused", "-o"), ("composed", ":x")):
                pts = [(c["m"], c["roofline"]) for c in results["cases"]
                       if (c["impl"], c["dtype"], c["shape"]) == (impl, dtype, shape)]
                if pts:
                    pts.sort()
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color,
                            label=f"{dtype.upper()} {impl}")
        ax.axhline(ROOFLINE_TARGET, color="red", linestyle="--", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M (tokens)")
        ax.set_title(f"{shape}: roofline fraction", fontsize=10)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("max(flops/sgemm, bytes/bandwidth) / time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    return doc_sections.bench_report_main(__doc__, SECTION, FILTER, sys.modules[__name__],
                                          "moe-layer-benchmark.png", 3, ROOT)


if __name__ == "__main__":
    sys.exit(main())
