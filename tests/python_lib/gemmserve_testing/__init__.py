"""Shared helpers of gemmserve's Python integration tests (tests/integration/)."""
import os


def shared_dir():
    """The project's shared/ folder (specs, conformance data), beside the repository."""
    path = os.environ.get("GEMMSERVE_SHARED")
    if not path:
        raise RuntimeError("GEMMSERVE_SHARED is not set: run through ctest, or set it to "
                           "<repository>/../shared")
    if not os.path.isdir(path):
        raise RuntimeError(f"GEMMSERVE_SHARED={path} does not exist: the conformance data "
                           f"must be checked out beside the repository as ../shared")
    return path


SKIP_LINE = "gemmserve-test: skipped"


def _report_skips():
    """Every skipped test says so on stderr, in a line the gate's summary lists
    (tests/gate_summary.py): unittest's own mark for a skip is an "s" among the dots."""
    import sys
    import unittest

    add_skip = unittest.TestResult.addSkip
    if getattr(add_skip, "gemmserve_reports", False):
        return

    def add_skip_and_report(self, test, reason):
        print(f"\n{SKIP_LINE} {test.id()}: {reason}", file=sys.stderr, flush=True)
        add_skip(self, test, reason)

    add_skip_and_report.gemmserve_reports = True
    unittest.TestResult.addSkip = add_skip_and_report


_report_skips()
