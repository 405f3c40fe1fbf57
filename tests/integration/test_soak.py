"""A bounded soak (RELIABILITY F8): minutes of mixed valid, invalid,
cancelled and deadline-bound requests from several clients on loopback.
Resident memory and open file descriptors stay flat after warm-up, valid
requests get their exact answers, and no status appears that the request did
not call for. The gate runs it for 10 s; GEMMSERVE_LONG=1 (what to run before a
release, docs/testing.md) for 60 s; GEMMSERVE_SOAK_SECONDS sets any length."""
import os
import re
import sys
import threading
import time
import unittest

import grpc
import numpy as np

from gemmserve_client import decode_outputs, make_infer_request
from gemmserve_testing.base import GemmServeTestCase

SECONDS = float(os.environ.get("GEMMSERVE_SOAK_SECONDS",
                               "60" if os.environ.get("GEMMSERVE_LONG") == "1" else "10"))
# Memory and descriptors are sampled 20 times a run, at most once a second.
SAMPLE_PERIOD = min(1.0, SECONDS / 20)


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class SoakTest(GemmServeTestCase):
    def test_mixed_traffic_keeps_memory_and_descriptors_flat(self):
        pid = self.server.proc.pid
        stop = threading.Event()
        unexpected, counts, lock = [], {}, threading.Lock()

        def note(kind):
            with lock:
                counts[kind] = counts.get(kind, 0) + 1

        def client(seed):
            rng = np.random.default_rng(seed)
            while not stop.is_set():
                kind = rng.choice(["matmul", "grouped", "invalid", "cancel", "deadline"],
                                  p=[0.4, 0.25, 0.15, 0.1, 0.1])
                try:
                    if kind == "matmul":
                        a = rng.integers(-8, 8, (int(rng.integers(1, 64)), 48)).astype(np.float32)
                        b = rng.integers(-8, 8, (48, int(rng.integers(1, 64)))).astype(np.float32)
                        y = decode_outputs(self.stub.ModelInfer(make_infer_request(
                            "matmul", [("A", a), ("B", b)]), timeout=60))["Y"]
                        if not np.array_equal(y, a @ b):
                            unexpected.append("wrong matmul answer")
                    elif kind == "grouped":
                        x = rng.integers(-8, 8, (int(rng.integers(1, 16)), 32)).astype(np.float32)
                        w = rng.integers(-8, 8, (4, 32, 24)).astype(np.float32)
                        idx = rng.integers(0, 4, (x.shape[0], 2)).astype(np.int64)
                        out = decode_outputs(self.stub.ModelInfer(make_infer_request(
                            "grouped_matmul", [("input", x), ("weights", w),
                                               ("group_indices", idx)]), timeout=60))["output"]
                        if not np.array_equal(out, np.einsum("mk,mskn->msn", x, w[idx])):
                            unexpected.append("wrong grouped answer")
                    elif kind == "invalid":
                        try:
                            self.stub.ModelInfer(make_infer_request(
                                "grouped_matmul", [("input", np.ones((2, 4), np.float32)),
                                                   ("weights", np.ones((2, 4, 3), np.float32)),
                                                   ("group_indices", np.array([[0], [2]]))]),
                                timeout=60)
                            unexpected.append("invalid request accepted")
                        except grpc.RpcError as e:
                            if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
                                unexpected.append(f"invalid: {e.code()}")
                    elif kind == "cancel":
                        a = np.ones((256, 256), np.float32)
                        f = self.stub.ModelInfer.future(make_infer_request(
                            "matmul", [("A", a), ("B", a)]), timeout=60)
                        f.cancel()
                    else:  # a deadline the server may or may not meet: both fine
                        a = np.ones((192, 192), np.float32)
                        try:
                            self.stub.ModelInfer(make_infer_request(
                                "matmul", [("A", a), ("B", a)]), timeout=0.001)
                        except grpc.RpcError as e:
                            if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                                unexpected.append(f"deadline: {e.code()}")
                    note(kind)
                except grpc.RpcError as e:
                    unexpected.append(f"{kind}: {e.code()} {e.details()}")

        threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        samples = []
        try:
            start = time.monotonic()
            while time.monotonic() - start < SECONDS:
                samples.append((time.monotonic() - start, rss_bytes(pid), open_fds(pid)))
                threading.Event().wait(SAMPLE_PERIOD)  # a sampling period, not a synchronisation
                self.server.assert_alive()
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        self.assertEqual(unexpected[:10], [])
        self.assertGreater(sum(counts.values()), 100, counts)
        warm = [s for s in samples if s[0] >= SECONDS * 0.3]
        self.assertGreaterEqual(len(warm), 3)
        first_rss, first_fds = warm[0][1], warm[0][2]
        last_rss = max(s[1] for s in warm[-3:])
        # The figures, for the record (ctest -V shows them).
        print(f"soak: {sum(counts.values())} requests in {SECONDS:.0f} s {counts}; RSS after "
              f"warm-up {first_rss >> 20} -> {last_rss >> 20} MiB (x{last_rss / first_rss:.3f}); "
              f"descriptors {first_fds} -> max {max(s[2] for s in warm)}", file=sys.stderr)
        # Flat: no more than 10% plus 32 MiB of allocator slack over the run.
        self.assertLess(last_rss, first_rss * 1.10 + (32 << 20),
                        f"RSS {first_rss >> 20} -> {last_rss >> 20} MiB")
        self.assertLessEqual(max(s[2] for s in warm), first_fds + 8,
                             f"descriptors {[s[2] for s in warm]}")
        self.assert_server_still_serves()


if __name__ == "__main__":
    unittest.main(verbosity=2)
