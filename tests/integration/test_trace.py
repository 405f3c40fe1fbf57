"""TraceSetting (Triton's trace mode) through a real server: the settings over gRPC and
HTTP (global and per model, cleared back to the global ones), what is refused, the trace
files as Triton names and rotates them, Triton's trace JSON with our batch_size and the
W3C traceparent a request carried, trace_count, and tokens."""
import glob
import json
import os
import shutil
import tempfile
import time
import unittest

import grpc
import numpy as np

from gemmserve_client import GemmServeClient, make_infer_request, pb2
from gemmserve_client.http import HttpClient
from gemmserve_testing.base import GemmServeTestCase, serve_with_tokens

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
STAMPS = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
          "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"]


class TracedServerTest(GemmServeTestCase):
    """A server with --trace_file; tests set what they need and turn tracing off again."""
    trace_dir = tempfile.mkdtemp(prefix="gemmserve-trace-")
    trace_file = os.path.join(trace_dir, "trace.json")
    server_flags = (f"--trace_file={trace_file}",)

    @classmethod
    def setUpClass(cls):
        cls.addClassCleanup(shutil.rmtree, cls.trace_dir, True)
        super().setUpClass()

    def setUp(self):
        self.http = HttpClient(self.server.http_url)
        self.addCleanup(self.http.close)
        self.addCleanup(self.reset)
        for path in glob.glob(self.trace_file + "*"):
            os.remove(path)

    def reset(self):
        for model in ("matmul", "grouped_matmul"):
            self.post_settings({"trace_level": None, "trace_rate": None, "trace_count": None},
                               model)
        self.post_settings({"trace_level": None, "trace_rate": None, "trace_count": None,
                            "log_frequency": None})

    def post_settings(self, settings, model=None, expect=200):
        path = f"/v2/models/{model}/trace/setting" if model else "/v2/trace/setting"
        status, _, data = self.http.request("POST", path, json.dumps(settings).encode())
        self.assertEqual(status, expect, data)
        return json.loads(data)

    def get_settings(self, model=None):
        path = f"/v2/models/{model}/trace/setting" if model else "/v2/trace/setting"
        status, _, data = self.http.request("GET", path)
        self.assertEqual(status, 200, data)
        return json.loads(data)

    def matmul_grpc(self, rows=3, traceparent=None):
        a = np.ones((rows, 4), np.float32)
        request = make_infer_request("matmul", [("A", a), ("B", np.ones((4, 2), np.float32))])
        metadata = [("traceparent", traceparent)] if traceparent else None
        self.stub.ModelInfer(request, timeout=30, metadata=metadata)

    def matmul_http(self, traceparent=None):
        body = json.dumps({"inputs": [
            {"name": "A", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]},
            {"name": "B", "shape": [2, 2], "datatype": "FP32", "data": [1, 0, 0, 1]}]}).encode()
        headers = {"traceparent": traceparent} if traceparent else None
        status, _, data = self.http.request("POST", "/v2/models/matmul/infer", body, headers)
        self.assertEqual(status, 200, data)

    def grouped_grpc(self):
        request = make_infer_request("grouped_matmul", [
            ("input", np.ones((2, 3), np.float32)), ("weights", np.ones((2, 3, 4), np.float32)),
            ("group_indices", np.zeros((2, 1), np.int64))])
        self.stub.ModelInfer(request, timeout=30)

    def trace_files(self):
        """The numbered trace files (the index goes on across this class's tests)."""
        return sorted(glob.glob(self.trace_file + ".*"), key=lambda p: int(p.rsplit(".", 1)[1]))

    def read_traces(self, count, timeout=20):
        """The traces in the numbered files once there are `count` of them, in file order."""
        deadline = time.time() + timeout
        while True:
            traces = []
            try:
                for path in self.trace_files():
                    with open(path) as f:
                        traces.extend(json.load(f))
            except json.JSONDecodeError:
                pass  # being written
            if len(traces) >= count:
                self.assertEqual(len(traces), count, traces)
                return traces
            self.assertLess(time.time(), deadline, f"{len(traces)} of {count} traces written")
            time.sleep(0.05)

    def test_the_settings_over_both_protocols(self):
        self.assertIn("trace", self.http.server_metadata()["extensions"])
        self.assertEqual(self.get_settings(), {
            "log_frequency": "0", "trace_count": "-1", "trace_file": self.trace_file,
            "trace_level": ["OFF"], "trace_mode": "triton", "trace_rate": "1000"})
        answer = self.post_settings({"trace_level": ["TIMESTAMPS"], "trace_rate": 5})
        self.assertEqual((answer["trace_level"], answer["trace_rate"]), (["TIMESTAMPS"], "5"))
        request = pb2.TraceSettingRequest(model_name="matmul")
        request.settings["trace_rate"].value.append("2")
        response = self.stub.TraceSetting(request, timeout=10)
        self.assertEqual(list(response.settings["trace_rate"].value), ["2"])
        self.assertEqual(list(response.settings["trace_level"].value), ["TIMESTAMPS"])  # global's
        self.assertEqual(self.get_settings("matmul")["trace_rate"], "2")
        self.assertEqual(self.get_settings("grouped_matmul")["trace_rate"], "5")
        self.assertEqual(self.post_settings({"trace_rate": None}, "matmul")["trace_rate"], "5")
        self.assertEqual(self.get_settings()["trace_rate"], "5")

    def test_what_is_refused_changes_nothing(self):
        for body, status, message in [
                ({"trace_file": "/tmp/elsewhere.json"}, 400, "--trace_file"),
                ({"trace_level": ["TENSORS"]}, 400, "not served"),
                ({"trace_rate": "0"}, 400, "at least 1"),
                ({"trace_count": "many"}, 400, "one integer"),
                ({"trace_rate": {"n": 1}}, 400, "must be a string"),
                ({"trace_level": ["TIMESTAMPS"], "trace_bogus": "1"}, 400, "unknown trace")]:
            status_got, _, data = self.http.request("POST", "/v2/trace/setting",
                                                    json.dumps(body).encode())
            self.assertEqual(status_got, status, data)
            self.assertIn(message, json.loads(data)["error"])
        self.assertEqual(self.get_settings()["trace_level"], ["OFF"])
        status, _, data = self.http.request("GET", "/v2/models/nope/trace/setting")
        self.assertEqual(status, 404, data)
        request = pb2.TraceSettingRequest()
        request.settings["trace_level"].value.append("TENSORS")
        error = self.rpc_error(self.stub.TraceSetting, request)
        self.assertEqual(error.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_traces_are_tritons_json_with_batch_size_and_traceparent(self):
        self.post_settings({"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                            "log_frequency": "2"})
        self.matmul_grpc(rows=3, traceparent=TRACEPARENT)
        self.matmul_http(traceparent=TRACEPARENT)
        self.matmul_grpc(rows=5, traceparent="not-a-traceparent")
        self.matmul_http()
        traces = self.read_traces(4)
        self.assertEqual(len(self.trace_files()), 2, "log_frequency 2: two traces a file")
        self.assertEqual(sorted(t["id"] for t in traces), sorted(set(t["id"] for t in traces)))
        for trace in traces:
            self.assertEqual((trace["model_name"], trace["model_version"]), ("matmul", 1))
            self.assertEqual([s["name"] for s in trace["timestamps"]], STAMPS)
            ns = [s["ns"] for s in trace["timestamps"]]
            self.assertEqual(ns, sorted(ns), trace)
            self.assertGreater(ns[0], 1.6e18)  # Unix nanoseconds
        by_rows = sorted(traces, key=lambda t: t["id"])
        self.assertGreaterEqual(by_rows[0]["batch_size"], 3)
        self.assertGreaterEqual(by_rows[2]["batch_size"], 5)
        self.assertEqual([t.get("traceparent") for t in by_rows],
                         [TRACEPARENT, TRACEPARENT, None, None])

    def test_a_models_own_level_wins_and_the_count_is_spent(self):
        self.post_settings({"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                            "log_frequency": "1"})
        self.post_settings({"trace_level": ["OFF"]}, "matmul")
        self.matmul_grpc()
        self.grouped_grpc()
        traces = self.read_traces(1)
        self.assertEqual([t["model_name"] for t in traces], ["grouped_matmul"])
        self.post_settings({"trace_level": None}, "matmul")  # back to the global ON
        self.post_settings({"trace_count": "2"})
        for _ in range(6):
            self.matmul_grpc()
        traces = self.read_traces(3)
        self.assertEqual([t["model_name"] for t in traces],
                         ["grouped_matmul", "matmul", "matmul"])
        self.assertEqual(self.get_settings()["trace_count"], "0")  # spent: none past it

    def test_a_stream_request_is_traced_with_the_streams_traceparent(self):
        self.post_settings({"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                            "log_frequency": "3"})
        request = make_infer_request("matmul", [("A", np.ones((2, 2), np.float32)),
                                                ("B", np.ones((2, 2), np.float32))])
        answers = list(self.stub.ModelStreamInfer(iter([request] * 3), timeout=30,
                                                  metadata=[("traceparent", TRACEPARENT)]))
        self.assertEqual(len(answers), 3)
        traces = self.read_traces(3)
        self.assertEqual([t["traceparent"] for t in traces], [TRACEPARENT] * 3)


class UntracedServerTest(GemmServeTestCase):
    """Without --trace_file tracing cannot be turned on."""

    def test_turning_tracing_on_needs_a_trace_file(self):
        with HttpClient(self.server.http_url) as http:
            status, _, data = http.request("POST", "/v2/trace/setting",
                                           b'{"trace_level": ["TIMESTAMPS"]}')
            self.assertEqual(status, 400, data)
            self.assertIn("--trace_file", json.loads(data)["error"])
            status, _, data = http.request("GET", "/v2/trace/setting")
            self.assertEqual(json.loads(data)["trace_level"], ["OFF"])


class TraceTokenTest(unittest.TestCase):
    """The trace settings are behind tokens, as the log settings."""

    @classmethod
    def setUpClass(cls):
        serve_with_tokens(cls, "trace-secret\n")

    def test_trace_settings_need_the_token(self):
        error = None
        try:
            self.stub.TraceSetting(pb2.TraceSettingRequest(), timeout=10)
        except grpc.RpcError as e:
            error = e
        self.assertIsNotNone(error)
        self.assertEqual(error.code(), grpc.StatusCode.UNAUTHENTICATED)
        with HttpClient(self.server.http_url) as http:
            status, _, _ = http.request("GET", "/v2/trace/setting")
            self.assertEqual(status, 401)
        with HttpClient(self.server.http_url, token="trace-secret") as http:
            status, _, data = http.request("GET", "/v2/trace/setting")
            self.assertEqual(status, 200, data)


if __name__ == "__main__":
    unittest.main()
