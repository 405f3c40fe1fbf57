#!/usr/bin/python3
"""Turns a gemmserve-bench JSON run into docs/performance.md and docs/performance.png.

The report puts every figure beside its limit and its baselines, all measured in
the same run (shared/BENCHMARKS.md): GroupedMatMul against one large BLIS
sgemm/dgemm and, for decode sizes, against the time the weights of the experts
it touches take to stream at the measured read bandwidth; against the per-group
loop and the ONNX decomposition; half types against FP32; MatMul against the
naive loop. It then evaluates the performance targets, PASS or FAIL.

With --benchmark_repetitions=N the median aggregates are used; without, the
median of whatever runs of a case the file holds.

    build/bin/gemmserve-bench --benchmark_repetitions=3 \\
        --benchmark_out=run.json --benchmark_out_format=json
    /usr/bin/python3 scripts/performance_report.py run.json

Needs python3-matplotlib (Debian) for the plot.
"""

import argparse
import json
import math
import os
import re
import statistics
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (K, N, G, S), as in shared/BENCHMARKS.md and bench/gemmserve_bench.cc.
SHAPES = {
    "olmoe": (2048, 1024, 64, 8),
    "mixtral-small": (1024, 3584, 8, 2),
    "deepseek-lite": (2048, 1408, 64, 6),
}
TOKEN_COUNTS = [1, 4, 16, 64, 256, 1024, 4096]
GROUPED_TYPES = ["fp32", "fp64", "fp16", "bf16"]
MATMUL_TYPES = ["fp32", "fp64", "fp16", "bf16", "int32", "int64", "uint32", "uint64"]
INTEGER_TYPES = ["int32", "int64", "uint32", "uint64"]
ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8}
# Decode-size cases: the benchmark runs them with cold weights, and the
# read-bandwidth floor is the limit that matters for them.
DECODE_MAX_TOKENS = 64

REPRODUCE = """\
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 --target gemmserve-bench
build/bin/gemmserve-bench --benchmark_repetitions=3 \\
    --benchmark_out=run.json --benchmark_out_format=json
/usr/bin/python3 scripts/performance_report.py run.json"""

UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


LIMIT_NAME = re.compile(r"(Limit/sgemm/2048|Limit/dgemm/2048|Limit/read_bandwidth)"
                        r"(?:/checkpoint:(\d+))?")
LIMIT_KINDS = {"Limit/sgemm/2048": ("sgemm", "GFLOPS"), "Limit/dgemm/2048": ("dgemm", "GFLOPS"),
               "Limit/read_bandwidth": ("bandwidth", "GBps")}
LIMIT_MOVE = 0.10  # a group whose limits moved more than this is marked
# Kept from the old file, in this order: scripts/service_benchmark.py's,
# scripts/http_benchmark.py's and scripts/scaling_benchmark.py's sections, and
# the written design notes.
KEPT_SECTIONS = ("service-benchmark", "http-benchmark", "thread-scaling", "scaling",
                 "quantized-benchmark", "moe-layer-benchmark", "moe-layer-service")


@dataclass
class Result:
    seconds: float  # wall-clock per call
    counters: Dict[str, float] = field(default_factory=dict)
    repetitions: int = 1

    def get(self, key: str) -> Optional[float]:
        return self.counters.get(key)


NON_COUNTER_KEYS = {
    "name", "run_name", "run_type", "repetitions", "repetition_index", "threads",
    "iterations", "real_time", "cpu_time", "time_unit", "family_index",
    "per_family_instance_index", "aggregate_name", "aggregate_unit", "error_occurred",
    "error_message", "label",
}


def entry_counters(entry):
    return {k: float(v) for k, v in entry.items()
            if k not in NON_COUNTER_KEYS and isinstance(v, (int, float))}


def load_run(path):
    """Returns (context, results by name, errors by name)."""
    with open(path) as f:
        data = json.load(f)
    runs: Dict[str, list] = {}
    medians: Dict[str, dict] = {}
    errors: Dict[str, str] = {}
    for entry in data.get("benchmarks", []):
        name = entry.get("run_name", entry["name"])
        if entry.get("error_occurred"):
            errors[name] = entry.get("error_message", "")
            continue
        if entry.get("run_type") == "aggregate":
            if entry.get("aggregate_name") == "median":
                medians[name] = entry
            continue
        runs.setdefault(name, []).append(entry)
    results = {}
    for name in set(runs) | set(medians):
        entries = runs.get(name, [])
        if name in medians:
            m = medians[name]
            results[name] = Result(m["real_time"] * UNIT_SECONDS[m["time_unit"]],
                                   entry_counters(m), max(len(entries), m.get("repetitions", 1)))
        else:
            seconds = statistics.median(e["real_time"] * UNIT_SECONDS[e["time_unit"]]
                                        for e in entries)
            keys = set().union(*(entry_counters(e).keys() for e in entries))
            counters = {k: statistics.median(entry_counters(e)[k] for e in entries
                                             if k in entry_counters(e)) for k in keys}
            results[name] = Result(seconds, counters, len(entries))
        errors.pop(name, None)  # a case that also has good runs is not an error
    return data.get("context", {}), results, errors


