#!/usr/bin/python3
"""Quantized experts (issue 17, and issue 42's accuracy_level 4) against their targets, from one
gemmserve-bench run: docs/performance.md's "quantized-benchmark" section and its plot.

  scripts/quantized_benchmark.py [--build build] [--repetitions 5]
  scripts/quantized_benchmark.py --from_json run.json   # re-render a run

Cases: GroupedMatMul/resident_int8 and resident_int4 (olmoe's experts kept
quantized, symmetric, in blocks of 32 rows of K), and resident_int8_a8 and
resident_int4_a8 (the same with accuracy_level 4), beside resident (the same
experts in FP32 or BF16), values FP32 and BF16, M = 1, 64 and 256. Every
figure is a ratio within the run:
- M = 1: the time over the memory floor (the bytes the call reads, its
  integers and FP32 scales, over the median Limit/read_bandwidth of the run's
  checkpoints), and FP32 resident decode's time over this one;
- M = 64 and 256: BF16 resident's time on the same shape over this one;
- beside llama.cpp's ggml_mul_mat_id (ggml_q8_0, ggml_q4_0 repacked, ggml F32
  and BF16; bench/ggml_baseline.h) at M = 1, 4, 64 and 256, run right after
  ours at each M: ggml's time over ours (above 1: ours is faster).
Times are medians of the repetitions. The ggml libraries are installed with
bench/ggml/install.sh into the build directory; where that fails or they
cannot run on the CPU, the section says so and leaves ggml's columns empty.
"""
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import doc_sections  # noqa: E402

SECTION = "quantized-benchmark"
FILTER = ("Limit/read_bandwidth|GroupedMatMul/(resident|resident_int8|resident_int4|"
          "resident_int8_a8|resident_int4_a8|ggml|ggml_q8_0|ggml_q4_0)/(fp32|bf16)/olmoe/"
          "(1|4|64|256)$")
# (case impl, label): issue 17's exact path, and issue 42's accuracy_level 4.
KINDS = (("resident_int8", "INT8"), ("resident_int4", "INT4"),
         ("resident_int8_a8", "INT8, level 4"), ("resident_int4_a8", "INT4, level 4"))
VALUES = ("fp32", "bf16")
# The issues' targets: issue 17's on the exact path, issue 42's on level 4.
INT8_FLOOR_TARGET = {"INT8": 1.2, "INT8, level 4": 1.15}   # INT8 decode: time / floor
INT4_FLOOR_TARGET = {"INT4, level 4": 1.25}                 # INT4 decode: time / floor
INT4_SPEEDUP_TARGET = {"INT4": 6.0, "INT4, level 4": 5.0}   # FP32 decode time / INT4's
LARGE_M_TARGET = 1.0      # M = 64, 256: at least BF16 resident's speed
GGML_TARGET = 1.0         # issue 42: level-4 INT8 / INT4 at least as fast as Q8_0 / Q4_0
GGML_MS = (1, 4, 64, 256)
# (column, case impl, values) of the ggml table: ours beside ggml's.
GGML_COLUMNS = (("ggml Q8_0", "ggml_q8_0", "fp32"), ("ours INT8 level 4", "resident_int8_a8", "fp32"),
                ("ggml Q4_0", "ggml_q4_0", "fp32"), ("ours INT4 level 4", "resident_int4_a8", "fp32"),
                ("ggml F32", "ggml", "fp32"), ("ours FP32", "resident", "fp32"),
                ("ggml BF16", "ggml", "bf16"), ("ours BF16", "resident", "bf16"))
# (ours, ggml's) pairs judged against GGML_TARGET.
GGML_PAIRS = (("resident_int8_a8", "ggml_q8_0", "INT8 level 4 vs ggml Q8_0"),
              ("resident_int4_a8", "ggml_q4_0", "INT4 level 4 vs repacked ggml Q4_0"))


def _milliseconds(entry):
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[entry["time_unit"]]
    return entry["real_time"] * scale


