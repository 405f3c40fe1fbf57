#!/usr/bin/python3
"""Two gemmserve-bench builds side by side: for a refactor that must change no
speed, the median over alternating runs of each case, and the ratio of the
medians (new / old), with the median, least and largest ratio of all cases.
Runs alternate (old, new, new, old, ...) so the machine's drift falls on both.

  git worktree add /tmp/old <commit> && (cd /tmp/old && cmake -S . -B build \
      -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 --target gemmserve-bench)
  /usr/bin/python3 scripts/bench_side_by_side.py /tmp/old/build/bin/gemmserve-bench \
      build/bin/gemmserve-bench '^GroupedMatMul/fused/(fp32|bf16)/olmoe/(1|4|64)$' --runs 3
"""
import argparse
import json
import statistics
import subprocess


def run(binary, case_filter, threads):
    out = subprocess.run([binary, f"--threads={threads}", "--benchmark_min_time=0.2",
                          f"--benchmark_filter={case_filter}", "--benchmark_format=json"],
                         capture_output=True, text=True, check=True)
    return {b["name"]: b["real_time"] for b in json.loads(out.stdout)["benchmarks"]
            if b.get("run_type") != "aggregate" and not b["name"].startswith("Limit")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("filter")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    times = {"old": {}, "new": {}}
    for r in range(args.runs):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for tag in order:
            for name, t in run(getattr(args, tag), args.filter, args.threads).items():
                times[tag].setdefault(name, []).append(t)
    ratios = []
    for name in sorted(set(times["old"]) & set(times["new"])):
        ratio = statistics.median(times["new"][name]) / statistics.median(times["old"][name])
        ratios.append(ratio)
        print(f"{name:60s} new/old {ratio:5.2f}")
    if ratios:
        print(f"median {statistics.median(ratios):.3f}, least {min(ratios):.3f}, "
              f"largest {max(ratios):.3f}, over {len(ratios)} cases")


if __name__ == "__main__":
    main()
