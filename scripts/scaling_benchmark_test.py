"""scripts/scaling_benchmark.py: the speed-up of a case is the median over
rounds of its two side-by-side times' ratio (not the ratio of two medians),
resident GroupedMatMul cases are judged against 1.8x, and the section is
replaced in place in docs/performance.md. Synthetic runs, so the figures are
known."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scaling_benchmark as sb  # noqa: E402

FAST = "GroupedMatMul/resident/bf16/olmoe/4096"
SLOW = "GroupedMatMul/resident/fp32/olmoe/4096"
OTHER = "MatMul/fused/fp32/2048"


def bench_json(times_ms):
    entries = []
    for name, ms in times_ms.items():
        entries.append({"name": name, "run_name": name, "run_type": "iteration",
                        "real_time": ms, "time_unit": "ms"})
    return {"benchmarks": entries}


class ScalingTest(unittest.TestCase):
    def test_seconds_by_case_takes_the_first_entry_and_skips_errors(self):
        run = bench_json({FAST: 10.0})
        run["benchmarks"].append({"name": FAST, "run_name": FAST, "run_type": "iteration",
                                  "real_time": 99.0, "time_unit": "ms"})
        run["benchmarks"].append({"name": SLOW, "run_name": SLOW, "run_type": "iteration",
                                  "real_time": 1.0, "time_unit": "ms", "error_occurred": True})
        run["benchmarks"].append({"name": OTHER, "run_name": OTHER, "run_type": "iteration",
                                  "real_time": 2000.0, "time_unit": "us"})
        got = sb.seconds_by_case(run)
        self.assertAlmostEqual(got[FAST], 0.010)
        self.assertAlmostEqual(got[OTHER], 0.002)
        self.assertNotIn(SLOW, got)

    def test_speedup_is_the_median_of_side_by_side_ratios(self):
        # Round 2 ran on a machine twice as slow for both thread counts: its
        # ratios are the same. SLOW's median ratio is 1.5, where the ratio
        # of its medians (31 / 30 ms) would be 1.03.
        rounds = [{1: {FAST: 0.019, SLOW: 0.030}, 2: {FAST: 0.010, SLOW: 0.020}},
                  {1: {FAST: 0.038, SLOW: 0.060}, 2: {FAST: 0.020, SLOW: 0.040}},
                  {1: {FAST: 0.020, SLOW: 0.031}, 2: {FAST: 0.0105, SLOW: 0.030}}]
        rows = {r["case"]: r for r in sb.summarise(rounds, (FAST, SLOW, OTHER))}
        self.assertNotIn(OTHER, rows)  # measured in no round
        self.assertAlmostEqual(rows[FAST]["speedup"], 1.9)
        self.assertAlmostEqual(rows[SLOW]["speedup"], 1.5)
        self.assertEqual(rows[FAST]["rounds"], 3)
        self.assertAlmostEqual(rows[FAST]["one_ms"], 20.0)

    def test_render_judges_resident_cases_and_replaces_its_section(self):
        results = {"date": "today", "cpu": "a CPU", "rounds": 3, "note": "noisy",
                   "rows": [{"case": FAST, "one_ms": 19, "two_ms": 10, "speedup": 1.9},
                            {"case": SLOW, "one_ms": 30, "two_ms": 20, "speedup": 1.5},
                            {"case": OTHER, "one_ms": 30, "two_ms": 20, "speedup": 1.5},
                            {"case": sb.LIMIT, "one_ms": 30, "two_ms": 16, "speedup": 1.88}]}
        section = sb.render(results)
        lines = {line.split(" | ")[0].lstrip("| "): line for line in section.splitlines()
                 if line.startswith("| ") and " ms |" in line}
        self.assertIn("PASS", lines[FAST])
        self.assertIn("**FAIL**", lines[SLOW])
        self.assertNotIn("PASS", lines[OTHER])
        self.assertNotIn("FAIL", lines[OTHER])
        self.assertIn("the limit", lines[sb.LIMIT])
        self.assertIn("> **Note.** noisy", section)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "performance.md")
            with open(path, "w") as f:
                f.write(f"# Title\n\n{sb.BEGIN}\nold table\n{sb.END}\n<!-- scaling:begin -->\n")
            sb.doc_sections.write_section(path, sb.SECTION, section)
            doc = open(path).read()
            self.assertNotIn("old table", doc)
            self.assertTrue(doc.startswith("# Title\n\n" + sb.BEGIN))
            self.assertEqual(doc.count(sb.BEGIN), 1)
            self.assertTrue(doc.endswith(sb.END + "\n<!-- scaling:begin -->\n"))


if __name__ == "__main__":
    unittest.main()
