"""Overload on loopback (RELIABILITY F3 at scale): far more concurrent calls
than the server can hold. Every call ends OK (with the right answer) or
UNAVAILABLE; the batcher's queue depth never passes max_queue_size; resident
memory stays within a bound set by --max_inflight_bytes; afterwards the server
serves normally."""
import re
import sys
import threading
import unittest
import urllib.request

import grpc
import numpy as np

from gemmserve_client import decode_outputs, make_infer_request
from gemmserve_testing.base import GemmServeTestCase

MAX_QUEUE = 8
MAX_INFLIGHT = 32 << 20  # bytes
CALLS = 300


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024


class OverloadTest(GemmServeTestCase):
    server_flags = (f"--builtin_max_queue_size={MAX_QUEUE}",
                    f"--max_inflight_bytes={MAX_INFLIGHT}")

    def test_far_above_capacity_every_call_ends_ok_or_unavailable_within_bounds(self):
        # Small inputs, a 4 MiB output each: what the server holds per call is
        # mostly its own allocation, which --max_inflight_bytes bounds.
        a = np.ones((1024, 8), np.float32)
        b = np.ones((8, 1024), np.float32)
        request = make_infer_request("matmul", [("A", a), ("B", b)])
        self.infer(request)  # warm-up: pools and first allocations
        baseline = rss_bytes(self.server.proc.pid)

        stop = threading.Event()
        peaks = {"rss": baseline, "depth": 0.0}
        scrape_errors = []

        def watch():
            while not stop.is_set():
                peaks["rss"] = max(peaks["rss"], rss_bytes(self.server.proc.pid))
                try:
                    with urllib.request.urlopen(self.server.metrics_url, timeout=10) as r:
                        text = r.read().decode()
                    for m in re.finditer(r'^gemmserve_queue_depth\{[^}]*\} (\S+)', text, re.M):
                        peaks["depth"] = max(peaks["depth"], float(m.group(1)))
                except OSError as e:
                    scrape_errors.append(repr(e))

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            futures = [self.stub.ModelInfer.future(request, timeout=120) for _ in range(CALLS)]
            codes = {}
            for f in futures:
                try:
                    y = decode_outputs(f.result())["Y"]
                    self.assertEqual(float(y[0, 0]), 8.0)
                    self.assertEqual(float(y[-1, -1]), 8.0)
                    code = grpc.StatusCode.OK
                except grpc.RpcError as e:
                    code = e.code()
                codes[code] = codes.get(code, 0) + 1
        finally:
            stop.set()
            watcher.join(timeout=30)
        self.assertLessEqual(set(codes), {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE}, codes)
        self.assertGreater(codes.get(grpc.StatusCode.OK, 0), 0, codes)
        self.assertGreater(codes.get(grpc.StatusCode.UNAVAILABLE, 0), 0,
                           f"{codes}: the load never exceeded capacity")
        growth = peaks["rss"] - baseline
        bound = 3 * MAX_INFLIGHT + (256 << 20)
        print(f"overload: {CALLS} calls {dict((c.name, n) for c, n in codes.items())}; peak queue "
              f"depth {peaks['depth']:.0f} of {MAX_QUEUE}; peak RSS growth {growth >> 20} MiB = "
              f"{growth / bound:.2f} of the bound", file=sys.stderr)
        self.assertEqual(scrape_errors, [])
        self.assertLessEqual(peaks["depth"], MAX_QUEUE)
        # Outputs held (bounded by MAX_INFLIGHT), their copies in responses being
        # sent, and gRPC's buffers for the small requests: a generous bound that an
        # unbounded queue of 300 x 4 MiB outputs would break.
        self.assertLess(growth, bound, f"RSS grew by {growth >> 20} MiB")
        # Every refusal here is overload (a full queue or --max_inflight_bytes),
        # and the metrics count each one as such.
        with urllib.request.urlopen(self.server.metrics_url, timeout=10) as r:
            text = r.read().decode()
        counted = re.search(r'^gemmserve_rejected_total\{(?=[^}]*model="matmul")'
                            r'(?=[^}]*reason="queue_full")[^}]*\} (\S+)$', text, re.M)
        self.assertIsNotNone(counted, "no gemmserve_rejected_total for matmul/queue_full")
        self.assertEqual(float(counted.group(1)), codes[grpc.StatusCode.UNAVAILABLE])
        self.server.assert_alive()
        self.assert_server_still_serves()


if __name__ == "__main__":
    unittest.main(verbosity=2)
