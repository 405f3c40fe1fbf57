#!/usr/bin/python3
"""tests/gate_summary.py lists every skipped test with its reason: googletest's, the
Python tests', and ctest's own, from the JUnit files ctest writes (synthetic files)."""
import contextlib
import io
import os
import subprocess
import sys
import tempfile
import unittest
from xml.sax.saxutils import escape

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "python_lib"))
import gate_summary  # noqa: E402

GTEST_OUTPUT = """[ RUN      ] Panels.NativeBf16
/src/server/ops/kernels/panel_gemm_test.cc:244: Skipped
no AVX512-BF16 here: the native path is not used

[  SKIPPED ] Panels.NativeBf16 (0 ms)
[ RUN      ] Panels.Fp16
[       OK ] Panels.Fp16 (1 ms)
[  SKIPPED ] 1 test, listed below:
[  SKIPPED ] Panels.NativeBf16
"""

JUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="(empty)" tests="3">
  <testcase name="panel_gemm_test" time="0.5" status="run"><system-out>{gtest}</system-out>
  </testcase>
  <testcase name="integration_x" time="2.0" status="run"><system-out>{python}</system-out>
  </testcase>
  <testcase name="needs_amx" time="0" status="notrun"><system-out>this CPU lacks amx_tile
</system-out></testcase>
</testsuite>
"""


def python_output():
    """What a Python test that skips prints, from the hook gemmserve_testing installs."""
    import gemmserve_testing  # noqa: F401  (the import installs the hook)

    class Case(unittest.TestCase):
        def test_needs_root(self):
            self.skipTest("not root: network namespaces need it")

    class Whole(unittest.TestCase):
        @classmethod
        def setUpClass(cls):
            raise unittest.SkipTest("no library: npm is offline")

        def test_anything(self):
            pass

    Case.__module__, Case.__qualname__ = "test_example", "Case"
    Whole.__module__, Whole.__qualname__ = "test_example", "Whole"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        for case in (Case, Whole):
            unittest.TextTestRunner(stream=io.StringIO()).run(
                unittest.defaultTestLoader.loadTestsFromTestCase(case))
    return err.getvalue()


class SkipListTest(unittest.TestCase):
    def test_every_skip_is_listed_once_with_its_reason(self):
        gate = tempfile.mkdtemp()
        with open(os.path.join(gate, "ctest-release.xml"), "w") as f:
            f.write(JUNIT.format(gtest=escape(GTEST_OUTPUT), python=escape(python_output())))
        with open(os.path.join(gate, "stages.tsv"), "w") as f:
            f.write("release-tests\t12.5\tpassed\n")
        self.assertEqual(gate_summary.read_skips(gate), [
            ("release", "panel_gemm_test", "Panels.NativeBf16",
             "no AVX512-BF16 here: the native path is not used"),
            ("release", "integration_x", "test_example.Case.test_needs_root",
             "not root: network namespaces need it"),
            ("release", "integration_x", "setUpClass (test_example.Whole)",
             "no library: npm is offline"),
            ("release", "needs_amx", "needs_amx", "ctest: notrun: this CPU lacks amx_tile"),
        ])
        out = subprocess.run([sys.executable, os.path.join(HERE, "gate_summary.py"), gate],
                             capture_output=True, text=True, check=True).stdout
        self.assertIn("gate: 4 skipped tests:", out)
        self.assertIn("panel_gemm_test: Panels.NativeBf16: no AVX512-BF16 here", out)

    def test_a_run_without_skips_says_so(self):
        gate = tempfile.mkdtemp()
        with open(os.path.join(gate, "ctest-release.xml"), "w") as f:
            f.write(JUNIT.format(gtest="[ RUN      ] A.B\n[       OK ] A.B (0 ms)\n",
                                 python="").replace('status="notrun"', 'status="run"'))
        self.assertEqual(gate_summary.read_skips(gate), [])


if __name__ == "__main__":
    unittest.main()
