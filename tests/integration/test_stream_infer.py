"""ModelStreamInfer (Triton's bidirectional inference stream) through a real server:
answers by id across models, an error mid-stream, the per-stream bound, a stream's
requests batched with unary calls, cancel with queued requests, tokens once per stream,
and SIGTERM draining a stream; through the Python client's stream_infer."""
import os
import queue
import signal
import tempfile
import threading
import time
import unittest

import grpc
import numpy as np

from gemmserve_client import GemmServeClient, decode_outputs, make_infer_request, pb2, pb2_grpc
from gemmserve_testing.base import GemmServeTestCase, open_channel, serve_with_tokens
from gemmserve_testing.process import metric_sum
from gemmserve_testing.server import ServerProcess


def small_ints(rng, shape):
    """Small integers: every float sum is exact, whatever the summation order."""
    return rng.integers(-4, 5, size=shape).astype(np.float32)


def grouped_reference(x, w, ids):
    return np.stack([np.stack([x[m] @ w[g] for g in row]) for m, row in enumerate(ids)])


def statistics(stub, model):
    stats = stub.ModelStatistics(pb2.ModelStatisticsRequest(name=model), timeout=10)
    return stats.model_stats[0]


class HeldOpen:
    """A request iterator that sends what it is given and keeps the stream open (the
    client not done sending) until close()."""

    def __init__(self):
        self.queue = queue.Queue()

    def send(self, request):
        self.queue.put(request)

    def close(self):
        self.queue.put(None)

    def __iter__(self):
        while True:
            item = self.queue.get()
            if item is None:
                return
            yield item


