"""TraceSetting (Triton's trace mode) through a real server: the settings over gRPC and
HTTP (global and per model, cleared back to the global ones), what is refused, the trace
files as Triton names and rotates them, Triton's trace JSON with our batch_size and the
W3C traceparent a request carried, trace_count, tokens, and the trace files' safety and bound
(never written through a link; at most --trace_max_files and --trace_max_bytes kept)."""
import glob
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import grpc
import numpy as np

from gemmserve_client import GemmServeClient, make_infer_request, pb2
from gemmserve_client.http import HttpClient
from gemmserve_testing.base import GemmServeTestCase, serve_with_tokens
from gemmserve_testing.server import server_binary

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
        """The numbered trace files (the index goes on across this class's tests); not a
        link a test planted among them."""
        return numbered_files(self.trace_file)

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


    def test_a_link_at_the_next_trace_files_name_keeps_its_target(self):
        """Issue 50, finding 4: a symbolic link planted where the next trace file goes is
        left as it is and its target is not written; the trace takes the next free name."""
        self.post_settings({"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                            "log_frequency": "1"})
        self.matmul_grpc()
        self.read_traces(1)
        [first] = self.trace_files()
        planted = f"{self.trace_file}.{int(first.rsplit('.', 1)[1]) + 1}"
        elsewhere = tempfile.mkdtemp(prefix="gemmserve-elsewhere-")
        self.addCleanup(shutil.rmtree, elsewhere, True)
        target = os.path.join(elsewhere, "precious")
        with open(target, "w") as f:
            f.write("precious\n")
        os.symlink(target, planted)
        self.matmul_grpc()
        wait_until(lambda: len(self.trace_files()) == 2 or read_text(target) != "precious\n")
        self.assertEqual(read_text(target), "precious\n", "a trace was written through the link")
        self.assertTrue(os.path.islink(planted))
        self.assertEqual(len(self.read_traces(2)), 2)

    def test_many_traces_keep_the_newest_files_within_the_default_bound(self):
        """Issue 50, finding 4: with log_frequency 1 and trace_rate 1, a file per request,
        at most 16 files (--trace_max_files' default) stay: the oldest are removed."""
        self.post_settings({"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                            "log_frequency": "1"})
        self.matmul_grpc()
        [first] = self.read_traces(1)
        for _ in range(40):
            self.matmul_grpc()
        last = first["id"] + 40
        wait_until(lambda: last in trace_ids(self.trace_files()))
        self.assertEqual(len(self.trace_files()), 16)
        ids = trace_ids(self.trace_files())
        self.assertEqual(len(ids), 16)
        # The newest (a trace is recorded once its answer is handed over: two neighbours
        # may swap places).
        self.assertGreaterEqual(min(ids), last - 16)


def numbered_files(trace_file):
    """FILE.<k> in the order of k, links left out."""
    paths = [p for p in glob.glob(trace_file + ".*")
             if p.rsplit(".", 1)[1].isdigit() and not os.path.islink(p)]
    return sorted(paths, key=lambda p: int(p.rsplit(".", 1)[1]))


def read_text(path):
    with open(path) as f:
        return f.read()


def trace_ids(paths):
    """The ids of the traces in `paths`; a file removed or half written while read is
    left out."""
    ids = []
    for path in paths:
        try:
            ids.extend(t["id"] for t in json.loads(read_text(path)))
        except (OSError, json.JSONDecodeError):
            pass
    return ids


def wait_until(condition, timeout=20):
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            raise AssertionError(f"not so after {timeout} s")
        time.sleep(0.05)


class TraceFileBoundTest(GemmServeTestCase):
    """--trace_max_files and --trace_max_bytes (issue 50, finding 4): the trace files this
    server keeps, at most 4 here, of 256 KiB in all, so of 64 KiB each."""
    trace_dir = tempfile.mkdtemp(prefix="gemmserve-trace-bound-")
    trace_file = os.path.join(trace_dir, "trace.json")
    server_flags = (f"--trace_file={trace_file}", "--trace_max_files=4",
                    "--trace_max_bytes=262144")

    @classmethod
    def setUpClass(cls):
        cls.addClassCleanup(shutil.rmtree, cls.trace_dir, True)
        super().setUpClass()

    def test_files_and_bytes_stay_within_the_bound_and_the_oldest_go(self):
        requests = 1500  # about 400 bytes of trace each: some 10 files of 64 KiB
        with HttpClient(self.server.http_url) as http:
            status, _, data = http.request("POST", "/v2/trace/setting", json.dumps(
                {"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                 "log_frequency": "100000"}).encode())
            self.assertEqual(status, 200, data)
            request = make_infer_request("matmul", [("A", np.ones((2, 2), np.float32)),
                                                    ("B", np.ones((2, 2), np.float32))])
            for _ in range(requests):
                self.stub.ModelInfer(request, timeout=30)
            # What was collected goes to the next file when log_frequency changes.
            status, _, data = http.request("POST", "/v2/trace/setting",
                                           b'{"log_frequency": "1"}')
            self.assertEqual(status, 200, data)
        wait_until(lambda: requests in trace_ids(numbered_files(self.trace_file)))
        files = numbered_files(self.trace_file)
        sizes = [os.path.getsize(p) for p in files]
        self.assertLessEqual(len(files), 4, files)
        self.assertLessEqual(sum(sizes), 262144, sizes)
        self.assertLessEqual(max(sizes), 65536, sizes)
        indices = [int(p.rsplit(".", 1)[1]) for p in files]
        self.assertGreater(indices[0], 0, "the oldest files were removed")
        self.assertEqual(indices, list(range(indices[0], indices[0] + len(files))))
        ids = sorted(trace_ids(files))
        self.assertEqual(len(ids), len(set(ids)))
        self.assertEqual(ids[-1], requests)
        self.assertGreater(ids[0], 1, "the oldest traces were removed")
        # The newest are kept, all but two neighbours swapped at the cut at most.
        self.assertGreaterEqual(len(ids), requests - ids[0])

    def test_bounds_out_of_range_refuse_to_start(self):
        for flag in ("--trace_max_files=0", "--trace_max_files=-3", "--trace_max_bytes=0",
                     "--trace_max_bytes=65535"):
            with self.subTest(flag=flag):
                done = subprocess.run(
                    [server_binary(), "--grpc_port=0", "--http_port=-1", "--metrics_port=-1",
                     "--host=127.0.0.1", f"--trace_file={self.trace_file}", flag],
                    stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
                self.assertNotEqual(done.returncode, 0)
                self.assertIn(flag.split("=")[0], done.stderr.decode(errors="replace"))


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