def summarize(run):
    """Medians per case and the run's bandwidth, from gemmserve-bench's JSON."""
    times, touched, bandwidth = {}, {}, []
    for b in run["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        name = b["run_name"]
        if name.startswith("Limit/read_bandwidth"):
            bandwidth.append(b["GBps"])
            continue
        times.setdefault(name, []).append(_milliseconds(b))
        if "bytes_touched" in b:
            touched[name] = b["bytes_touched"]
    if not bandwidth:
        raise ValueError("the run has no Limit/read_bandwidth: no floor to judge by")
    return ({n: statistics.median(v) for n, v in times.items()}, touched,
            statistics.median(bandwidth), min(bandwidth), max(bandwidth))


def results_from_run(run, meta):
    times, touched, gbps, lo, hi = summarize(run)
    cases = []
    for kind, label in KINDS:
        for value in VALUES:
            case = {"bits": label, "values": value.upper()}
            decode = f"GroupedMatMul/{kind}/{value}/olmoe/1"
            fp32 = "GroupedMatMul/resident/fp32/olmoe/1"
            if decode in times:
                floor_ms = touched[decode] / (gbps * 1e9) * 1e3
                case["decode_ms"] = times[decode]
                case["floor_ratio"] = times[decode] / floor_ms
                if fp32 in times:
                    case["fp32_speedup"] = times[fp32] / times[decode]
            for m in (64, 256):
                mine = f"GroupedMatMul/{kind}/{value}/olmoe/{m}"
                bf16 = f"GroupedMatMul/resident/bf16/olmoe/{m}"
                if mine in times and bf16 in times:
                    case[f"m{m}_ms"] = times[mine]
                    case[f"m{m}_vs_bf16"] = times[bf16] / times[mine]
            cases.append(case)
    resident = {}
    for value in VALUES:
        name = f"GroupedMatMul/resident/{value}/olmoe/1"
        if name in times:
            resident[value] = times[name] / (touched[name] / (gbps * 1e9) * 1e3)
    context = run.get("context", {})
    return dict(meta, bandwidth_gbps=gbps, bandwidth_range=[lo, hi], cases=cases,
                resident_floor_ratio=resident, ggml=ggml_rows(times, touched, gbps),
                ggml_backend=context.get("ggml", "not recorded"),
                int8_kernel=context.get("int8_dot_kernel", "not recorded"))


def ggml_rows(times, touched, gbps):
    """Per M: each column's time (ms) and, at M = 1 and 4, its time over its floor."""
    rows = []
    for m in GGML_MS:
        row = {"m": m, "ms": {}, "floor": {}}
        for column, impl, value in GGML_COLUMNS:
            name = f"GroupedMatMul/{impl}/{value}/olmoe/{m}"
            if name in times:
                row["ms"][column] = times[name]
                if m <= 4 and name in touched:
                    row["floor"][column] = times[name] / (touched[name] / (gbps * 1e9) * 1e3)
        for ours, theirs, label in GGML_PAIRS:
            a, b = f"GroupedMatMul/{ours}/fp32/olmoe/{m}", f"GroupedMatMul/{theirs}/fp32/olmoe/{m}"
            if a in times and b in times:
                row[label] = times[b] / times[a]
        rows.append(row)
    return rows


def _fmt(value, suffix=""):
    return "-" if value is None else f"{value:.2f}{suffix}"


def targets(results):
    """(what, measured, target, met) for each of the issues' targets."""
    out = []
    for c in results["cases"]:
        if c["values"] != "FP32":
            continue
        label = c["bits"]
        if label in INT8_FLOOR_TARGET and "floor_ratio" in c:
            want = INT8_FLOOR_TARGET[label]
            out.append((f"{label} decode, time / floor", c["floor_ratio"], f"<= {want}",
                        c["floor_ratio"] <= want))
        if label in INT4_FLOOR_TARGET and "floor_ratio" in c:
            want = INT4_FLOOR_TARGET[label]
            out.append((f"{label} decode, time / floor", c["floor_ratio"], f"<= {want}",
                        c["floor_ratio"] <= want))
        if label in INT4_SPEEDUP_TARGET and "fp32_speedup" in c:
            want = INT4_SPEEDUP_TARGET[label]
            out.append((f"{label} decode, FP32 time / this", c["fp32_speedup"], f">= {want}",
                        c["fp32_speedup"] >= want))
    for row in results.get("ggml", []):
        for _, _, label in GGML_PAIRS:
            if label in row:
                out.append((f"{label}, M = {row['m']}, ggml time / ours", row[label],
                            f">= {GGML_TARGET}", row[label] >= GGML_TARGET))
    for c in results["cases"]:
        if c["values"] != "BF16":
            continue
        for m in (64, 256):
            key = f"m{m}_vs_bf16"
            if key in c:
                out.append((f"{c['bits']} BF16 values, M = {m}, BF16 time / this", c[key],
                            f">= {LARGE_M_TARGET}", c[key] >= LARGE_M_TARGET))
    return out


def render(results):
    begin, _ = doc_sections.markers(SECTION)
    lo, hi = results["bandwidth_range"]
    lines = [
        begin,
        "## Quantized experts (issues 17 and 42)",
        "",
        "Written by `scripts/quantized_benchmark.py` from one `gemmserve-bench` run. The",
        "weights are kept quantized (`resident_int8`, `resident_int4`): symmetric, in blocks",
        "of 32 rows of K, one FP32 scale per block and column. Decode (M = 1) dequantizes in",
        "registers in the fused kernel (`server/ops/kernels/quantized_gemm.h`). Problems",
        "with BF16 values and at least 8 rows per expert dequantize a K block (128 rows) of a",
        "column tile at a time into BF16 pair panels and run the vdpbf16ps kernel on them.",
        "Each case is set beside `resident`, the same olmoe experts in FP32 or BF16.",
        "",
        f"Setup: {results.get('cpu', '?')}, {results.get('threads', '?')} threads, "
        f"medians of {results.get('repetitions', '?')} repetitions, {results.get('date', '')}.",
        "The memory floor is the bytes the call reads (the integers of the experts it uses,",
        "plus their FP32 scales) over `Limit/read_bandwidth`, measured at every checkpoint",
        f"of the same run: median {results['bandwidth_gbps']:.0f} GB/s, range {lo:.0f}-{hi:.0f}.",
        "",
        "| weights, values | M = 1: time / floor | M = 1: FP32 resident time / this "
        "| M = 64: BF16 resident time / this | M = 256: BF16 resident time / this |",
        "|---|---|---|---|---|",
    ]
    for c in results["cases"]:
        lines.append(f"| {c['bits']}, {c['values']} | {_fmt(c.get('floor_ratio'))} | "
                     f"{_fmt(c.get('fp32_speedup'), 'x')} | {_fmt(c.get('m64_vs_bf16'), 'x')} | "
                     f"{_fmt(c.get('m256_vs_bf16'), 'x')} |")
    res = results.get("resident_floor_ratio", {})
    if res:
        lines += ["", "In the same run, " + " and ".join(
            f"{v.upper()} `resident` decodes at {r:.2f} of its floor" for v, r in res.items())
            + "."]
    lines += ["", "`level 4` rows: accuracy_level 4 (8-bit activations, integer dot products,",
              "issue 42; docs/quantized-models.md), the weights repacked at load where a VNNI",
              "kernel runs; their floor counts the bytes that kernel reads. Kernel build:",
              f"`{results.get('int8_kernel', 'not recorded')}`.", ""]
    lines += ggml_table(results)
    lines += ["", "Against the issues' targets:", "", "| target | measured | wanted | met |",
              "|---|---|---|---|"]
    for what, got, want, met in targets(results):
        lines.append(f"| {what} | {got:.2f} | {want} | {'yes' if met else '**no**'} |")
    lines += ["", "![quantized experts against their targets](quantized-benchmark.png)", "",
              "Reproduce: `scripts/quantized_benchmark.py --repetitions 5` (writes this section",
              "and the plot; `--json run.json` keeps the run).", ""]
    return doc_sections.finish(lines, SECTION, results.get("note", ""))


def ggml_table(results):
    """The side-by-side table with llama.cpp's ggml_mul_mat_id (empty columns where not run)."""
    lines = ["### Beside llama.cpp's ggml", "",
             "`ggml_mul_mat_id` on the same olmoe experts, routing and threads, through ggml's",
             "public C API on the prebuilt libraries of npm's `@node-llama-cpp/linux-x64` 3.22.1",
             "(`bench/ggml_baseline.h`), each case right after ours at the same M. ggml quantizes",
             "the activations to Q8_0 itself for Q8_0 and Q4_0 experts. Loaded:",
             f"{results.get('ggml_backend', 'not recorded')}.", "",
             "ms per call (M = 1 and 4: time / memory floor in brackets):", "",
             "| M | " + " | ".join(c for c, _, _ in GGML_COLUMNS) + " |",
             "|---" * (len(GGML_COLUMNS) + 1) + "|"]
    for row in results.get("ggml", []):
        cells = []
        for column, _, _ in GGML_COLUMNS:
            ms = row["ms"].get(column)
            floor = row["floor"].get(column)
            cells.append("-" if ms is None else f"{ms:.3g}" +
                         ("" if floor is None else f" ({floor:.2f})"))
        lines.append(f"| {row['m']} | " + " | ".join(cells) + " |")
    return lines


def install_ggml(root, build):
    """bench/ggml/install.sh into the build directory: the directory gemmserve-bench loads
    ggml from, or None (and why, on stderr) where it cannot be installed."""
    try:
        out = subprocess.run([os.path.join(root, "bench", "ggml", "install.sh"),
                              os.path.join(build, "ggml")], check=True, capture_output=True,
                             text=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"quantized_benchmark: no ggml baseline: {getattr(e, 'stderr', e)}", file=sys.stderr)
        return None


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.6))
    fp32 = [c for c in results["cases"] if c["values"] == "FP32" and "floor_ratio" in c]
    ax = axes[0]
    ax.bar([c["bits"] for c in fp32], [c["floor_ratio"] for c in fp32], color="tab:blue")
    ax.axhline(INT8_FLOOR_TARGET["INT8"], color="red", linestyle="--", linewidth=0.8,
               label="INT8 target")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_title("decode (M = 1), FP32 values: time / memory floor", fontsize=10)
    ax.legend(fontsize=8)
    ax = axes[1]
    bf16 = [c for c in results["cases"] if c["values"] == "BF16"]
    width = 0.35
    for j, m in enumerate((64, 256)):
        ax.bar([i + (j - 0.5) * width for i in range(len(bf16))],
               [c.get(f"m{m}_vs_bf16", 0) for c in bf16], width, label=f"M = {m}")
    ax.axhline(LARGE_M_TARGET, color="red", linestyle="--", linewidth=0.8, label="target")
    ax.set_xticks(range(len(bf16)))
    ax.set_xticklabels([c["bits"] for c in bf16])
    ax.set_title("BF16 values: BF16 resident time / this (higher is better)", fontsize=10)
    ax.legend(fontsize=8)
    ax = axes[2]
    rows = results.get("ggml", [])
    for j, (_, _, label) in enumerate(GGML_PAIRS):
        ax.bar([i + (j - 0.5) * width for i in range(len(rows))],
               [r.get(label, 0) for r in rows], width, label=label)
    ax.axhline(GGML_TARGET, color="red", linestyle="--", linewidth=0.8, label="target")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"M = {r['m']}" for r in rows])
    ax.set_title("beside llama.cpp: ggml time / ours (higher is better)", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    def prepare(args):
        ggml_dir = install_ggml(ROOT, args.build)
        if ggml_dir:
            os.environ["GEMMSERVE_GGML_DIR"] = ggml_dir
    return doc_sections.bench_report_main(__doc__, SECTION, FILTER, sys.modules[__name__],
                                          "quantized-benchmark.png", 5, ROOT, prepare)


if __name__ == "__main__":
    sys.exit(main())
