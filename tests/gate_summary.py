#!/usr/bin/python3
"""The end of tests/run.sh: each stage's wall time, and the slowest tests of every ctest
run, so that growth is seen when it happens (docs/testing.md).

    tests/gate_summary.py GATE_DIR [--slowest N]

GATE_DIR holds stages.tsv (a line per stage: name, seconds, outcome; an outcome starting
"background" ran beside the others and is left out of the total) and the JUnit files that
`ctest --output-junit` wrote there (ctest-<stage>.xml). Every skipped test is listed with
its reason, read from those files' captured output: googletest's "[  SKIPPED ]" and the
line each Python test prints when it skips (tests/python_lib/gemmserve_testing).
"""
import argparse
import glob
import os
import re
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


# A test's id, or "setUpClass (module.Class)" for a class skipped whole.
PYTHON_SKIP = re.compile(r"^gemmserve-test: skipped (.+?): (.*)$")
GTEST_RUN = re.compile(r"^\[ RUN      \] (\S+)")
GTEST_SKIPPED = re.compile(r"^\[  SKIPPED \] (\S+\.\S+)")


def skips_in_output(text):
    """(test, reason) of every test the output of one ctest test says it skipped."""
    skips, reason, collecting = {}, [], False
    for line in text.splitlines():
        if m := PYTHON_SKIP.match(line):
            skips.setdefault(m.group(1), m.group(2))
        elif GTEST_RUN.match(line):
            reason, collecting = [], False
        elif line.endswith(": Skipped"):
            collecting = True
        elif m := GTEST_SKIPPED.match(line):
            # googletest's closing list names each again: the first, with its reason, counts.
            skips.setdefault(m.group(1), " ".join(reason) or "(no reason given)")
            reason, collecting = [], False
        elif collecting and line.strip():
            reason.append(line.strip())
    return list(skips.items())


def read_junit(gate_dir):
    """(stage, root element) of every stage's JUnit file."""
    for path in sorted(glob.glob(os.path.join(gate_dir, "ctest-*.xml"))):
        stage = os.path.basename(path)[len("ctest-"):-len(".xml")]
        try:
            yield stage, ElementTree.parse(path).getroot()
        except ElementTree.ParseError as e:
            print(f"gate: {path}: {e}", file=sys.stderr)


def read_skips(gate_dir):
    """(stage, ctest test, test, reason) of every skipped test, ctest's own skips too."""
    skips = []
    for stage, root in read_junit(gate_dir):
        for case in root.iter("testcase"):
            name = case.get("name")
            out = case.find("system-out")
            text = (out.text or "") if out is not None else ""
            if case.get("status") in ("notrun", "skipped", "disabled"):
                said = " ".join(line.strip() for line in text.splitlines() if line.strip())
                skips.append((stage, name, name, f"ctest: {case.get('status')}"
                              + (f": {said[:200]}" if said else "")))
            for test, reason in skips_in_output(text):
                skips.append((stage, name, test, reason))
    return skips


def read_tests(gate_dir):
    """(seconds, test, stage, status) of every test in the stages' JUnit files."""
    tests = []
    for stage, root in read_junit(gate_dir):
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

    skips = read_skips(args.gate_dir)
    print(f"\ngate: {len(skips)} skipped tests" + (":" if skips else ""))
    for stage, binary, test, reason in skips:
        print(f"  {stage:<10} {binary}: {test}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
