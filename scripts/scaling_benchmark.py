#!/usr/bin/python3
"""Thread scaling: compute-bound cases on 1 and on 2 compute threads.

    scripts/scaling_benchmark.py --build build [--rounds 3]

Runs gemmserve-bench on the compute-bound cases below with --threads=1 and
--threads=2, one after the other in each round (the order alternating from
round to round, so a slow stretch of a shared machine hits both), and reports
for each case the median over rounds of time(1 thread) / time(2 threads),
measured side by side in one round. --threads is the budget the server's
--compute_threads sets for every kernel call, BLIS's threads included.

Target (issue 15): at least 1.8x on the compute-bound resident
GroupedMatMul cases. BLIS's own sgemm on the same threads is measured in the
same rounds, as the limit: what the machine's two cores give at all.

Writes the results as JSON (--json) and as the "Thread scaling" section of
docs/performance.md (between the thread-scaling markers).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import doc_sections  # noqa: E402

ROOT = os.path.dirname(HERE)
SECTION = "thread-scaling"
BEGIN, END = doc_sections.markers(SECTION)

LIMIT = "Limit/sgemm/2048"
CASES = (
    "GroupedMatMul/resident/fp32/olmoe/4096",
    "GroupedMatMul/resident/bf16/olmoe/4096",
    "GroupedMatMul/resident/fp32/mixtral-small/1024",
    "GroupedMatMul/resident/bf16/mixtral-small/1024",
    "GroupedMatMul/fused/bf16/olmoe/4096",
    "MatMul/fused/fp32/2048",
)
TARGET = 1.8  # time on 1 thread / time on 2, resident GroupedMatMul cases


def seconds_by_case(bench_json):
    """Wall-clock seconds per call of each case in a gemmserve-bench JSON run
    (the first entry of a name: the limit's later checkpoints are not used)."""
    units = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    out = {}
    for b in bench_json["benchmarks"]:
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        name = b.get("run_name", b["name"])
        if name not in out:
            out[name] = b["real_time"] * units[b.get("time_unit", "ns")]
    return out


def summarise(rounds, cases):
    """rounds: [{1: {case: s}, 2: {case: s}}, ...] -> rows of medians."""
    rows = []
    for case in cases:
        pairs = [(r[1][case], r[2][case]) for r in rounds if case in r[1] and case in r[2]]
        if not pairs:
            continue
        rows.append({"case": case,
                     "one_ms": statistics.median(p[0] for p in pairs) * 1e3,
                     "two_ms": statistics.median(p[1] for p in pairs) * 1e3,
                     "speedup": statistics.median(p[0] / p[1] for p in pairs),
                     "rounds": len(pairs)})
    return rows


def judged(row):
    return row["case"].startswith("GroupedMatMul/resident/")


def render(results):
    lines = [BEGIN, "## Thread scaling", "",
             f"Measured {results['date']}: {results['cpu']}, {results['rounds']} rounds, "
             "each running `gemmserve-bench` with `--threads=1` and `--threads=2` one after the "
             "other (order alternating). Speed-up: the median over rounds of the two times of "
             "one round, so both sides of a ratio saw the same machine.", "",
             "| case | 1 thread | 2 threads | speed-up | target |",
             "|---|---:|---:|---:|---|"]
    for row in results["rows"]:
        target = (f">= {TARGET}x: {'PASS' if row['speedup'] >= TARGET else '**FAIL**'}"
                  if judged(row) else ("the limit" if row["case"] == LIMIT else ""))
        lines.append(f"| {row['case']} | {row['one_ms']:.2f} ms | {row['two_ms']:.2f} ms | "
                     f"{row['speedup']:.2f}x | {target} |")
    lines += ["", "Reproduce: `scripts/scaling_benchmark.py --build build` "
              "(about a minute).", ""]
    return doc_sections.finish(lines, SECTION, results.get("note"))


cpu_model = doc_sections.cpu_model


def run_bench(bench, threads, cases, min_time):
    pattern = "^(" + "|".join((LIMIT,) + cases) + ")$"
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    try:
        subprocess.run([bench, f"--threads={threads}", f"--benchmark_min_time={min_time}",
                        f"--benchmark_filter={pattern}", f"--benchmark_out={out}",
                        "--benchmark_out_format=json"], check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            return seconds_by_case(json.load(f))
    finally:
        os.unlink(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min_time", type=float, default=0.5)
    doc_sections.add_arguments(parser, ROOT)
    args = parser.parse_args()
    if doc_sections.rerender(args, SECTION, render):
        return 0
    bench = os.path.join(args.build, "bin", "gemmserve-bench")
    rounds = []
    for r in range(args.rounds):
        order = (1, 2) if r % 2 == 0 else (2, 1)
        rounds.append({t: run_bench(bench, t, CASES, args.min_time) for t in order})
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu_model(),
               "rounds": args.rounds, "rows": summarise(rounds, (LIMIT,) + CASES),
               "raw": [{str(t): v for t, v in r.items()} for r in rounds], "note": args.note}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    doc_sections.write_section(args.doc, SECTION, render(results))
    for row in results["rows"]:
        print(f"{row['case']}: {row['speedup']:.2f}x ({row['one_ms']:.2f} / {row['two_ms']:.2f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