# --- formatting -------------------------------------------------------------

def fmt(value, digits=3):
    if value is None:
        return "—"
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    return f"{value:.{decimals}f}"


def fmt_ratio(value):
    return "—" if value is None else f"{fmt(value)}×"


def fmt_ms(seconds):
    return "—" if seconds is None else fmt(seconds * 1e3)


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def grouped_name(impl, dtype, shape, m, skewed=False):
    return f"GroupedMatMul/{impl}/{dtype}/{shape}{'-skewed' if skewed else ''}/{m}"


class Report:
    def __init__(self, context, results, errors):
        self.context = context
        self.results = results
        self.errors = errors
        # The limits at every checkpoint (gemmserve-bench measures them before the first
        # group of cases and after each group); checkpoint 0 has the plain names.
        self.limit_at = {}
        for name, result in results.items():
            match = LIMIT_NAME.fullmatch(name)
            if not match:
                continue
            checkpoint = int(match.group(2) or 0)
            key, counter = LIMIT_KINDS[match.group(1)]
            self.limit_at.setdefault(checkpoint, {})[key] = result.get(counter)
        first = self.limit_at.get(min(self.limit_at)) if self.limit_at else {}
        self.sgemm = first.get("sgemm")
        self.dgemm = first.get("dgemm")
        self.bandwidth = first.get("bandwidth")

    def group_limits(self, checkpoint):
        """(before, after) limits of the group that starts at `checkpoint`: the nearest
        checkpoints measured at or before it and after it (a filtered run may lack some)."""
        before = [c for c in self.limit_at if c <= checkpoint]
        after = [c for c in self.limit_at if c > checkpoint]
        b = self.limit_at[max(before)] if before else None
        a = self.limit_at[min(after)] if after else None
        return b or a or {}, a or b or {}

    def case_limits(self, name):
        """The limits a case is judged by: the mean of those measured just before and just
        after its group; the run's first limits for a case without a checkpoint."""
        r = self.results.get(name)
        checkpoint = r.get("limits_checkpoint") if r else None
        if checkpoint is None:
            return {"sgemm": self.sgemm, "dgemm": self.dgemm, "bandwidth": self.bandwidth}
        before, after = self.group_limits(int(checkpoint))
        out = {}
        for key in ("sgemm", "dgemm", "bandwidth"):
            values = [v for v in (before.get(key), after.get(key)) if v]
            out[key] = sum(values) / len(values) if values else None
        return out

    def moved_groups(self):
        """Checkpoint pairs whose limits moved more than LIMIT_MOVE (any of the three)."""
        moved = []
        for c in sorted(self.limit_at):
            later = [x for x in self.limit_at if x > c]
            if not later:
                continue
            before, after = self.limit_at[c], self.limit_at[min(later)]
            for key in ("sgemm", "dgemm", "bandwidth"):
                b, a = before.get(key), after.get(key)
                if b and a and abs(a - b) / b > LIMIT_MOVE:
                    moved.append((c, min(later), key, b, a))
        return moved

    def counter(self, name, key):
        r = self.results.get(name)
        return r.get(key) if r else None

    def seconds(self, name):
        r = self.results.get(name)
        return r.seconds if r else None

    def compute_limit(self, dtype, name=None):
        """GFLOP/s of the BLIS GEMM the kernels of `dtype` compute with: around case `name`'s
        group when given, else at the start of the run."""
        limits = self.case_limits(name) if name else {"sgemm": self.sgemm, "dgemm": self.dgemm}
        return limits["dgemm"] if dtype == "fp64" else limits["sgemm"]

    def fraction_of_compute(self, name, dtype):
        gflops, limit = self.counter(name, "GFLOPS"), self.compute_limit(dtype, name)
        return gflops / limit if gflops and limit else None

    def memory_floor_seconds(self, name):
        touched = self.counter(name, "bytes_touched")
        bandwidth = self.case_limits(name)["bandwidth"]
        if touched is None or not bandwidth:
            return None
        return touched / (bandwidth * 1e9)

    def time_over_floor(self, name):
        floor, t = self.memory_floor_seconds(name), self.seconds(name)
        return t / floor if floor and t else None

    def roofline_fraction(self, name, dtype):
        """The fastest the limits allow (compute or memory, whichever binds) / measured."""
        t = self.seconds(name)
        gflops, limit = self.counter(name, "GFLOPS"), self.compute_limit(dtype, name)
        if not t or not gflops or not limit:
            return None
        compute_floor = (gflops * t) / limit  # flops / limit rate
        floor = max(compute_floor, self.memory_floor_seconds(name) or 0.0)
        return floor / t

    def speedup(self, baseline, candidate):
        tb, tc = self.seconds(baseline), self.seconds(candidate)
        return tb / tc if tb and tc else None

    # --- sections -----------------------------------------------------------

    def machine(self):
        c = self.context
        caches = ", ".join(
            f"L{x.get('level')} {x.get('type', '')} {x.get('size', 0) // 1024} KiB"
            + (f" (shared by {x['num_sharing']})" if x.get("num_sharing", 1) > 1 else "")
            for x in c.get("caches", []))
        rows = [
            ("date", c.get("date", "?")),
            ("host", c.get("host_name", "?")),
            ("CPU", c.get("cpu_model", "?")),
            ("SIMD features", c.get("cpu_simd", "?") or "none of note"),
            ("BLIS sub-configuration", c.get("blis_config", "?")),
            ("OpenMP wait policy", c.get("omp_wait_policy", "?")),
            ("read-bandwidth kernel", c.get("read_bandwidth_kernel", "?")),
            ("CPUs / MHz", f"{c.get('num_cpus', '?')} / {c.get('mhz_per_cpu', '?')}"),
            ("caches", caches or "?"),
            ("load average at start", ", ".join(fmt(x, 2) for x in c.get("load_avg", [])) or "?"),
            ("kernel threads (--threads)", c.get("threads", "?")),
            ("Google Benchmark library build", c.get("library_build_type", "?")),
            ("command", f"`{c.get('command_line', '?')}`"),
        ]
        return table(["", ""], rows)

    def limits(self):
        rows = [
            ("Limit/sgemm/2048", "one BLIS sgemm, n = 2048", f"{fmt(self.sgemm)} GFLOP/s"),
            ("Limit/dgemm/2048", "one BLIS dgemm, n = 2048", f"{fmt(self.dgemm)} GFLOP/s"),
            ("Limit/read_bandwidth", "streaming sum over 1 GiB", f"{fmt(self.bandwidth)} GB/s"),
        ]
        text = table(["case", "what", "median"], rows)
        if len(self.limit_at) > 1:
            text += (f"\n\nThe limits were measured again after each group of cases "
                     f"({len(self.limit_at)} checkpoints); every case is judged against the mean "
                     "of the limits just before and just after its group.")
            moved = self.moved_groups()
            if moved:
                text += (f" **{len(moved)} limit(s) moved more than {LIMIT_MOVE:.0%} across a "
                         "group** (rerun those groups before trusting their ratios):\n\n")
                text += table(["checkpoints", "limit", "before", "after"],
                              [(f"{b} → {a}", key, fmt(vb), fmt(va))
                               for b, a, key, vb, va in moved])
            else:
                text += f" No limit moved more than {LIMIT_MOVE:.0%} across any group."
        return text

    def targets(self):
        rows = []
        failures = []

        def verdict(value, ok):
            if value is None:
                return "NOT MEASURED"
            return "PASS" if ok(value) else "**FAIL**"

        f = self.fraction_of_compute(grouped_name("fused", "fp32", "olmoe", 1024), "fp32")
        rows.append(("FP32 GroupedMatMul, olmoe M = 1024 (128 rows per group), vs one sgemm",
                     fmt(f), "≥ 0.90", verdict(f, lambda v: v >= 0.90)))
        for dtype in GROUPED_TYPES:
            r = self.time_over_floor(grouped_name("fused", dtype, "olmoe", 1))
            rows.append((f"Decode {dtype.upper()}, olmoe M = 1 (8 experts): time / "
                         "(experts' bytes / read bandwidth)", fmt(r), "≤ 1.2",
                         verdict(r, lambda v: v <= 1.2)))
        s = self.speedup(grouped_name("fused", "fp32", "olmoe", 1),
                         grouped_name("fused", "bf16", "olmoe", 1))
        rows.append(("BF16 decode speed-up over FP32 decode, olmoe M = 1", fmt_ratio(s), "≥ 1.8×",
                     verdict(s, lambda v: v >= 1.8)))
        for m in (1024, 4096):
            s = self.speedup(grouped_name("fused", "fp32", "olmoe", m),
                             grouped_name("fused", "bf16", "olmoe", m))
            rows.append((f"BF16 compute-bound vs FP32, olmoe M = {m} (speed-up)", fmt_ratio(s),
                         "≥ 1.0×", verdict(s, lambda v: v >= 1.0)))
        for dtype in INTEGER_TYPES:
            s = self.speedup(f"MatMul/naive/{dtype}/512", f"MatMul/fused/{dtype}/512")
            rows.append((f"{dtype.upper()} MatMul n = 512 vs the naive loop", fmt_ratio(s),
                         "≥ 10×", verdict(s, lambda v: v >= 10)))

        # Every GroupedMatMul case: >= 3x per_group_loop or within 10 % of its
        # roofline; and faster than onnx_decomposition wherever that ran.
        loop_ok = loop_total = onnx_ok = onnx_total = 0
        for name in sorted(self.results):
            match = re.fullmatch(r"GroupedMatMul/fused/(\w+)/([\w-]+)/(\d+)", name)
            if not match:
                continue
            dtype, shape, m = match.groups()
            baseline = f"GroupedMatMul/per_group_loop/{dtype}/{shape}/{m}"
            s = self.speedup(baseline, name)
            roof = self.roofline_fraction(name, dtype)
            if s is not None:
                loop_total += 1
                if s >= 3 or (roof is not None and roof >= 0.9):
                    loop_ok += 1
                else:
                    failures.append((f"`{name}`", "per_group_loop", fmt_ratio(s), fmt(roof)))
            onnx = self.speedup(f"GroupedMatMul/onnx_decomposition/{dtype}/{shape}/{m}", name)
            if onnx is not None:
                onnx_total += 1
                if onnx > 1:
                    onnx_ok += 1
                else:
                    failures.append((f"`{name}`", "onnx_decomposition", fmt_ratio(onnx),
                                     fmt(roof)))
        rows.append(("Every GroupedMatMul case ≥ 3× per_group_loop, or ≥ 0.90 of its roofline",
                     f"{loop_ok} of {loop_total}", "all",
                     "NOT MEASURED" if loop_total == 0 else
                     ("PASS" if loop_ok == loop_total else "**FAIL**")))
        rows.append(("Every GroupedMatMul case faster than onnx_decomposition (where it ran)",
                     f"{onnx_ok} of {onnx_total}", "all",
                     "NOT MEASURED" if onnx_total == 0 else
                     ("PASS" if onnx_ok == onnx_total else "**FAIL**")))
        text = table(["target", "measured", "required", "result"], rows)
        if failures:
            text += ("\n\nCases that miss the last two targets (speed-up of fused over the "
                     "baseline; roofline fraction = the time the limits allow / measured):\n\n")
            text += table(["case", "baseline", "speed-up", "roofline fraction"], failures)
        return text

    def serving_targets(self):
        """Issue 15's targets, judged on the `resident` cases (weights packed once at load)."""
        rows = []

        def verdict(value, ok):
            if value is None:
                return "NOT MEASURED"
            return "PASS" if ok(value) else "**FAIL**"

        for shape in ("olmoe", "mixtral-small", "deepseek-lite"):
            for dtype in ("fp32", "bf16"):
                for m in (64, 256):
                    name = grouped_name("resident", dtype, shape, m)
                    r = self.roofline_fraction(name, dtype)
                    rows.append((f"{dtype.upper()} {shape} M = {m}: roofline fraction "
                                 "(max(flops / sgemm, bytes / bandwidth) / time)", fmt(r),
                                 "≥ 0.75", verdict(r, lambda v: v >= 0.75)))
        s = self.speedup(grouped_name("resident", "fp32", "olmoe", 4096),
                         grouped_name("resident", "bf16", "olmoe", 4096))
        rows.append(("BF16 vs FP32, resident olmoe M = 4096 (AVX512-BF16)", fmt_ratio(s),
                     "≥ 1.5×", verdict(s, lambda v: v >= 1.5)))
        f = self.fraction_of_compute(grouped_name("resident", "fp32", "olmoe", 1024), "fp32")
        rows.append(("FP32 resident olmoe M = 1024 vs one sgemm", fmt(f), "≥ 0.90",
                     verdict(f, lambda v: v >= 0.90)))
        for dtype in GROUPED_TYPES:
            r = self.time_over_floor(grouped_name("resident", dtype, "olmoe", 1))
            rows.append((f"Decode {dtype.upper()} resident, olmoe M = 1: time / memory floor",
                         fmt(r), "≤ 1.2", verdict(r, lambda v: v <= 1.2)))
        slower, compared = [], 0
        for name in sorted(self.results):
            match = re.fullmatch(r"GroupedMatMul/resident/(\w+)/([\w-]+)/(\d+)", name)
            if not match:
                continue
            dtype, shape, m = match.groups()
            ratio = self.speedup(grouped_name("fused", dtype, shape, int(m)), name)
            if ratio is None:
                continue
            compared += 1
            if ratio < 0.9:
                slower.append((f"`{name}`", fmt_ratio(ratio)))
        rows.append(("Resident no more than 10% slower than fused, every case",
                     f"{compared - len(slower)} of {compared}", "all",
                     "NOT MEASURED" if compared == 0 else
                     ("PASS" if not slower else "**FAIL**")))
        text = table(["target", "measured", "required", "result"], rows)
        if slower:
            text += "\n\nResident cases more than 10% slower than fused (fused time / resident time):\n\n"
            text += table(["case", "speed-up"], slower)
        return text

    def resident_tables(self):
        rows = []
        for shape in SHAPES:
            for dtype in GROUPED_TYPES:
                cells = []
                for m in TOKEN_COUNTS:
                    cells.append(fmt_ratio(self.speedup(grouped_name("fused", dtype, shape, m),
                                                        grouped_name("resident", dtype, shape, m))))
                if any(c != fmt_ratio(None) for c in cells):
                    rows.append((shape, dtype.upper(), *cells))
        return table(["shape", "type", *[f"M = {m}" for m in TOKEN_COUNTS]], rows)

    def onednn_table(self):
        """oneDNN's matmul on the same resident experts (weights reordered once, experts one
        after another) against ours: oneDNN time / resident time, where the run has it."""
        rows = []
        for shape in SHAPES:
            for dtype in ("fp32", "bf16"):
                cells = [fmt_ratio(self.speedup(grouped_name("onednn", dtype, shape, m),
                                                grouped_name("resident", dtype, shape, m)))
                         for m in TOKEN_COUNTS]
                if any(c != fmt_ratio(None) for c in cells):
                    rows.append((shape, dtype.upper(), *cells))
        if not rows:
            return ""
        return ("oneDNN on the same resident experts (`GroupedMatMul/onednn/...`: weights "
                "reordered once into oneDNN's own layout, its matmul primitives made at set-up, "
                "experts one after another on all threads), as oneDNN time / resident time "
                "(above 1: ours is faster):\n\n" +
                table(["shape", "type", *[f"M = {m}" for m in TOKEN_COUNTS]], rows) + "\n")

    def grouped_tables(self):
        out = []
        for shape, (k, n, g, s) in SHAPES.items():
            rows = []
            for dtype in GROUPED_TYPES:
                for m in TOKEN_COUNTS:
                    name = grouped_name("fused", dtype, shape, m)
                    onnx_name = grouped_name("onnx_decomposition", dtype, shape, m)
                    if name not in self.results and onnx_name not in self.errors:
                        continue
                    onnx = self.speedup(onnx_name, name)
                    onnx_text = fmt_ratio(onnx)
                    if onnx is None and onnx_name in self.errors:
                        onnx_text = ("not run (> 4 GiB)" if "not run" in self.errors[onnx_name]
                                     else "error")
                    vs_fp32 = (fmt_ratio(self.speedup(grouped_name("fused", "fp32", shape, m),
                                                      name))
                               if dtype in ("fp16", "bf16") else "")
                    rows.append((
                        dtype, m, fmt_ms(self.seconds(name)), fmt(self.counter(name, "GFLOPS")),
                        fmt(self.fraction_of_compute(name, dtype)),
                        fmt(self.time_over_floor(name)) if m <= DECODE_MAX_TOKENS else "",
                        fmt_ratio(self.speedup(grouped_name("per_group_loop", dtype, shape, m),
                                               name)),
                        onnx_text, vs_fp32))
            if not rows:
                continue
            out.append(f"### {shape} (K = {k}, N = {n}, G = {g}, S = {s})\n")
            out.append(table(["dtype", "M", "fused ms", "GFLOP/s", "of GEMM limit",
                              "time / memory floor", "vs per_group_loop", "vs onnx_decomposition",
                              "vs FP32 fused"], rows))
            out.append("")
        skew_rows = []
        for shape in SHAPES:
            for m in TOKEN_COUNTS:
                name = grouped_name("fused", "fp32", shape, m, skewed=True)
                if name not in self.results:
                    continue
                uniform = grouped_name("fused", "fp32", shape, m)
                skew_rows.append((
                    shape, m, fmt_ms(self.seconds(name)), fmt(self.counter(name, "GFLOPS")),
                    fmt(self.fraction_of_compute(name, "fp32")),
                    fmt(self.time_over_floor(name)) if m <= DECODE_MAX_TOKENS else "",
                    fmt_ratio(self.speedup(uniform, name)),
                    fmt_ratio(self.speedup(grouped_name("per_group_loop", "fp32", shape, m,
                                                        skewed=True), name))))
        if skew_rows:
            out.append("### Skewed routing, FP32 (every even token sends slot 0 to expert 0)\n")
            out.append(table(["shape", "M", "fused ms", "GFLOP/s", "of sgemm",
                              "time / memory floor", "speed vs uniform routing",
                              "vs per_group_loop"], skew_rows))
            out.append("")
        return "\n".join(out) if out else "No GroupedMatMul case in this run."

    def matmul_tables(self):
        rows = []
        for dtype in MATMUL_TYPES:
            for n in (64, 256, 512, 1024, 2048):
                name = f"MatMul/fused/{dtype}/{n}"
                naive = f"MatMul/naive/{dtype}/{n}"
                if name not in self.results and naive not in self.results:
                    continue
                limit = self.fraction_of_compute(name, dtype) if dtype in GROUPED_TYPES else None
                rows.append((dtype, n, fmt_ms(self.seconds(name)),
                             fmt(self.counter(name, "GFLOPS")), fmt(limit),
                             fmt_ms(self.seconds(naive)), fmt(self.counter(naive, "GFLOPS")),
                             fmt_ratio(self.speedup(naive, name))))
        out = []
        if rows:
            out.append(table(["dtype", "n", "fused ms", "GFLOP/s", "of GEMM limit", "naive ms",
                              "naive GFLOP/s", "vs naive"], rows))
        batch_rows = []
        for name in sorted(self.results):
            match = re.fullmatch(r"MatMul/fused/fp32/((folded|batched)-\d+x\d+x\d+x\d+)", name)
            if match:
                batch_rows.append((f"`{match.group(1)}`", fmt_ms(self.seconds(name)),
                                   fmt(self.counter(name, "GFLOPS")),
                                   fmt(self.fraction_of_compute(name, "fp32"))))
        if batch_rows:
            out.append("\nBatched FP32 MatMul: `folded-BxMxKxN` is [B,M,K]×[K,N] (one GEMM of "
                       "B·M rows), `batched-BxMxKxN` is [B,M,K]×[B,K,N] (B GEMMs).\n")
            out.append(table(["case", "ms", "GFLOP/s", "of sgemm"], batch_rows))
        return "\n".join(out) if out else "No MatMul case in this run."

    def skipped(self):
        if not self.errors:
            return ""
        not_run = sorted(n for n, e in self.errors.items() if e.startswith("not run"))
        wrong = sorted((n, e) for n, e in self.errors.items() if not e.startswith("not run"))
        lines = []
        if not_run:
            smallest = {}  # (shape, dtype) -> smallest M not run
            for n in not_run:
                match = re.fullmatch(r"GroupedMatMul/onnx_decomposition/(\w+)/([\w-]+)/(\d+)", n)
                if match:
                    key = (match.group(2), match.group(1))
                    smallest[key] = min(smallest.get(key, 1 << 62), int(match.group(3)))
            lines.append(f"{len(not_run)} onnx_decomposition cases were not run (\"not run\" in "
                         "the tables), because their materialised [M·S, K, N] weights would "
                         "exceed 4 GiB: "
                         + "; ".join(f"{shape} {dtype} from M = {m}"
                                     for (shape, dtype), m in sorted(smallest.items()))
                         + ".")
        if wrong:
            lines.append("\n**Cases that failed** (a failed result check skips the case):\n")
            lines += [f"- `{n}`: {e}" for n, e in wrong]
        return "\n".join(lines)


