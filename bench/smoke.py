#!/usr/bin/python3
"""bench_smoke (CMakeLists.txt): one small case of every benchmark family of a
Google Benchmark binary, each checked before it is timed (the binary exits non-zero
when a check fails or a case cannot run), and a failure when a family has no case in
the filter: a family added later is not left out silently.

    bench/smoke.py BINARY FILTER [BINARY ARGUMENT...]

A family is a name's first two parts (GroupedMatMul/resident_int8, MoeLayer/fused,
Limit/sgemm); FILTER is a --benchmark_filter regex.
"""
import json
import os
import re
import subprocess
import sys
import tempfile


def family(name):
    return "/".join(name.split("/")[:2])


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    binary, pattern, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    listed = subprocess.run([binary, *extra, "--benchmark_list_tests"], check=True,
                            capture_output=True, text=True).stdout.split()
    families = sorted({family(n) for n in listed})
    chosen = {family(n) for n in listed if re.search(pattern, n)}
    missing = [f for f in families if f not in chosen]
    if missing:
        print(f"smoke: no case of {', '.join(missing)} matches {pattern}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "run.json")
        run = subprocess.run([binary, *extra, "--benchmark_min_time=0.01",
                              f"--benchmark_filter={pattern}", f"--benchmark_out={out}",
                              "--benchmark_out_format=json"])
        if run.returncode != 0:
            print(f"smoke: {binary} exited {run.returncode}", file=sys.stderr)
            return 1
        with open(out) as f:
            runs = json.load(f)["benchmarks"]
    ran = {family(r["name"]) for r in runs if not r.get("error_occurred")}
    failed = [r["name"] for r in runs if r.get("error_occurred")]
    not_run = [f for f in families if f not in ran]
    if failed or not_run:
        print(f"smoke: failed {failed}; no case ran of {not_run}", file=sys.stderr)
        return 1
    print(f"smoke: {len(runs)} cases ran, every one of the {len(families)} families: "
          + ", ".join(families))
    return 0


if __name__ == "__main__":
    sys.exit(main())
