"""Dynamic batching through the real server (RELIABILITY F1-F4).

The built-in `matmul` model runs one batch at a time: while one batch runs,
later requests wait in the queue until it ends, then leave together as the
next batch (after at most --builtin_max_queue_delay_us, 200 ms here, waiting
for the running batch's own client to come back). A large MatMul
(the "blocker") keeps a batch running; a probe with a 1 ms queue timeout proves
it is running (the probe is refused from the queue) before each scenario, so
nothing here sleeps or guesses at timing. A scenario that needs the blocker
still running when it decides checks that it was (blocker not done at that
moment); if a fast machine finished the blocker first, that attempt proves
nothing either way and runs again with a fresh blocker (`conclusively`).
"""
import socket
import threading
import time
import unittest

import grpc
import numpy as np

from gemmserve_client import decode_outputs, make_infer_request, pb2
from gemmserve_client.http import encode_infer_request
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

    def conclusively(self, attempt, attempts=5):
        """Runs attempt() until it returns True (it decided while its blocker ran);
        False means the blocker ended too soon and the attempt cleaned up after itself."""
        for _ in range(attempts):
            if attempt():
                return
        self.fail(f"the blocker ended before the scenario decided, {attempts} times")

    def test_f3_f4_full_queue_refuses_at_once_and_the_queued_batch_keeps_answers_apart(self):
        cases = [
            ("FP32", RNG.standard_normal((2, 3)).astype(np.float32),
             RNG.standard_normal((3, 4)).astype(np.float32)),
            ("INT64", RNG.integers(-9, 9, (5, 2)).astype(np.int64),
             RNG.integers(-9, 9, (2, 7)).astype(np.int64)),
            ("FP64", RNG.standard_normal((2, 3, 6)), RNG.standard_normal((2, 6, 2))),
            ("INT32", RNG.integers(-9, 9, (4, 3)).astype(np.int32),
             RNG.integers(-9, 9, (3, 3)).astype(np.int32)),
        ]

        def attempt():
            blocker = self.start_blocker()
            before = self.stats()
            # Four requests for a queue of three: whichever arrives last is refused at
            # once, while the blocker still runs.
            first_done = threading.Event()
            futures = []
            for _, a, b in cases:
                f = self.stub.ModelInfer.future(
                    make_infer_request("matmul", [("A", a), ("B", b)]), timeout=300)
                f.add_done_callback(lambda _: first_done.set())
                futures.append(f)
            self.assertTrue(first_done.wait(timeout=120))
            conclusive = not blocker.done()
            self.finish_blocker(blocker)
            if not conclusive:
                for f in futures:
                    f.exception(timeout=300)  # each answered, one way or the other
                return False
            refused = [i for i, f in enumerate(futures)
                       if f.exception(timeout=300) is not None]
            self.assertEqual(len(refused), 1)
            error = futures[refused[0]].exception()
            self.assertEqual(error.code(), grpc.StatusCode.UNAVAILABLE, error.details())
            self.assertIn("queue full", error.details())
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
            # batch_stats (Triton's): those two calls, under their batch sizes
            # in rows, with their compute time; every call is under its size.
            def by_size(stats):
                return {b.batch_size: b.compute_infer for b in stats.batch_stats}
            was, now = by_size(before), by_size(after)
            queued_rows = rows - BLOCKER_N
            for size in {BLOCKER_N, queued_rows}:
                calls = (size == BLOCKER_N) + (size == queued_rows)
                old_count = was[size].count if size in was else 0
                old_ns = was[size].ns if size in was else 0
                self.assertEqual(now[size].count - old_count, calls, size)
                self.assertGreater(now[size].ns, old_ns, size)
            self.assertEqual(sum(d.count for d in now.values()), after.execution_count)
            self.assertEqual(sorted(now), [b.batch_size for b in after.batch_stats])
            return True

        self.conclusively(attempt)
        self.assert_server_still_serves()

    def test_f1_deadline_and_timeout_while_queued_drop_the_request_before_compute(self):
        small = make_infer_request("matmul", [("A", np.ones((2, 2), np.float32)),
                                              ("B", np.ones((2, 2), np.float32))])

        def attempt():
            blocker = self.start_blocker()
            before = self.stats()
            codes = []
            for request, timeout in ((small, 0.2), (with_params(small, timeout=100000), 30)):
                try:
                    self.stub.ModelInfer(request, timeout=timeout)
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as error:
                    codes.append(error.code())
                    last = error
            conclusive = not blocker.done()
            self.finish_blocker(blocker)
            if not conclusive:
                return False
            self.assertEqual(codes, [grpc.StatusCode.DEADLINE_EXCEEDED] * 2)
            self.assertIn("deadline passed while queued", last.details())
            after = self.stats()
            # Only the blocker was computed; both small requests counted as failures.
            self.assertEqual(after.inference_count - before.inference_count, BLOCKER_N)
            self.assertEqual(after.execution_count - before.execution_count, 1)
            self.assertGreaterEqual(
                after.inference_stats.fail.count - before.inference_stats.fail.count, 2)
            return True

        self.conclusively(attempt)
        self.assert_server_still_serves()

    def test_f2_cancel_while_queued_is_never_computed(self):
        def attempt():
            blocker = self.start_blocker()
            before = self.stats()
            queued = self.stub.ModelInfer.future(make_infer_request(
                "matmul", [("A", np.ones((3, 2), np.float32)), ("B", np.ones((2, 2), np.float32))]),
                timeout=300)
            self.assertTrue(queued.cancel())
            # The server drops it (a failure in its statistics) when it sees the cancel;
            # wait for that, or for the blocker's end, whichever comes first.
            while not blocker.done():
                if self.stats().inference_stats.fail.count > before.inference_stats.fail.count:
                    break
            conclusive = not blocker.done()
            self.finish_blocker(blocker)
            after = self.stats()
            if not conclusive and after.inference_count - before.inference_count != BLOCKER_N:
                return False  # the blocker ended first and the request ran: proves nothing
            # Only the blocker was computed, not the cancelled 3 rows.
            self.assertEqual(after.inference_count - before.inference_count, BLOCKER_N)
            return True

        self.conclusively(attempt)
        self.assert_server_still_serves()

    def test_f2_http_client_that_hangs_up_while_queued_is_never_computed(self):
        body, n = encode_infer_request([("A", np.ones((3, 2), np.float32)),
                                        ("B", np.ones((2, 2), np.float32))])
        request = (f"POST /v2/models/matmul/infer HTTP/1.1\r\nHost: x\r\n"
                   f"Content-Length: {len(body)}\r\nInference-Header-Content-Length: {n}\r\n"
                   f"\r\n").encode() + body

        def attempt():
            blocker = self.start_blocker()
            before = self.stats()
            with socket.create_connection(("127.0.0.1", self.server.http_port)) as s:
                s.sendall(request)
            # Gone before its answer: the server drops the request (a failure in its
            # statistics) when it sees the hang-up, before or at the next batch.
            while not blocker.done():
                if self.stats().inference_stats.fail.count > before.inference_stats.fail.count:
                    break
            self.finish_blocker(blocker)
            deadline = time.monotonic() + 60
            while self.stats().inference_stats.fail.count == before.inference_stats.fail.count:
                self.assertLess(time.monotonic(), deadline, "the hung-up request was not dropped")
            after = self.stats()
            # Only the blocker was computed, not the abandoned 3 rows.
            self.assertEqual(after.inference_count - before.inference_count, BLOCKER_N)
            return True

        self.conclusively(attempt)
        self.assert_server_still_serves()

    def test_f2_cancel_during_compute_leaves_the_server_serving(self):
        blocker = self.start_blocker()
        self.assertTrue(blocker.cancel())
        self.assert_server_still_serves()
        self.server.assert_alive()


if __name__ == "__main__":
    unittest.main()
