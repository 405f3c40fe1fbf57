"""Many clients at once with different models, shapes and datatypes: each answer
equals its own reference, so nothing crosses between requests that the server
batches or runs side by side (RELIABILITY.md F4). Over gRPC, and over HTTP
(binary and JSON) with gRPC clients at the same time."""
import concurrent.futures
import unittest

import grpc
import numpy as np

from gemmserve_client import decode_outputs, make_infer_request, pb2_grpc
from gemmserve_client.http import HttpClient
from gemmserve_testing import references as ref
from gemmserve_testing.base import GemmServeTestCase, open_channel

THREADS = 8
REQUESTS_PER_THREAD = 20


def random_case(rng):
    """A random MatMul or GroupedMatMul case: (request, output name, datatype, checker of
    the decoded output)."""
    model, inputs, name, datatype, check = random_inputs(rng)
    return make_infer_request(model, inputs), name, datatype, check


def random_inputs(rng):
    """(model, [(name, array, datatype)], output name, datatype, checker)."""
    if rng.random() < 0.5:
        datatype = str(rng.choice(ref.MATMUL_TYPES))
        batch = [int(d) for d in rng.integers(1, 3, size=rng.integers(0, 3))]
        m, k, n = (int(v) for v in rng.integers(0, 24, size=3))
        a = ref.random_wire(rng, datatype, (*batch, m, k))
        b = ref.random_wire(rng, datatype, (k, n))
        inputs = [("A", a, datatype), ("B", b, datatype)]
        return "matmul", inputs, "Y", datatype, lambda y: ref.assert_matmul_result(
            y, a, b, datatype, f"matmul {list(a.shape)} x {list(b.shape)}")
    datatype = str(rng.choice(ref.FLOAT_TYPES))
    m, k, n, s = (int(v) for v in rng.integers(0, 12, size=4))
    g = int(rng.integers(1, 6))
    x = ref.random_wire(rng, datatype, (m, k))
    w = ref.random_wire(rng, datatype, (g, k, n))
    idx = rng.integers(0, g, size=(m, s)).astype(np.int32 if rng.random() < 0.5 else np.int64)
    bias = ref.random_wire(rng, datatype, (g, n)) if rng.random() < 0.5 else None
    inputs = [("input", x, datatype), ("weights", w, datatype), ("group_indices", idx)]
    if bias is not None:
        inputs.append(("bias", bias, datatype))
    return "grouped_matmul", inputs, "output", datatype, lambda out: ref.assert_grouped_matmul_result(
        out, x, w, idx, bias, datatype, f"grouped_matmul M={m} K={k} N={n} G={g} S={s}")


class ConcurrentRequestsTest(GemmServeTestCase):

    def run_client(self, seed, stub):
        rng = np.random.default_rng(seed)
        for _ in range(REQUESTS_PER_THREAD):
            request, name, datatype, check = random_case(rng)
            response = stub.ModelInfer(request, timeout=60)
            self.assertEqual([t.datatype for t in response.outputs], [datatype])
            check(decode_outputs(response)[name])
        return REQUESTS_PER_THREAD

    def run_all(self, stub_for_thread):
        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            futures = [pool.submit(self.run_client, 1000 + t, stub_for_thread(t))
                       for t in range(THREADS)]
            done = sum(f.result(timeout=120) for f in futures)
        self.assertEqual(done, THREADS * REQUESTS_PER_THREAD)
        self.server.assert_alive()

    def test_mixed_requests_on_one_shared_channel_each_get_their_own_answer(self):
        self.run_all(lambda t: self.stub)

    def test_mixed_requests_on_separate_connections_each_get_their_own_answer(self):
        channels = [open_channel(self.server.address) for _ in range(THREADS)]
        try:
            self.run_all(lambda t: pb2_grpc.GRPCInferenceServiceStub(channels[t]))
        finally:
            for channel in channels:
                channel.close()

    def run_http_client(self, seed):
        """Its own keep-alive connection; binary and JSON requests alternate."""
        rng = np.random.default_rng(seed)
        with HttpClient(self.server.http_url) as client:
            for i in range(REQUESTS_PER_THREAD):
                model, inputs, name, _, check = random_inputs(rng)
                check(client.infer(model, inputs, binary=bool(i % 2))[name])
        return REQUESTS_PER_THREAD

    def test_http_and_grpc_clients_at_once_each_get_their_own_answer(self):
        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            futures = [pool.submit(self.run_http_client, 2000 + t) if t % 2 else
                       pool.submit(self.run_client, 2000 + t, self.stub) for t in range(THREADS)]
            done = sum(f.result(timeout=120) for f in futures)
        self.assertEqual(done, THREADS * REQUESTS_PER_THREAD)
        self.server.assert_alive()

    def test_identical_shapes_with_different_values_are_not_mixed_up(self):
        # Same shape and datatype everywhere: the case a batcher merges most eagerly.
        def one(seed):
            rng = np.random.default_rng(seed)
            a = rng.integers(-100, 100, size=(8, 16)).astype(np.float32)
            b = rng.integers(-100, 100, size=(16, 8)).astype(np.float32)
            y = self.run_matmul(a, b, "FP32")
            np.testing.assert_array_equal(y, a @ b)
            return 1
        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            done = sum(pool.map(one, range(THREADS * REQUESTS_PER_THREAD), timeout=120))
        self.assertEqual(done, THREADS * REQUESTS_PER_THREAD)

    def test_requests_abandoned_at_their_deadline_leave_the_server_serving(self):
        # 16 GFLOP each (8 of them for 2 compute threads) with a 20 ms deadline: the
        # client gives up while the work is queued or running (RELIABILITY.md F1/F2).
        a = np.ones((2000, 2000), np.float32)
        request = make_infer_request("matmul", [("A", a), ("B", a)])

        def abandoned(_):
            try:
                self.stub.ModelInfer(request, timeout=0.02)
            except grpc.RpcError as error:
                return error.code()
            return grpc.StatusCode.OK
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            codes = list(pool.map(abandoned, range(8), timeout=60))
        # A very fast machine might finish the first one in time; none may fail otherwise.
        self.assertLessEqual(set(codes), {grpc.StatusCode.DEADLINE_EXCEEDED,
                                          grpc.StatusCode.OK}, codes)
        self.assertIn(grpc.StatusCode.DEADLINE_EXCEEDED, codes)
        self.server.assert_alive()
        self.assert_server_still_serves()

if __name__ == "__main__":
    unittest.main(verbosity=2)
