"""scripts/quantized_benchmark.py: the floor is the case's bytes over the
median bandwidth of the run's checkpoints, speed-ups are ratios of medians in
the same run, each target is judged as the issue states it, and the section
is replaced in place. Synthetic runs, so the figures are known."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quantized_benchmark as qb  # noqa: E402


def entry(name, ms, **counters):
    return dict({"name": name, "run_name": name, "run_type": "iteration", "real_time": ms,
                 "time_unit": "ms"}, **counters)


def run_json():
    b = []
    for gbps in (40.0, 50.0, 60.0):  # median 50 GB/s
        b.append(dict(entry("Limit/read_bandwidth", 1.0), GBps=gbps))
    # FP32 decode: 10 ms; INT8: 2.5 ms over 100 MB (floor 2 ms): 1.25x, 4x faster.
    for ms in (9.0, 10.0, 30.0):
        b.append(entry("GroupedMatMul/resident/fp32/olmoe/1", ms, bytes_touched=4e8))
    for ms in (2.5, 2.4, 2.6):
        b.append(entry("GroupedMatMul/resident_int8/fp32/olmoe/1", ms, bytes_touched=1e8))
    b.append(entry("GroupedMatMul/resident_int4/fp32/olmoe/1", 1.25, bytes_touched=5e7))
    b.append(entry("GroupedMatMul/resident/bf16/olmoe/64", 6.0))
    b.append(entry("GroupedMatMul/resident_int4/bf16/olmoe/64", 4.0))
    b.append(entry("GroupedMatMul/resident_int4/bf16/olmoe/64_median", 99.0))  # not an iteration
    b[-1]["run_type"] = "aggregate"
    b.append(dict(entry("GroupedMatMul/resident_int8/bf16/olmoe/64", 1.0), error_occurred=True))
    # Beside ggml: level-4 INT8 at M = 1 takes 2 ms against Q8_0's 3 ms (1.5x); INT4 at M = 64
    # 4 ms against Q4_0's 3 ms (0.75x, a miss).
    b.append(entry("GroupedMatMul/resident_int8_a8/fp32/olmoe/1", 2.0, bytes_touched=1e8))
    b.append(entry("GroupedMatMul/ggml_q8_0/fp32/olmoe/1", 3.0, bytes_touched=1e8))
    b.append(entry("GroupedMatMul/resident_int4_a8/fp32/olmoe/64", 4.0, bytes_touched=5e7))
    b.append(entry("GroupedMatMul/ggml_q4_0/fp32/olmoe/64", 3.0, bytes_touched=5e7))
    return {"benchmarks": b, "context": {"ggml": "ggml 0.25.1 (0ad4a86), CPU backend x.so",
                                         "int8_dot_kernel": "avx512_vnni"}}


class QuantizedBenchmarkTest(unittest.TestCase):
    def setUp(self):
        self.results = qb.results_from_run(run_json(), {"cpu": "test", "threads": 2,
                                                        "repetitions": 3})
        self.cases = {(c["bits"], c["values"]): c for c in self.results["cases"]}

    def test_floor_and_speedups_are_ratios_within_the_run(self):
        self.assertAlmostEqual(self.results["bandwidth_gbps"], 50.0)
        int8 = self.cases[("INT8", "FP32")]
        self.assertAlmostEqual(int8["floor_ratio"], 1.25)
        self.assertAlmostEqual(int8["fp32_speedup"], 4.0)
        self.assertAlmostEqual(self.cases[("INT4", "FP32")]["fp32_speedup"], 8.0)
        self.assertAlmostEqual(self.cases[("INT4", "BF16")]["m64_vs_bf16"], 1.5)
        # An errored case is left out, not counted as fast.
        self.assertNotIn("m64_vs_bf16", self.cases[("INT8", "BF16")])
        self.assertAlmostEqual(self.results["resident_floor_ratio"]["fp32"], 10.0 / 8.0)

    def test_targets_as_the_issue_states_them(self):
        got = {what: met for what, _, _, met in qb.targets(self.results)}
        self.assertFalse(got["INT8 decode, time / floor"])  # 1.25 > 1.2
        self.assertTrue(got["INT4 decode, FP32 time / this"])  # 8 >= 6
        self.assertTrue(got["INT4 BF16 values, M = 64, BF16 time / this"])

    def test_beside_ggml_each_m_is_judged_and_the_backend_named(self):
        rows = {r["m"]: r for r in self.results["ggml"]}
        self.assertAlmostEqual(rows[1]["INT8 level 4 vs ggml Q8_0"], 1.5)
        self.assertAlmostEqual(rows[1]["floor"]["ggml Q8_0"], 1.5)  # 3 ms over a 2 ms floor
        self.assertEqual(rows[64]["floor"], {})  # floors only at decode (M = 1, 4)
        got = {what: met for what, _, _, met in qb.targets(self.results)}
        self.assertTrue(got["INT8 level 4 vs ggml Q8_0, M = 1, ggml time / ours"])
        self.assertFalse(got["INT4 level 4 vs repacked ggml Q4_0, M = 64, ggml time / ours"])
        # A pair with a missing side is not judged.
        self.assertNotIn("INT8 level 4 vs ggml Q8_0, M = 4, ggml time / ours", got)
        text = qb.render(self.results)
        self.assertIn("ggml 0.25.1 (0ad4a86), CPU backend x.so", text)
        self.assertIn("`avx512_vnni`", text)
        self.assertIn("| 1 | 3 (1.50) | 2 (1.00) | - |", text)

    def test_no_bandwidth_no_floor(self):
        with self.assertRaises(ValueError):
            qb.summarize({"benchmarks": [entry("GroupedMatMul/resident/fp32/olmoe/1", 1.0)]})

    def test_the_section_is_replaced_in_place(self):
        with tempfile.TemporaryDirectory() as d:
            doc = os.path.join(d, "performance.md")
            with open(doc, "w") as f:
                f.write("before\n\n<!-- quantized-benchmark:begin -->\nold\n"
                        "<!-- quantized-benchmark:end -->\nafter\n")
            qb.doc_sections.write_section(doc, qb.SECTION, qb.render(self.results))
            text = open(doc).read()
            self.assertNotIn("old", text)
            self.assertTrue(text.startswith("before\n") and text.endswith("after\n"))
            self.assertIn("| INT8, FP32 | 1.25 | 4.00x | - | - |", text)
            self.assertIn("| INT8 decode, time / floor | 1.25 | <= 1.2 | **no** |", text)


if __name__ == "__main__":
    unittest.main()
