#!/usr/bin/python3
"""scripts/accuracy_level_report.py on small weights: both paths from the same integers, the
error of 8-bit activations small for normal rows and larger with outliers and with larger blocks,
and the section written with a row per type and block."""
import os
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy_level_report as report  # noqa: E402


class AccuracyLevelReportTest(unittest.TestCase):
    def test_the_figures_and_the_section(self):
        rng = np.random.default_rng(3)
        w = rng.standard_normal((2, 256, 16)) / 16
        rows = report.measure(w, rng, m=8)
        self.assertEqual(len(rows), len(report.KINDS) * len(report.BLOCKS) * 2)
        by = {(r["type"], r["block"], r["activations"]): r for r in rows}
        for kind, _, _ in report.KINDS:
            normal = by[(kind, 32, "normal")]
            self.assertGreater(normal["max_rel"], 0.0)  # not the exact path
            self.assertLess(normal["max_rel"], 2e-2)
            self.assertGreater(by[(kind, 32, "outliers")]["rms_rel"], normal["rms_rel"])
        with tempfile.TemporaryDirectory() as d:
            doc = os.path.join(d, "q.md")
            report.doc_sections.write_section(doc, report.SECTION, report.render({"rows": rows}))
            with open(doc) as f:
                text = f.read()
            self.assertEqual(text.count("\n| INT4 | 32 |"), 1)
            self.assertIn("<!-- accuracy-level:end -->", text)


if __name__ == "__main__":
    unittest.main()
