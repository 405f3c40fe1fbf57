"""Dynamic batching through the real server (RELIABILITY F1-F4).

The built-in `matmul` model runs one batch at a time: while one batch runs,
later requests wait in the queue until it ends, then leave together as the
next batch (after at most --builtin_max_queue_delay_us, 200 ms here, waiting
for the running batch's own client to come back). A large MatMul
(the "blocker") keeps a batch running; a probe with a 1 ms queue timeout proves
it is running (the probe is refused from the queue) before each scenario, so
nothing here sleeps or guesses at timing.
"""
import threading
import time
import unittest

import grpc
import numpy as np

from gemmserve_client import decode_outputs, make_infer_request, pb2
from gemmserve_testing.base import GemmServeTestCase

BLOCKER_N = 4096  # 2 * 4096^3 flops: about half a second or more on two cores
RNG = np.random.default_rng(3)


def with_params(request, **params):
    for key, value in params.items():
        request.parameters[key].int64_param = value
    return request


class BatchingTest(GemmServeTestCase):
    server_flags = ("--builtin_max_queue_delay_us=200000", "--builtin_max_queue_size=3")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        a = np.ones((BLOCKER_N, BLOCKER_N), np.float32)
        cls.blocker_request = make_infer_request("matmul", [("A", a), ("B", a)])

    def stats(self):
        return self.stub.ModelStatistics(pb2.ModelStatisticsRequest(name="matmul"),
                                         timeout=10).model_stats[0]

    def start_blocker(self):
        """Sends the blocker and returns its future once it is computing."""
        future = self.stub.ModelInfer.future(self.blocker_request, timeout=300)
        probe = with_params(make_infer_request("matmul", [("A", np.ones((1, 1), np.float32)),
                                                         ("B", np.ones((1, 1), np.float32))]),
                            timeout=1000)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if future.done() and future.exception() is not None:  # never blocks: done
                self.fail(f"blocker failed: {future.exception()}")
            try:
                self.stub.ModelInfer(probe, timeout=30)  # ran at once: blocker not running yet
            except grpc.RpcError as error:
                if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    return future  # the probe waited behind a running batch
                raise
        self.fail("the blocker never started")

    def finish_blocker(self, future):
        y = decode_outputs(future.result(timeout=300))["Y"]
        self.assertEqual(float(y[0, 0]), float(BLOCKER_N))

    def test_f3_f4_full_queue_refuses_at_once_and_the_queued_batch_keeps_answers_apart(self):
        blocker = self.start_blocker()
        before = self.stats()
        cases = [
            ("FP32", RNG.standard_normal((2, 3)).astype(np.float32),
             RNG.standard_normal((3, 4)).astype(np.float32)),
            ("INT64", RNG.integers(-9, 9, (5, 2)).astype(np.int64),
             RNG.integers(-9, 9, (2, 7)).astype(np.int64)),
            ("FP64", RNG.standard_normal((2, 3, 6)), RNG.standard_normal((2, 6, 2))),
            ("INT32", RNG.integers(-9, 9, (4, 3)).astype(np.int32),
             RNG.integers(-9, 9, (3, 3)).astype(np.int32)),
        ]
        # Four requests for a queue of three: whichever arrives last is refused at
        # once, while the blocker still runs.
        first_done = threading.Event()
        futures = []
        for _, a, b in cases:
            f = self.stub.ModelInfer.future(make_infer_request("matmul", [("A", a), ("B", b)]),
                                            timeout=300)
            f.add_done_callback(lambda _: first_done.set())
            futures.append(f)
        self.assertTrue(first_done.wait(timeout=60))
        self.assertFalse(blocker.done(), "the blocker ended before the queue filled")
        refused = [i for i, f in enumerate(futures) if f.done()]
        self.assertEqual(len(refused), 1)
        error = futures[refused[0]].exception()
        self.assertEqual(error.code(), grpc.StatusCode.UNAVAILABLE, error.details())
        self.assertIn("queue full", error.details())
        self.finish_blocker(blocker)
        rows = BLOCKER_N
        for i, ((name, a, b), future) in enumerate(zip(cases, futures)):
            if i == refused[0]:
                continue
            y = decode_outputs(future.result(timeout=300))["Y"]
            want = np.matmul(a, b)
            rows += int(np.prod(a.shape[:-1]))
            if name.startswith("INT"):
                np.testing.assert_array_equal(y, want)
            else:
                np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
        after = self.stats()
        # The blocker, then the three queued requests in ONE kernel call.
        self.assertEqual(after.execution_count - before.execution_count, 2)
        self.assertEqual(after.inference_count - before.inference_count, rows)
        self.assert_server_still_serves()

    def test_f1_deadline_and_timeout_while_queued_drop_the_request_before_compute(self):
        blocker = self.start_blocker()
        before = self.stats()
        small = make_infer_request("matmul", [("A", np.ones((2, 2), np.float32)),
                                              ("B", np.ones((2, 2), np.float32))])
        error = self.rpc_error(self.stub.ModelInfer, small, timeout=0.2)
        self.assertEqual(error.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        error = self.rpc_error(self.stub.ModelInfer, with_params(small, timeout=100000))
        self.assertEqual(error.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertIn("deadline passed while queued", error.details())
        self.finish_blocker(blocker)
        after = self.stats()
        # Only the blocker was computed; both small requests counted as failures.
        self.assertEqual(after.inference_count - before.inference_count, BLOCKER_N)
        self.assertEqual(after.execution_count - before.execution_count, 1)
        self.assertGreaterEqual(after.inference_stats.fail.count - before.inference_stats.fail.count, 2)
        self.assert_server_still_serves()

    def test_f2_cancel_while_queued_is_never_computed(self):
        blocker = self.start_blocker()
        before = self.stats()
        queued = self.stub.ModelInfer.future(make_infer_request(
            "matmul", [("A", np.ones((3, 2), np.float32)), ("B", np.ones((2, 2), np.float32))]),
            timeout=300)
        self.assertTrue(queued.cancel())
        self.finish_blocker(blocker)
        self.assert_server_still_serves()
        after = self.stats()
        # The blocker and assert_server_still_serves' own 3-row matmul; not the
        # cancelled 3 rows (whether the cancel reached the server while the
        # request was queued or before it was read, it is never computed).
        self.assertEqual(after.inference_count - before.inference_count, BLOCKER_N + 3)

    def test_f2_cancel_during_compute_leaves_the_server_serving(self):
        blocker = self.start_blocker()
        self.assertTrue(blocker.cancel())
        self.assert_server_still_serves()
        self.server.assert_alive()


if __name__ == "__main__":
    unittest.main()
