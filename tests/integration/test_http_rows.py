"""RELIABILITY.md's HTTP rows H1-H6, and the envelope, MatMul and GroupedMatMul
rows through REST, against a real server process over real sockets. Every
bad request must get a JSON {"error": ...} with the status of its gRPC
counterpart, and the server must then still answer valid requests (over both
protocols) correctly."""
import gzip
import json
import os
import re
import signal
import socket
import threading
import time
import unittest
import zlib

import grpc
import numpy as np

from gemmserve_client import make_infer_request
from gemmserve_client.http import HttpClient, decode_infer_response, encode_infer_request
from gemmserve_testing.base import GemmServeTestCase
from gemmserve_testing.process import metric_sum

STATUS_OF = {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.NOT_FOUND: 404,
             grpc.StatusCode.UNAVAILABLE: 503, grpc.StatusCode.UNAUTHENTICATED: 401,
             grpc.StatusCode.RESOURCE_EXHAUSTED: 413, grpc.StatusCode.UNIMPLEMENTED: 501}


def raw_call(port, data, timeout=10.0, shut_write=False):
    """Sends bytes as they are; returns (status, headers, body) of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the whole body was read: the answer is still there
        if shut_write:
            s.shutdown(socket.SHUT_WR)
        received = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
            head, sep, rest = received.partition(b"\r\n\r\n")
            if sep:
                length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")]
                if length and len(rest) >= length[0]:
                    break
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1]) if lines[0] else 0
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.decode().partition(":") for line in lines[1:])}
    return status, headers, body


TCP_ESTABLISHED = 1  # include/net/tcp_states.h, as /proc/net/tcp writes it (hex)


def server_end_state(server_port, client_port):
    """The kernel's TCP state of the server's end of a loopback connection (the
    socket whose local port is `server_port` and remote port `client_port`), from
    /proc/net/tcp and tcp6; None when the kernel holds no such socket any more."""
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(path) as table:
            next(table)
            for line in table:
                local, remote, state = line.split()[1:4]
                if (int(local.rsplit(":", 1)[1], 16) == server_port
                        and int(remote.rsplit(":", 1)[1], 16) == client_port):
                    return int(state, 16)
    return None


def post(path, body, headers=()):
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return head.encode() + body


class HttpRowsCase(GemmServeTestCase):
    def setUp(self):
        self.http = HttpClient(self.server.http_url)
        self.addCleanup(self.http.close)

    def assert_http_error(self, status, body, code, text=""):
        self.server.assert_alive()
        self.assertEqual(status, code, body[:300])
        message = json.loads(body)["error"]
        self.assertTrue(message.strip())
        self.assertLessEqual(len(message), 2048)
        self.assertIn(text, message)
        self.assert_server_still_serves()
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        y = self.http.infer("matmul", [("A", a), ("B", np.eye(3, dtype=np.float32))])["Y"]
        np.testing.assert_array_equal(y, a)

    def infer_raw(self, body, headers=None, model="matmul"):
        return self.http.request("POST", f"/v2/models/{model}/infer", body, headers)


class JsonRowsTest(HttpRowsCase):
    server_flags = ("--max_message_bytes=4000000", "--max_output_bytes=16000000")

    def test_h1_malformed_empty_cut_short_and_trailing_garbage(self):
        for body in (b"", b"{", b'{"inputs": [}', b'{"inputs":[]} garbage', b"\xff\xfe",
                     b'{"inputs":[{"name":"A","shape":[1],"datatype":"FP32","data":[1]}]}}'):
            with self.subTest(body=body[:30]):
                status, _, data = self.infer_raw(body)
                self.assert_http_error(status, data, 400)
        # A body shorter than its Content-Length, then the client stops sending.
        status, _, data = raw_call(self.server.http_port,
                                   post("/v2/models/matmul/infer", b'{"inputs":[]}' + b" " * 50)[:-30],
                                   shut_write=True)
        self.assert_http_error(status, data, 400, "malformed HTTP request")

    def test_h2_deep_nesting_many_inputs_ranges_kinds_and_shapes(self):
        deep = (b'{"inputs":[{"name":"A","shape":[1],"datatype":"FP32","data":' +
                b"[" * 100000 + b"1" + b"]" * 100000 + b"}]}")
        many = b'{"inputs":[' + b",".join([b'{}'] * 1000000) + b"]}"
        cases = [
            (deep, "nested deeper"),
            (many, "more than 1024 inputs"),
            (b'{"inputs":[{"name":"A","shape":[1,1],"datatype":"INT32","data":[4294967296]}]}',
             "out of range for INT32"),
            (b'{"inputs":[{"name":"A","shape":[1,1],"datatype":"INT64","data":[' + b"9" * 400
             + b']}]}', "out of range for every datatype"),
            (b'{"inputs":[{"name":"A","shape":[1,1],"datatype":"FP8","data":[1]},'
             b'{"name":"B","shape":[1,1],"datatype":"FP32","data":[1]}]}', "FP8"),       # E2
            (b'{"inputs":[{"name":"A","shape":[1,1],"datatype":"INT8","data":[1]},'
             b'{"name":"B","shape":[1,1],"datatype":"FP32","data":[1]}]}', "INT8"),
            (b'{"inputs":[{"name":"A","shape":[1,1],"datatype":"FP16","data":[1e6]}]}',
             "out of range for FP16"),
            (b'{"inputs":[{"name":"A","shape":[1,2],"datatype":"FP32","data":["1",2]}]}',
             "expected numbers, got a string"),
            (b'{"inputs":[{"name":"A","shape":[1,2],"datatype":"FP32","data":[true,2]}]}',
             "expected numbers, got a boolean"),
            (b'{"inputs":[{"name":"A","shape":[2,3],"datatype":"FP32","data":[[1,2],[3,4],[5,6]]}]}',
             "nested as [3,2] but its shape is [2,3]"),
        ]
        for body, text in cases:
            with self.subTest(text=text):
                status, _, data = self.infer_raw(body)
                self.assert_http_error(status, data, 400 if len(body) < 4000000 else 413, text)

    def test_envelope_matmul_and_grouped_rows_match_grpc(self):
        """The same bad requests over gRPC and over REST: the HTTP status of the gRPC code
        and the same message."""
        f32 = np.ones((2, 3), np.float32)
        rows = [
            ("absent", [("A", f32), ("B", f32.T)]),                               # E1
            ("matmul", [("A", f32), ("A", f32), ("B", f32.T)]),                   # E6
            ("matmul", [("A", f32), ("B", f32.T), ("C", f32)]),
            ("matmul", [("A", f32)]),
            ("matmul", [("A", f32), ("B", f32.T.astype(np.float64))]),            # M1
            ("matmul", [("A", np.float32(1).reshape(())), ("B", f32)]),           # M2
            ("matmul", [("A", f32), ("B", np.ones((4, 5), np.float32))]),         # M3
            ("matmul", [("A", np.ones((2, 3, 4), np.float32)),
                        ("B", np.ones((3, 4, 5), np.float32))]),                  # M4
            ("matmul", [("A", np.ones((100000, 1), np.float32)),
                        ("B", np.ones((1, 100000), np.float32))]),                # E8
            ("grouped_matmul", [("input", f32), ("weights", np.ones((2, 3, 4), np.float32)),
                                ("group_indices", np.array([[0], [2]], np.int64))]),   # G1
            ("grouped_matmul", [("input", f32), ("weights", np.ones((2, 3, 4), np.float32)),
                                ("group_indices", np.array([[0], [-1]], np.int64))]),
            ("grouped_matmul", [("input", f32), ("weights", np.ones((2, 3, 4), np.float32)),
                                ("group_indices", np.array([0, 1], np.int64))]),       # G2
            ("grouped_matmul", [("input", f32), ("weights", np.ones((3, 4), np.float32)),
                                ("group_indices", np.array([[0], [1]], np.int64))]),   # G3
            ("grouped_matmul", [("input", f32), ("weights", np.ones((2, 3, 4), np.float32)),
                                ("group_indices", np.array([[0], [1]], np.int64)),
                                ("bias", np.ones((2, 5), np.float32))]),               # G4
            ("grouped_matmul", [("input", f32), ("weights", np.ones((0, 3, 4), np.float32)),
                                ("group_indices", np.array([[0], [0]], np.int64))]),   # G5
            ("grouped_matmul", [("input", f32), ("weights", np.ones((2, 3, 4), np.float32)),
                                ("group_indices", np.array([[0], [1]], np.float32))]),  # G7
        ]
        for model, inputs in rows:
            with self.subTest(model=model, inputs=[(i[0], i[1].shape) for i in inputs]):
                error = self.rpc_error(self.stub.ModelInfer, make_infer_request(model, inputs))
                for binary in (True, False):
                    body, header_length = encode_infer_request(inputs, binary=binary)
                    headers = ({"Inference-Header-Content-Length": str(header_length)}
                               if header_length else {})
                    status, _, data = self.infer_raw(body, headers, model)
                    self.assertEqual(status, STATUS_OF[error.code()], data[:300])
                    if binary or error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                        self.assertEqual(json.loads(data)["error"], error.details())
        self.assert_server_still_serves()

    def test_e7_negative_and_overflowing_dimensions(self):
        for shape in ([-1, 3], [-2**63, 1], [2**62, 2**62]):
            body = json.dumps({"inputs": [
                {"name": "A", "shape": shape, "datatype": "FP32", "data": [1]},
                {"name": "B", "shape": [3, 1], "datatype": "FP32", "data": [1, 2, 3]}]}).encode()
            with self.subTest(shape=shape):
                status, _, data = self.infer_raw(body)
                self.assert_http_error(status, data, 400)

    def test_m5_zero_sized_and_m6_special_values(self):
        body = (b'{"inputs":[{"name":"A","shape":[1,2],"datatype":"FP32","data":[NaN,Infinity]},'
                b'{"name":"B","shape":[2,1],"datatype":"FP32","data":[1,0]}]}')
        status, _, data = self.infer_raw(body)
        self.assertEqual(status, 200, data)
        self.assertIn(b'"data":[NaN]', data)
        out = self.http.infer("matmul", [("A", np.ones((2, 0), np.float32)),
                                         ("B", np.ones((0, 3), np.float32))], binary=False)
        np.testing.assert_array_equal(out["Y"], np.zeros((2, 3), np.float32))

    def test_h3_body_over_the_limit_and_a_gzip_bomb(self):
        status, _, data = raw_call(self.server.http_port,
                                   post("/v2/models/matmul/infer", b" " * 4000001))
        self.assert_http_error(status, data, 413, "--max_message_bytes")
        bomb = gzip.compress(b"[" + b"0," * (1 << 25) + b"0]", compresslevel=6)
        self.assertLess(len(bomb), 4000000)
        rss_before = self.rss()
        status, _, data = self.infer_raw(bomb, {"Content-Encoding": "gzip"})
        self.assert_http_error(status, data, 413, "decompressed")
        self.assertLess(self.rss() - rss_before, 64 << 20, "memory stays flat")
        status, _, data = self.infer_raw(zlib.compress(b"{}")[:-3], {"Content-Encoding": "deflate"})
        self.assert_http_error(status, data, 400)

    def test_expect_100_continue_is_answered_before_the_body_or_refused_at_once(self):
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        body, n = encode_infer_request([("A", a), ("B", np.eye(3, dtype=np.float32))])
        head = post("/v2/models/matmul/infer", body, [
            ("Inference-Header-Content-Length", n), ("Expect", "100-continue")])[:-len(body)]
        with socket.create_connection(("127.0.0.1", self.server.http_port), timeout=30) as s:
            s.sendall(head)
            interim = b""
            while not interim.endswith(b"\r\n\r\n"):
                chunk = s.recv(1)
                self.assertTrue(chunk, "closed before the interim answer")
                interim += chunk
            self.assertTrue(interim.startswith(b"HTTP/1.1 100 Continue"), interim)
            s.sendall(body)
            answer = b""
            while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < int(
                    re.search(rb"(?i)content-length: *(\d+)", answer).group(1)):
                chunk = s.recv(65536)
                self.assertTrue(chunk, f"closed mid-answer: {answer!r}")
                answer += chunk
        self.assertTrue(answer.startswith(b"HTTP/1.1 200"), answer[:200])
        head_text, _, data = answer.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)inference-header-content-length: *(\d+)", head_text)
        y = decode_infer_response(data, length.group(1) if length else None)["Y"]
        np.testing.assert_array_equal(y, a)
        # A body announced over the cap is refused from its header: 413 with no
        # 100 Continue, so the client never sends it.
        status, _, data = raw_call(self.server.http_port, (
            "POST /v2/models/matmul/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 4000001\r\n"
            "Expect: 100-continue\r\n\r\n").encode())
        self.assert_http_error(status, data, 413, "--max_message_bytes")

    def rss(self):
        with open(f"/proc/{self.server.proc.pid}/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS"))

    def test_h4_binary_extension_layout(self):
        a = np.ones((2, 3), np.float32)
        body, n = encode_infer_request([("A", a), ("B", a.T)])
        for header_length, text in ((len(body) + 1, "not within the body"),
                                    (-5, "not within the body"), ("x", "not a number")):
            status, _, data = self.infer_raw(body, {"Inference-Header-Content-Length":
                                                    str(header_length)})
            self.assert_http_error(status, data, 400, text)
        # binary_data_size disagreeing with the shape: the engine's byte check.
        header = json.loads(body[:n])
        header["inputs"][0]["parameters"]["binary_data_size"] = 20
        text = json.dumps(header).encode()
        status, _, data = self.infer_raw(text + body[n:n + 20] + body[n + 24:],
                                         {"Inference-Header-Content-Length": str(len(text))})
        self.assert_http_error(status, data, 400, "expected 24 bytes")
        # Sizes that sum past the body.
        status, _, data = self.infer_raw(body[:-4], {"Inference-Header-Content-Length": str(n)})
        self.assert_http_error(status, data, 400, "goes past the end")

    def test_h6_output_over_the_cap_names_the_flag(self):
        body, n = encode_infer_request([("A", np.ones((4000, 1), np.float32)),
                                        ("B", np.ones((1, 4000), np.float32))])
        status, _, data = self.infer_raw(body, {"Inference-Header-Content-Length": str(n)})
        self.assert_http_error(status, data, 413, "--max_output_bytes")


class ConnectionRowsTest(HttpRowsCase):
    server_flags = ("--http_idle_timeout_ms=1500", "--http_request_timeout_ms=1500",
                    "--http_max_connections=40", "--http_threads=1")

    def test_h5_slow_idle_and_non_reading_clients_are_bounded(self):
        port = self.server.http_port
        # A client that sends half a request and then nothing (slowloris), 30 idle
        # keep-alive connections, and one that never reads a large response: none of
        # them holds a thread, so others are served meanwhile.
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(post("/v2/models/matmul/infer", b"{" * 100)[:-60])
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(30)]
        for _ in range(20):
            self.assertTrue(self.http.ready())
        # Over the cap (40): 503 at once. The ones still under it are idle and are
        # closed at the idle timeout, which bounds every wait here.
        extra = [socket.create_connection(("127.0.0.1", port)) for _ in range(12)]
        answers = []
        for s in extra:
            s.settimeout(60)
            try:
                answers.append(s.recv(200))
            except ConnectionResetError:
                answers.append(b"")
        self.assertTrue(any(a.startswith(b"HTTP/1.1 503") for a in answers), answers[:3])
        for s in extra:
            s.close()
        greedy = socket.create_connection(("127.0.0.1", port))
        greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        greedy_port = greedy.getsockname()[1]
        self.assertEqual(server_end_state(port, greedy_port), TCP_ESTABLISHED,
                         "the server's end of a new connection is not in /proc/net/tcp")
        body = json.dumps({"inputs": [
            {"name": "A", "shape": [2000, 1], "datatype": "FP32", "data": [1.5] * 2000},
            {"name": "B", "shape": [1, 2000], "datatype": "FP32", "data": [1.25] * 2000}]}).encode()
        answered = metric_sum(self.server.metrics_url, "gemmserve_requests_total",
                              model="matmul", code="OK")
        greedy.sendall(post("/v2/models/matmul/infer", body))
        # Its 4M-element answer is computed and being written into a full socket.
        self.wait_for(lambda: metric_sum(self.server.metrics_url, "gemmserve_requests_total",
                                         model="matmul", code="OK") > answered,
                      "the greedy client's request to be answered")
        for _ in range(5):
            self.assert_server_still_serves()
            self.assertTrue(self.http.ready())
        # The server closes every one of them at its timeout (1.5 s; the waits of
        # 60 s only bound a server that never does). The greedy client's end still
        # has megabytes in flight, which a 4 KiB window drains in minutes: the
        # kernel's table says whether the server has let go of its end, unread.
        self.wait_for(lambda: server_end_state(port, greedy_port) != TCP_ESTABLISHED,
                      "the server to close the connection of the client that does not read")
        greedy.close()
        for name, s in [("slow", slow), *(("idle", i) for i in idle)]:
            s.settimeout(60)
            try:
                while s.recv(1 << 20):
                    pass
            except ConnectionResetError:
                pass
            except socket.timeout:
                self.fail(f"the server kept the {name} connection open past its timeout")
            s.close()
        self.assertTrue(self.http.ready())

    def wait_for(self, predicate, what, timeout=60):
        """Polls an observable state of the server, with a deadline."""
        deadline = time.monotonic() + timeout
        while not predicate():
            self.assertLess(time.monotonic(), deadline, f"timed out waiting for {what}")
            threading.Event().wait(0.01)


class AuthAndDrainTest(unittest.TestCase):
    def test_tokens_and_sigterm_drain(self):
        import tempfile
        from gemmserve_testing.server import ServerProcess
        with tempfile.NamedTemporaryFile("w", suffix=".tokens", delete=False) as f:
            f.write("sesame\n")
        self.addCleanup(os.unlink, f.name)
        server = ServerProcess(f"--auth_token_file={f.name}", "--shutdown_grace_seconds=20",
                               "--builtin_max_queue_delay_us=0").start()
        try:
            anonymous = HttpClient(server.http_url)
            self.assertTrue(anonymous.live() and anonymous.ready())  # health needs no token
            status, _, data = anonymous.request("GET", "/v2")
            self.assertEqual(status, 401, data)
            self.assertIn("error", json.loads(data))
            status, _, _ = anonymous.request("POST", "/v2/models/matmul/infer", b"{}")
            self.assertEqual(status, 401)
            client = HttpClient(server.http_url, token="sesame")
            self.assertEqual(client.server_metadata()["name"], "gemmserve")
            self.assertEqual(HttpClient(server.http_url, token="wrong").request("GET", "/v2")[0],
                             401)
            # Work in flight when SIGTERM comes is answered; then ready is 400 and new
            # work 503, and the process exits 0. One 137-GFLOP product: once it is
            # accepted, the drain checks below run while it is computed (the listener
            # stays open until accepted work is answered). (Two calls raced: under
            # ASan the second's upload could outlast the first's compute, so both
            # were never in flight at once.)
            a = np.ones((4096, 4096), np.float32)
            results = []

            def slow_call():
                with HttpClient(server.http_url, token="sesame") as c:
                    results.append(c.infer("matmul", [("A", a), ("B", a)])["Y"][0, 0])
            workers = [threading.Thread(target=slow_call)]
            for w in workers:
                w.start()
            deadline = time.monotonic() + 120
            while metric_sum(server.metrics_url, "gemmserve_inflight_requests") < 1:
                self.assertLess(time.monotonic(), deadline, "the call never got in flight")
                self.assertEqual(results, [], "the call was answered before it was seen in flight")
                threading.Event().wait(0.01)
            server.proc.send_signal(signal.SIGTERM)
            late = HttpClient(server.http_url, token="sesame")
            while late.ready():  # turns 400 once the signal is handled
                self.assertLess(time.monotonic(), deadline, "ready stayed 200 after SIGTERM")
            status, _, data = late.request(
                "POST", "/v2/models/matmul/infer",
                encode_infer_request([("A", a[:1, :1]), ("B", a[:1, :1])], binary=False)[0])
            self.assertEqual(status, 503, data)
            self.assertIn("shutting down", json.loads(data)["error"])
            for w in workers:
                w.join(120)
            self.assertEqual(results, [4096.0])
            self.assertEqual(server.proc.wait(30), 0)
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