class StreamInferTest(GemmServeTestCase):
    server_flags = ("--grpc_max_stream_inflight=3",)

    def setUp(self):
        self.client = GemmServeClient(self.server.address)
        self.addCleanup(self.client.close)

    def test_interleaved_models_are_answered_by_id_with_an_error_mid_stream(self):
        rng = np.random.default_rng(7)
        calls, expected = [], {}
        for i in range(24):
            if i == 11:
                # An error for one request: its answer says so, and the stream goes on.
                calls.append(("matmul", {"A": np.ones((2, 3), np.float32),
                                         "B": np.ones((4, 5), np.float32)}, "bad"))
                continue
            if i % 2:
                a, b = small_ints(rng, (1 + i, 7)), small_ints(rng, (7, 3 + i % 5))
                calls.append(("matmul", {"A": a, "B": b}, f"mm-{i}"))
                expected[f"mm-{i}"] = ("matmul", "Y", a @ b)
            else:
                x, w = small_ints(rng, (5, 6)), small_ints(rng, (4, 6, 3))
                ids = rng.integers(0, 4, size=(5, 2)).astype(np.int64)
                calls.append(("grouped_matmul", {"input": x, "weights": w,
                                                 "group_indices": ids}, f"g-{i}"))
                expected[f"g-{i}"] = ("grouped_matmul", "output", grouped_reference(x, w, ids))
        answers = list(self.client.stream_infer(calls, timeout=60))
        self.assertEqual(sorted(a.id for a in answers), sorted([c[2] for c in calls]))
        for answer in answers:
            if answer.id == "bad":
                self.assertIsNone(answer.outputs)
                self.assertRegex(answer.error, r"\b3\b.*\b4\b|\b4\b.*\b3\b")  # K of A and B
                self.assertEqual(answer.model_name, "matmul")
                continue
            self.assertIsNone(answer.error, answer.id)
            model, output, want = expected[answer.id]
            self.assertEqual(answer.model_name, model)
            np.testing.assert_array_equal(answer.outputs[output], want, err_msg=answer.id)

    def test_a_request_that_cannot_be_decoded_is_answered_with_its_error(self):
        request = make_infer_request("matmul", [("A", np.ones((2, 2), np.float32))])
        request.id = "only-a"
        good = make_infer_request("matmul", [("A", np.ones((1, 1), np.float32)),
                                             ("B", np.ones((1, 1), np.float32))])
        good.id = "good"
        unknown = make_infer_request("no_such_model", [("A", np.ones((1, 1), np.float32))])
        unknown.id = "unknown"
        answers = {a.id: a for a in self.client.stream_infer([request, unknown, good],
                                                             timeout=30)}
        self.assertEqual(set(answers), {"only-a", "good", "unknown"})
        self.assertIn("B", answers["only-a"].error)
        self.assertIn("no_such_model", answers["unknown"].error)
        np.testing.assert_array_equal(answers["good"].outputs["Y"], [[1.0]])
        self.server.assert_alive()

    def test_a_message_that_does_not_parse_ends_the_stream_with_an_error_naming_it(self):
        # Sent as raw bytes, so that the client can write what is not a request.
        raw = self.channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=lambda b: b,
            response_deserializer=pb2.ModelStreamInferResponse.FromString)

        def request(i, request_id):
            a = np.full((1, 2), float(i), np.float32)
            r = make_infer_request("matmul", [("A", a), ("B", np.ones((2, 1), np.float32))])
            r.id = request_id
            return r.SerializeToString()

        not_utf8 = request(2, "ZZ").replace(b"\x1a\x02ZZ", b"\x1a\x02\xff\xfe")
        self.assertNotEqual(not_utf8, request(2, "ZZ"))
        bad_messages = {"a string that is not UTF-8": not_utf8,
                        "truncated": request(2, "two")[:-3],
                        "garbage": b"\xff\xff\xff\xff\xff\xff"}
        for kind, bad in bad_messages.items():
            with self.subTest(kind):
                answers, error = [], None
                try:
                    for answer in raw(iter([request(1, "one"), bad, request(3, "three"),
                                            request(4, "four")]), timeout=30):
                        answers.append(answer)
                except grpc.RpcError as e:
                    error = e
                self.assertIsNotNone(error, "the stream ended OK with requests 3 and 4 lost")
                self.assertEqual(error.code(), grpc.StatusCode.INVALID_ARGUMENT, error.details())
                self.assertIn("message 2 of the stream", error.details())
                # Request 1, accepted before, is answered; nothing after the bad one is read.
                self.assertEqual([a.infer_response.id for a in answers], ["one"])
                self.assertEqual(answers[0].error_message, "")
                self.assertEqual(answers[0].infer_response.raw_output_contents[0],
                                 np.array([[2.0]], np.float32).tobytes())
        self.assert_server_still_serves()

    def test_property_random_mixes_of_good_and_bad_requests(self):
        """Seeded random streams of valid requests (random shapes, zeros and ones among
        them) and invalid ones of every kind a stream may carry: each valid one gets its
        exact answer, each invalid one an error, every id exactly once."""
        for seed in range(6):
            rng = np.random.default_rng(100 + seed)
            requests, expected = [], {}
            for i in range(int(rng.integers(1, 30))):
                m, k, n = (int(d) for d in rng.integers(0, 9, size=3))
                a, b = small_ints(rng, (m, k)), small_ints(rng, (k, n))
                kind = rng.choice(["good"] * 4 + ["dims", "missing", "model", "raw", "type"])
                if kind == "dims":
                    b = small_ints(rng, (k + 1, n))
                inputs = [("A", a), ("B", b)] if kind != "missing" else [("A", a)]
                request = make_infer_request("nope" if kind == "model" else "matmul", inputs)
                if kind == "raw":
                    request.raw_input_contents[1] = request.raw_input_contents[1] + b"\0"
                if kind == "type":
                    request.inputs[0].datatype = "FP8"
                request.id = f"{seed}-{i}"
                requests.append(request)
                expected[request.id] = a @ b if kind == "good" else None
            answers = list(self.client.stream_infer(requests, timeout=60))
            self.assertEqual(sorted(a.id for a in answers), sorted(expected), seed)
            for answer in answers:
                want = expected[answer.id]
                if want is None:
                    self.assertIsNone(answer.outputs, answer.id)
                    self.assertTrue(answer.error, answer.id)
                else:
                    self.assertIsNone(answer.error, f"{answer.id}: {answer.error}")
                    np.testing.assert_array_equal(answer.outputs["Y"], want, err_msg=answer.id)
        self.assert_server_still_serves()

    def test_a_client_that_never_reads_its_answers_holds_only_its_bound(self):
        """A stream that writes 200 requests and reads nothing: the server computes the
        stream's bound, then stops reading it; it holds 3 answers, never 200, and serves
        others meanwhile. Cancelling the stream frees what it held."""
        a = np.ones((256, 256), np.float32)
        sent = HeldOpen()
        for _ in range(200):
            sent.send(make_infer_request("matmul", [("A", a), ("B", a)]))
        before = statistics(self.stub, "matmul").inference_stats.success.count
        responses = self.stub.ModelStreamInfer(iter(sent), timeout=60)  # never read
        answer_bytes = 256 * 256 * 4
        # What 3 accepted requests may hold: each its message, its copy and its answer.
        bound = 3 * 8 * answer_bytes
        deadline = time.time() + 30  # until the stream's bound is computed and held
        while statistics(self.stub, "matmul").inference_stats.success.count < before + 3:
            self.assertLess(time.time(), deadline, "the stream's first requests were not served")
        # Held to the bound at every moment from then on: 2 s in which a server that read
        # on past unwritten answers would hold tens of them (a request takes a millisecond).
        held = []
        watch_until = time.time() + 2
        while time.time() < watch_until:
            held.append(metric_sum(self.server.metrics_url, "gemmserve_inflight_bytes"))
            self.assertLess(held[-1], bound, f"the server holds more than the stream's bound: "
                            f"{held[-1]:.0f} bytes after {len(held)} looks")
            time.sleep(0.02)
        self.assertGreater(max(held), 0, "nothing held: the answers were all written")
        self.assert_server_still_serves()
        stats = statistics(self.stub, "matmul")
        responses.cancel()
        sent.close()
        deadline = time.time() + 30
        while metric_sum(self.server.metrics_url, "gemmserve_inflight_bytes") > 0:
            self.assertLess(time.time(), deadline, "a cancelled stream's answers are still held")
            time.sleep(0.05)
        self.assertLess(statistics(self.stub, "matmul").inference_stats.success.count,
                        stats.inference_stats.success.count + 16,
                        "requests beyond the bound were read and computed")