# --- plot -------------------------------------------------------------------

def plot(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")

    colors = {"fp32": "tab:blue", "fp64": "tab:purple", "fp16": "tab:orange", "bf16": "tab:green"}
    fig, axes = plt.subplots(2, 2, figsize=(13, 9.5))
    panels = list(axes.flat)
    for ax, (shape, (k, n, g, s)) in zip(panels, SHAPES.items()):
        def series(impl, dtype, skewed=False):
            xs, ys = [], []
            for m in TOKEN_COUNTS:
                v = report.counter(grouped_name(impl, dtype, shape, m, skewed), "GFLOPS")
                if v:
                    xs.append(m)
                    ys.append(v)
            return xs, ys

        for dtype in GROUPED_TYPES:
            xs, ys = series("fused", dtype)
            if xs:
                ax.plot(xs, ys, "o-", color=colors[dtype], label=f"fused {dtype}")
        for impl, style, label in (("per_group_loop", "s--", "per_group_loop fp32"),
                                   ("onnx_decomposition", "x:", "onnx_decomposition fp32")):
            xs, ys = series(impl, "fp32")
            if xs:
                ax.plot(xs, ys, style, color="tab:gray", label=label)
        xs, ys = series("fused", "fp32", skewed=True)
        if xs:
            ax.plot(xs, ys, "^-.", color="tab:cyan", label="fused fp32, skewed routing")
        if report.sgemm:
            ax.axhline(report.sgemm, color="black", lw=1.2, label="sgemm limit")
        if report.dgemm:
            ax.axhline(report.dgemm, color="black", lw=1, ls="--", label="dgemm limit")
        # FP32 roofline: the sgemm limit, or what the read bandwidth allows for
        # the bytes of the experts each case touches.
        if report.bandwidth:
            xs, ys = [], []
            for m in TOKEN_COUNTS:
                touched = report.counter(grouped_name("fused", "fp32", shape, m), "bytes_touched")
                if touched:
                    mem_bound = 2.0 * m * s * k * n / (touched / (report.bandwidth * 1e9)) / 1e9
                    xs.append(m)
                    ys.append(min(mem_bound, report.sgemm or mem_bound))
            if xs:
                ax.plot(xs, ys, color="black", lw=3, alpha=0.15, label="fp32 roofline")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(TOKEN_COUNTS)
        ax.xaxis.set_major_formatter(plain)
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("tokens M")
        ax.set_ylabel("GFLOP/s")
        ax.set_title(f"GroupedMatMul {shape} (K={k}, N={n}, G={g}, S={s})")
        ax.grid(True, which="both", alpha=0.3)

    ax = panels[3]
    matmul_colors = dict(colors, int32="tab:red", int64="tab:brown", uint32="tab:pink",
                         uint64="tab:olive")
    for dtype in MATMUL_TYPES:
        for impl, style in (("fused", "o-"), ("naive", "x:")):
            xs, ys = [], []
            for size in (64, 256, 512, 1024, 2048):
                v = report.counter(f"MatMul/{impl}/{dtype}/{size}", "GFLOPS")
                if v:
                    xs.append(size)
                    ys.append(v)
            if xs:
                ax.plot(xs, ys, style, color=matmul_colors[dtype],
                        label=f"{impl} {dtype}" if impl == "fused" else None)
    if report.sgemm:
        ax.axhline(report.sgemm, color="black", lw=1.2, label="sgemm limit")
    ax.plot([], [], "x:", color="tab:gray", label="naive (dotted)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([64, 256, 512, 1024, 2048])
    ax.xaxis.set_major_formatter(plain)
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("n (square MatMul)")
    ax.set_ylabel("GFLOP/s (integer: GOP/s)")
    ax.set_title("MatMul, square n")
    ax.grid(True, which="both", alpha=0.3)

    for ax in panels:
        if ax.get_legend_handles_labels()[0]:
            # Grouped panels rise to the right: their lower right is empty.
            ax.legend(fontsize=7, loc="best" if ax is panels[3] else "lower right",
                      ncol=2 if ax is panels[3] else 1)
    threads = report.context.get("threads", "?")
    fig.suptitle(f"gemmserve-bench medians, {threads} threads, "
                 f"{report.context.get('cpu_model', '')}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- main -------------------------------------------------------------------

def render(report, run_path, png_name, note):
    reps = sorted({r.repetitions for r in report.results.values()})
    parts = [
        "# gemmserve performance",
        "",
        "Generated by `scripts/performance_report.py` from one `gemmserve-bench` run: every "
        "figure is a median over the run's repetitions "
        f"({'/'.join(str(r) for r in reps) or '?'} per case), and every ratio compares cases "
        "measured side by side in that run (shared/BENCHMARKS.md: the machines are shared and "
        "noisy, absolute times from another run do not compare).",
        "",
    ]
    if note:
        parts += [f"> **Note.** {note}", ""]
    parts += [
        "Reproduce (about 10 minutes per repetition on 2 cores):",
        "",
        "```sh",
        REPRODUCE,
        "```",
        "",
        "## Machine",
        "",
        report.machine(),
        "",
        "## Limits (same run, same threads)",
        "",
        report.limits(),
        "",
        "## Targets",
        "",
        report.targets(),
        "",
        f"![GFLOP/s against M, per shape, and MatMul against n]({png_name})",
        "",
        "## Serving regime: resident weights packed at load",
        "",
        "`GroupedMatMul/resident/...` runs the same cases on weights packed once into the "
        "panels of the micro-kernels, as a resident model holds them (FP32/FP64 on BLIS's "
        "micro-kernel, BF16 on pair panels for `vdpbf16ps`, FP16 on panels of halves widened "
        "in registers); only the gathered token rows are packed per call. Roofline fractions "
        "use the limits of each case's group, compute against sgemm for every type.",
        "",
        report.serving_targets(),
        "",
        "Speed-up of resident over fused, per case (fused time / resident time):",
        "",
        report.resident_tables(),
        "",
        report.onednn_table(),
        "## GroupedMatMul",
        "",
        "Input [M, K], weights [G, K, N], group_indices [M, S] (uniform random top-S without "
        "repeats, fixed seed). Columns: median time of the fused kernel (`RunGroupedMatMul`) per "
        "call; its GFLOP/s (2·M·S·K·N per call); that as a fraction of the GEMM limit (FP64 "
        "against dgemm, the others against sgemm); for decode sizes (M ≤ "
        f"{DECODE_MAX_TOKENS}) its time over the memory floor, the bytes of the distinct experts "
        "it touches divided by the read bandwidth (these cases evict those experts from the "
        "caches before every call, as the other layers of a model would between two tokens); "
        "its speed-up over the per-group loop and over the ONNX decomposition (materialised "
        "Gather, one m = 1 GEMM per pair) of the same case; and for the half types the speed-up "
        "over the FP32 fused kernel of the same case.",
        "",
        report.grouped_tables(),
        "",
        report.skipped(),
        "",
        "## MatMul",
        "",
        "Square n×n MatMul through `RunMatMul` (fused) against the naive i-j-k loop "
        "(`ReferenceGemm`, single-threaded; floating types accumulate in double), which is what "
        "numpy runs for the integer types. For integers GFLOP/s counts integer operations.",
        "",
        report.matmul_tables(),
        "",
        "## How the cases are measured",
        "",
        "- Every kernel call, the limits' included, gets the same `--threads` (default: the "
        "physical cores the process may run on); the naive loop is single-threaded. The "
        "benchmark starts the way the server does (`ReexecWithComputeEnvironment`: OpenMP "
        "passive waits, BLIS's AVX-512 kernels on Intel CPUs that have them), so kernels and "
        "limits run as in the server.",
        "- Inputs are made once per case, outside the timed loop. Before a case is timed the "
        "first time, its output is poisoned, computed once and sampled rows (tokens 0, 1, M/2, "
        "M−1, every slot) are checked against a double-precision reference; a wrong result "
        "makes the case an error, listed above, instead of a time.",
        "- `per_group_loop` allocates its scratch per call, like the fused kernel; "
        "`onnx_decomposition` keeps its [M·S, K, N] scratch between calls (an arena "
        "allocator's best case) and is not run where that would exceed 4 GiB.",
        "- Times are wall-clock; rates (GFLOP/s, GB/s) are per wall-clock second of the timed "
        "calls.",
        "",
        f"Source: `{os.path.basename(run_path)}`.",
        "",
    ]
    return "\n".join(parts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="gemmserve-bench --benchmark_out JSON file")
    parser.add_argument("--markdown", default=os.path.join(REPO, "docs", "performance.md"))
    parser.add_argument("--plot", default=os.path.join(REPO, "docs", "performance.png"))
    parser.add_argument("--note", default="", help="a paragraph to put at the top of the report")
    args = parser.parse_args(argv)

    context, results, errors = load_run(args.run)
    if not results and not errors:
        sys.exit(f"{args.run}: no benchmark results")
    report = Report(context, results, errors)
    plot(report, args.plot)
    markdown = render(report, args.run,
                      os.path.relpath(args.plot, os.path.dirname(os.path.abspath(args.markdown))),
                      args.note)
    # Keep the sections that are not made from the run (KEPT_SECTIONS).
    if os.path.exists(args.markdown):
        old = open(args.markdown).read()
        for section in KEPT_SECTIONS:
            begin, end = f"<!-- {section}:begin -->", f"<!-- {section}:end -->"
            if begin in old and end in old:
                markdown = (markdown.rstrip("\n") + "\n\n" +
                            old[old.index(begin):old.index(end) + len(end)] + "\n")
    with open(args.markdown, "w") as f:
        f.write(markdown)
    print(f"wrote {args.markdown} and {args.plot}")


if __name__ == "__main__":
    main()
