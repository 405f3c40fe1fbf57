"""scripts/performance_report.py judges each case against the limits measured just
before and just after its group (gemmserve-bench's checkpoints), and marks groups
whose limits moved more than 10%. Synthetic runs, so the figures are known; the
bench's own output format is checked by the benchmark_report test."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import performance_report as pr  # noqa: E402


def entry(name, ms, **counters):
    return {"name": name, "run_name": name, "run_type": "iteration", "real_time": ms,
            "cpu_time": ms, "time_unit": "ms", "iterations": 1, **counters}


def limits(checkpoint, sgemm, bandwidth, dgemm=100.0):
    suffix = "" if checkpoint == 0 else f"/checkpoint:{checkpoint}"
    return [entry(f"Limit/read_bandwidth{suffix}", 10, GBps=bandwidth,
                  limits_checkpoint=checkpoint),
            entry(f"Limit/sgemm/2048{suffix}", 10, GFLOPS=sgemm, limits_checkpoint=checkpoint),
            entry(f"Limit/dgemm/2048{suffix}", 10, GFLOPS=dgemm, limits_checkpoint=checkpoint)]


def report_of(benchmarks):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"context": {}, "benchmarks": benchmarks}, f)
    try:
        return pr.Report(*pr.load_run(f.name))
    finally:
        os.unlink(f.name)


class CheckpointLimitsTest(unittest.TestCase):
    def test_each_case_is_judged_by_the_limits_around_its_own_group(self):
        case_a = pr.grouped_name("fused", "fp32", "olmoe", 1024)
        case_b = pr.grouped_name("fused", "fp32", "mixtral-small", 1024)
        report = report_of(
            limits(0, 300, 50) + [entry(case_a, 10, GFLOPS=150, limits_checkpoint=0)] +
            limits(1, 100, 20) + [entry(case_b, 10, GFLOPS=150, limits_checkpoint=1)] +
            limits(2, 100, 20))
        # Group 0 between 300 and 100 GFLOP/s: judged against 200; group 1 against 100.
        self.assertAlmostEqual(report.fraction_of_compute(case_a, "fp32"), 0.75)
        self.assertAlmostEqual(report.fraction_of_compute(case_b, "fp32"), 1.5)
        self.assertAlmostEqual(report.case_limits(case_a)["bandwidth"], 35)
        moved = report.moved_groups()
        self.assertIn((0, 1, "sgemm", 300, 100), moved)
        self.assertIn((0, 1, "bandwidth", 50, 20), moved)
        self.assertFalse([m for m in moved if m[0] == 1], "group 1's limits held still")
        self.assertIn("moved more than 10%", report.limits())

    def test_steady_limits_mark_nothing_and_missing_checkpoints_fall_back(self):
        case = pr.grouped_name("fused", "fp64", "olmoe", 4096)
        report = report_of(limits(0, 300, 50, dgemm=150) +
                           [entry(case, 10, GFLOPS=120, limits_checkpoint=3)] +
                           limits(5, 310, 52, dgemm=150))
        self.assertEqual(report.moved_groups(), [])
        self.assertAlmostEqual(report.fraction_of_compute(case, "fp64"), 0.8)
        self.assertIn("No limit moved more than 10%", report.limits())

    def test_a_run_without_checkpoints_uses_its_one_set_of_limits(self):
        case = pr.grouped_name("fused", "fp32", "olmoe", 1)
        report = report_of(limits(0, 200, 40) + [entry(case, 10, GFLOPS=20)])
        self.assertAlmostEqual(report.fraction_of_compute(case, "fp32"), 0.1)
        self.assertEqual(report.moved_groups(), [])


class ServingTargetsTest(unittest.TestCase):
    def test_resident_cases_are_judged_by_their_roofline_and_against_fused(self):
        fast = pr.grouped_name("resident", "bf16", "olmoe", 64)
        slow = pr.grouped_name("resident", "fp32", "olmoe", 64)
        # sgemm 200 GFLOP/s, 40 GB/s: 2e9 flops need 10 ms, 0.2 GB needs 5 ms.
        report = report_of(
            limits(0, 200, 40) +
            [entry(fast, 12.5, GFLOPS=160, bytes_touched=2e8),
             entry(slow, 20, GFLOPS=100, bytes_touched=2e8),
             entry(pr.grouped_name("fused", "bf16", "olmoe", 64), 25, GFLOPS=80),
             entry(pr.grouped_name("fused", "fp32", "olmoe", 64), 10, GFLOPS=200)])
        self.assertAlmostEqual(report.roofline_fraction(fast, "bf16"), 0.8)
        self.assertAlmostEqual(report.roofline_fraction(slow, "fp32"), 0.5)
        text = report.serving_targets()
        self.assertIn("| BF16 olmoe M = 64: roofline fraction", text)
        row = next(line for line in text.splitlines() if line.startswith("| BF16 olmoe M = 64"))
        self.assertIn("0.800 | ≥ 0.75 | PASS", row)
        row = next(line for line in text.splitlines() if line.startswith("| FP32 olmoe M = 64"))
        self.assertIn("**FAIL**", row)
        # The FP32 resident case is half as fast as fused: listed; BF16 (2x) is not.
        self.assertIn("1 of 2 | all | **FAIL**", text)
        self.assertIn(f"`{slow}` | 0.500×", text)
        self.assertNotIn(f"`{fast}`", text)
        self.assertIn("| olmoe | BF16 | — | — | — | 2.00× |", report.resident_tables())
        self.assertEqual(report.onednn_table(), "")  # a run without oneDNN: no table

    def test_onednn_cases_are_compared_with_resident(self):
        resident = pr.grouped_name("resident", "fp32", "olmoe", 1)
        report = report_of(
            limits(0, 200, 40) +
            [entry(resident, 2.0, GFLOPS=1), entry(pr.grouped_name("onednn", "fp32", "olmoe", 1),
                                                   3.0, GFLOPS=1)])
        text = report.onednn_table()
        self.assertIn("| olmoe | FP32 | 1.50× |", text)
        self.assertNotIn("BF16", text.split("\n\n", 1)[1])  # no BF16 cases ran


class KeptSectionsTest(unittest.TestCase):
    def test_regenerating_keeps_the_service_figures_and_the_design_notes(self):
        case = pr.grouped_name("fused", "fp32", "olmoe", 1)
        with tempfile.TemporaryDirectory() as tmp:
            run = os.path.join(tmp, "run.json")
            with open(run, "w") as f:
                json.dump({"context": {}, "benchmarks": limits(0, 200, 40) +
                           [entry(case, 10, GFLOPS=20, bytes_touched=1e6)]}, f)
            markdown = os.path.join(tmp, "performance.md")
            with open(markdown, "w") as f:
                f.write("old figures\n<!-- service-benchmark:begin -->\nservice\n"
                        "<!-- service-benchmark:end -->\n<!-- scaling:begin -->\nnotes\n"
                        "<!-- scaling:end -->\n")
            pr.main([run, "--markdown", markdown, "--plot", os.path.join(tmp, "p.png")])
            with open(markdown) as f:
                text = f.read()
        self.assertNotIn("old figures", text)
        self.assertIn("<!-- service-benchmark:begin -->\nservice\n", text)
        self.assertIn("<!-- scaling:begin -->\nnotes\n<!-- scaling:end -->", text)
        self.assertLess(text.index("service-benchmark:begin"), text.index("scaling:begin"))


if __name__ == "__main__":
    unittest.main()