class StreamBatchingTest(GemmServeTestCase):
    """A stream's requests and unary ones merge into one kernel call. The long queue
    delay makes a batch wait for its closed-loop clients to come back."""
    server_flags = ("--builtin_max_queue_delay_us=200000",)

    def test_stream_and_unary_requests_are_batched_together(self):
        """A stream sends 3-row requests, a unary caller 5-row ones, each one at a time:
        a kernel call of 8 rows (batch_stats counts calls by rows) holds one of each."""
        rng = np.random.default_rng(3)
        b = small_ints(rng, (256, 256))
        a3, a5 = small_ints(rng, (3, 256)), small_ints(rng, (5, 256))
        client = GemmServeClient(self.server.address)
        self.addCleanup(client.close)
        rounds, failures = 40, []

        def unary():
            for _ in range(rounds):
                if not np.array_equal(client.infer("matmul", A=a5, B=b)["Y"], a5 @ b):
                    failures.append("unary")

        def one_at_a_time():
            sent = HeldOpen()
            answers = client.stream_infer(sent, timeout=120)
            for _ in range(rounds):
                sent.send(make_infer_request("matmul", [("A", a3), ("B", b)]))
                answer = next(answers)
                if answer.error or not np.array_equal(answer.outputs["Y"], a3 @ b):
                    failures.append(answer.error or "stream")
            sent.close()
            if list(answers):
                failures.append("answers beyond the requests")

        threads = [threading.Thread(target=f) for f in (unary, one_at_a_time)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(failures, [])
        stats = statistics(self.stub, "matmul")
        self.assertEqual(stats.inference_stats.success.count, 2 * rounds)
        by_rows = {b.batch_size: b.compute_infer.count for b in stats.batch_stats}
        self.assertEqual(set(by_rows) - {3, 5, 8}, set(), by_rows)
        self.assertGreater(by_rows.get(8, 0), 0,
                           f"no kernel call merged a stream request with a unary one: {by_rows}")


class Blocker:
    """A long MatMul on a unary call (FP32 4096 x 4096 x 4096, 137 GFLOP: 0.4 s or more on
    one core of any CPU the gate meets, whose single-core FP32 peak is under 300 GFLOP/s)
    that holds a server of one compute thread: what a stream sends meanwhile (a few small
    requests, read in milliseconds) is read and queued behind it, and a cancel reaches the
    server before it ends. wait_queued() checks that it still ran when the test looked."""

    def __init__(self, test):
        self.test = test
        a = np.ones((4096, 4096), np.float32)
        self.future = test.stub.ModelInfer.future(
            make_infer_request("matmul", [("A", a), ("B", a)]), timeout=120)
        deadline = time.time() + 60  # running: accepted, and no longer queued
        while not (self.inflight() >= 1 and self.queued() == 0):
            test.assertLess(time.time(), deadline, "the long call never started")
            time.sleep(0.005)

    def inflight(self):
        return metric_sum(self.test.server.metrics_url, "gemmserve_inflight_requests")

    def queued(self):
        return metric_sum(self.test.server.metrics_url, "gemmserve_queue_depth", model="matmul")

    def wait_queued(self, count):
        """Until `count` requests wait behind the long call, which must still run."""
        deadline = time.time() + 30
        while self.queued() < count:
            self.test.assertLess(time.time(), deadline,
                                 f"{self.queued():.0f} of the stream's requests were read and "
                                 f"queued, not {count}")
            time.sleep(0.005)
        self.test.assertFalse(self.future.done(), "the long call ended before the stream's "
                              "requests were read: nothing was queued behind it")

    def finish(self):
        y = decode_outputs(self.future.result(timeout=120))["Y"]
        np.testing.assert_array_equal(y[:2, :2], [[4096.0] * 2] * 2)


def stream_batches(before, after):
    """{rows: kernel calls} of the model's calls between two statistics."""
    was = {b.batch_size: b.compute_infer.count for b in before.batch_stats}
    now = {b.batch_size: b.compute_infer.count for b in after.batch_stats}
    return {rows: n - was.get(rows, 0) for rows, n in now.items() if n > was.get(rows, 0)}


class StreamQueueTest(GemmServeTestCase):
    """A stream's requests are read ahead of its answers, up to its bound and no further,
    and a cancel drops those still queued: seen while a long call holds the server's one
    compute thread, so that what the stream had read is in the queue, not yet computed."""
    compute_threads = 1
    server_flags = ("--grpc_max_stream_inflight=3",)

    def test_a_stream_has_its_bound_in_flight_at_once_and_no_more(self):
        rng = np.random.default_rng(5)
        calls = [("matmul", {"A": small_ints(rng, (2, 64)), "B": small_ints(rng, (64, 64))}, i)
                 for i in range(12)]
        before = statistics(self.stub, "matmul")
        blocker = Blocker(self)
        sent = HeldOpen()
        for call in calls:
            sent.send(call)
        answers, failed = [], []

        def read():
            try:
                answers.extend(self.client().stream_infer(iter(sent), timeout=120))
            except Exception as e:  # noqa: BLE001 (reported below)
                failed.append(e)

        reader = threading.Thread(target=read)
        reader.start()
        # A server that took a stream's requests one at a time would queue one, never 3.
        blocker.wait_queued(3)
        blocker.finish()
        sent.close()
        reader.join(timeout=120)
        self.assertEqual(failed, [])
        self.assertEqual(sorted(int(a.id) for a in answers), list(range(12)))
        for answer in answers:
            _, inputs, _ = calls[int(answer.id)]
            np.testing.assert_array_equal(answer.outputs["Y"], inputs["A"] @ inputs["B"])
        # The three read while the long call ran left together, in one call of 6 rows,
        # and no call held more: a server that read past the bound would have queued
        # all 12 and computed 24 rows at once.
        batches = stream_batches(before, statistics(self.stub, "matmul"))
        batches.pop(4096, None)
        self.assertIn(6, batches, batches)
        self.assertLessEqual(set(batches), {2, 4, 6}, batches)

    def test_cancel_drops_the_queued_requests_and_the_server_stays_healthy(self):
        a = np.ones((2, 64), np.float32)
        before = statistics(self.stub, "matmul")
        url = self.server.metrics_url
        cancelled = metric_sum(url, "gemmserve_rejected_total", model="matmul",
                               reason="cancelled")
        blocker = Blocker(self)
        requests = [make_infer_request("matmul", [("A", a), ("B", np.ones((64, 64), np.float32))])
                    for _ in range(12)]
        responses = self.stub.ModelStreamInfer(iter(requests), timeout=120)
        blocker.wait_queued(3)
        responses.cancel()
        with self.assertRaises(grpc.RpcError) as raised:
            for _ in responses:
                pass
        self.assertEqual(raised.exception.code(), grpc.StatusCode.CANCELLED)
        blocker.finish()
        deadline = time.time() + 30
        while metric_sum(url, "gemmserve_inflight_requests") > 0:
            self.assertLess(time.time(), deadline, "cancelled requests still in flight")
            time.sleep(0.05)
        # The three queued were dropped when a batch reached them, none computed; a server
        # that ignored the cancel would have computed them after the long call.
        after = statistics(self.stub, "matmul")
        self.assertEqual(after.inference_stats.success.count
                         - before.inference_stats.success.count, 1)
        self.assertEqual(metric_sum(url, "gemmserve_rejected_total", model="matmul",
                                    reason="cancelled") - cancelled, 3)
        self.assert_server_still_serves()

    def client(self):
        client = GemmServeClient(self.server.address)
        self.addCleanup(client.close)
        return client


class StreamTokenTest(unittest.TestCase):
    """With a token file, the stream's metadata carries the token, checked once."""

    @classmethod
    def setUpClass(cls):
        serve_with_tokens(cls, "stream-secret\n")

    def test_the_token_is_checked_once_for_the_stream(self):
        request = make_infer_request("matmul", [("A", np.ones((1, 1), np.float32)),
                                                ("B", np.ones((1, 1), np.float32))])
        with self.assertRaises(grpc.RpcError) as raised:
            list(self.stub.ModelStreamInfer(iter([request]), timeout=10))
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        good = [("authorization", "Bearer stream-secret")]
        answers = list(self.stub.ModelStreamInfer(iter([request] * 3), timeout=10,
                                                  metadata=good))
        self.assertEqual([a.error_message for a in answers], [""] * 3)


class StreamDrainTest(unittest.TestCase):
    """SIGTERM: the stream's accepted requests are answered, then it ends UNAVAILABLE."""

    def test_sigterm_writes_the_answers_a_slow_reader_has_not_taken_then_ends_the_stream(self):
        # The client sends every request and reads nothing: HTTP/2 flow control holds
        # the server's writes, so when the server has computed every request some of
        # its answers are still unwritten (the engine's gauge counts their bytes until
        # written), whatever the machine's speed. The signal comes then; the answers
        # must all be written before the stream ends.
        count = 12
        server = ServerProcess("--shutdown_grace_seconds=60",
                               f"--grpc_max_stream_inflight={count}").start()
        self.addCleanup(server.stop)
        channel = open_channel(server.address)
        self.addCleanup(channel.close)
        stub = pb2_grpc.GRPCInferenceServiceStub(channel)
        a, b = np.ones((1024, 64), np.float32), np.ones((64, 1024), np.float32)
        before = statistics(stub, "matmul").inference_stats.success.count
        sent = HeldOpen()  # the client never finishes sending: the server ends the stream
        for i in range(count):
            request = make_infer_request("matmul", [("A", a), ("B", b)])
            request.id = str(i)
            sent.send(request)
        responses = stub.ModelStreamInfer(iter(sent), timeout=120)
        deadline = time.time() + 60
        while statistics(stub, "matmul").inference_stats.success.count - before < count:
            self.assertLess(time.time(), deadline, "the stream's requests were never computed")
            time.sleep(0.01)
        unwritten = metric_sum(server.metrics_url, "gemmserve_inflight_bytes")
        self.assertGreaterEqual(unwritten, 4 << 20, "no answer was held unwritten at the signal")
        server.proc.send_signal(signal.SIGTERM)
        answers = []
        with self.assertRaises(grpc.RpcError) as ended:
            for response in responses:
                answers.append(response)
        sent.close()
        self.assertEqual(ended.exception.code(), grpc.StatusCode.UNAVAILABLE,
                         ended.exception.details())
        self.assertEqual([r.error_message for r in answers], [""] * len(answers))
        self.assertEqual(sorted(int(r.infer_response.id) for r in answers), list(range(count)))
        y = np.frombuffer(answers[-1].infer_response.raw_output_contents[0], np.float32)
        np.testing.assert_array_equal(y[:3], [64.0] * 3)
        self.assertEqual(server.proc.wait(timeout=60), 0, server.stderr_text())


if __name__ == "__main__":
    unittest.main()
