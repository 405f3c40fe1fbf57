#!/usr/bin/python3
"""The end of tests/run.sh: each stage's wall time, and the slowest tests of every ctest
run, so that growth is seen when it happens (docs/testing.md).

    tests/gate_summary.py GATE_DIR [--slowest N]

GATE_DIR holds stages.tsv (a line per stage: name, seconds, outcome; an outcome starting
"background" ran beside the others and is left out of the total) and the JUnit files that
`ctest --output-junit` wrote there (ctest-<stage>.xml).
"""
import argparse
import glob
import os
import sys
import xml.etree.ElementTree as ElementTree


def minutes(seconds):
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}"


def read_stages(gate_dir):
    stages = []
    path = os.path.join(gate_dir, "stages.tsv")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                name, seconds, outcome = line.rstrip("\n").split("\t")
                stages.append((name, float(seconds), outcome))
    return stages


def read_tests(gate_dir):
    """(seconds, test, stage, status) of every test in the stages' JUnit files."""
    tests = []
    for path in sorted(glob.glob(os.path.join(gate_dir, "ctest-*.xml"))):
        stage = os.path.basename(path)[len("ctest-"):-len(".xml")]
        try:
            root = ElementTree.parse(path).getroot()
        except ElementTree.ParseError as e:
            print(f"gate: {path}: {e}", file=sys.stderr)
            continue
        for case in root.iter("testcase"):
            status = case.get("status", "run")
            tests.append((float(case.get("time", 0)), case.get("name"), stage, status))
    return tests


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gate_dir")
    parser.add_argument("--slowest", type=int, default=10)
    args = parser.parse_args()

    stages = read_stages(args.gate_dir)
    # A background stage overlapped others: its time is not added to the total.
    total = sum(seconds for _, seconds, outcome in stages if not outcome.startswith("background"))
    print("\ngate: stage times")
    print(f"  {'stage':<24} {'time':>7}  outcome")
    for name, seconds, outcome in stages:
        print(f"  {name:<24} {minutes(seconds):>7}  {outcome}")
    print(f"  {'total':<24} {minutes(total):>7}")

    tests = sorted(read_tests(args.gate_dir), reverse=True)
    if tests:
        print(f"\ngate: the {min(args.slowest, len(tests))} slowest tests")
        print(f"  {'seconds':>8}  {'stage':<10} test")
        for seconds, name, stage, status in tests[:args.slowest]:
            note = "" if status in ("run", "passed") else f"  ({status})"
            print(f"  {seconds:8.1f}  {stage:<10} {name}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
