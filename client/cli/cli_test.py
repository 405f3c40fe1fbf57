#!/usr/bin/python3
"""End-to-end test of gemmserve-cli against the real gemmserve server.

    cli_test.py PATH/TO/gemmserve PATH/TO/gemmserve-cli

ctest passes both paths. One server is started on an ephemeral port of
127.0.0.1 for the whole test; the test learns the port from the server's
"gemmserve listening on" line and never sleeps. Timeouts only guard against
hangs; the operands are .npy files written here with numpy and the results
are checked against numpy.matmul. The perf tests run the load generator for
about a second each (against gemmserve, and against `gemmserve-cli
noop-server` started the same way) and check its JSON report.
"""

import base64
import csv
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

SERVER = None
CLI = None
STARTUP_TIMEOUT_S = 30
CALL_TIMEOUT_S = 60
SHUTDOWN_TIMEOUT_S = 30


def float_to_bf16_bits(x):
    """float32 -> bfloat16 bits, rounding to nearest even (no NaNs here)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_bits_to_float(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def read_line(pipe, timeout_s):
    """The first line written to `pipe`, or an error once `timeout_s` passes."""
    return read_lines(pipe, 1, timeout_s)[0]


def read_lines(pipe, count, timeout_s):
    """The first `count` lines written to `pipe`, or an error once `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    data = b""
    while data.count(b"\n") < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([pipe], [], [], remaining)[0]:
            raise TimeoutError(f"no line from the server within {timeout_s}s: {data!r}")
        chunk = os.read(pipe.fileno(), 4096)
        if not chunk:
            raise EOFError(f"server closed stdout before its listening line: {data!r}")
        data += chunk
    return [line.decode() for line in data.split(b"\n")[:count]]


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.log = open(os.path.join(cls.tmp.name, "server.log"), "w+b")
        cls.address_file = os.path.join(cls.tmp.name, "address")
        cls.server = subprocess.Popen(
            [SERVER, "--grpc_port=0", "--metrics_port=0", "--http_port=0", "--host=127.0.0.1",
             "--compute_threads=1", f"--address_file={cls.address_file}", "--allow_client_shm"],
            stdout=subprocess.PIPE, stderr=cls.log)
        try:
            lines = read_lines(cls.server.stdout, 3, STARTUP_TIMEOUT_S)
            match = re.fullmatch(r"gemmserve listening on 127\.0\.0\.1:(\d+)", lines[0])
            http = re.fullmatch(r"gemmserve http on 127\.0\.0\.1:(\d+)", lines[2])
            if not match or not http:
                raise AssertionError(f"unexpected first lines from the server: {lines!r}")
        except BaseException:
            cls.server.kill()
            cls.server.wait()
            cls.dump_log()
            cls.tmp.cleanup()
            raise
        cls.url = f"127.0.0.1:{match.group(1)}"
        cls.http_url = f"127.0.0.1:{http.group(1)}"

    @classmethod
    def tearDownClass(cls):
        cls.server.send_signal(signal.SIGTERM)
        try:
            code = cls.server.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            cls.server.kill()
            code = cls.server.wait()
        cls.server.stdout.close()
        if code != 0:
            cls.dump_log()
        cls.log.close()
        cls.tmp.cleanup()
        if code != 0:
            raise AssertionError(f"server exited with {code} on SIGTERM, expected 0")

    @classmethod
    def dump_log(cls):
        cls.log.seek(0)
        sys.stderr.write("--- server log ---\n" + cls.log.read().decode(errors="replace"))

    def path(self, name):
        return os.path.join(self.tmp.name, f"{self.id().rsplit('.', 1)[-1]}_{name}")

    def save(self, name, array):
        path = self.path(name)
        np.save(path, array)
        return path

    def cli(self, *args, url=None):
        return subprocess.run([CLI, f"--url={url or self.url}", *args],
                              capture_output=True, text=True, timeout=CALL_TIMEOUT_S)

    def assert_exit(self, result, code):
        self.assertEqual(result.returncode, code,
                         f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")

    def infer_to_file(self, model, *operands):
        out = self.path("out.npy")
        result = self.cli("infer", model, *operands, f"--output={out}")
        self.assert_exit(result, 0)
        with open(out, "rb") as f:
            data = f.read()
        array = np.load(out)
        # The CLI writes byte for byte what np.save writes.
        expected = self.path("expected.npy")
        np.save(expected, array)
        with open(expected, "rb") as f:
            self.assertEqual(data, f.read())
        return array

    # ------------------------------------------------------------ health

    def test_health_of_running_server_is_serving(self):
        result = self.cli("health")
        self.assert_exit(result, 0)
        self.assertEqual(result.stdout.strip(), "SERVING")

    def test_the_server_writes_its_address_and_health_follows_it(self):
        # What a container's HEALTHCHECK does: the port the server was given, not 8001.
        with open(self.address_file) as f:
            self.assertEqual(f.read(), self.url + "\n")
        unreachable = "127.0.0.1:1"
        result = self.cli(f"--url_file={self.address_file}", "health", url=unreachable)
        self.assert_exit(result, 0)
        self.assertEqual(result.stdout.strip(), "SERVING")
        # A wildcard host as written by a server on 0.0.0.0 is called on loopback.
        wildcard = self.path("wildcard")
        with open(wildcard, "w") as f:
            f.write(self.url.replace("127.0.0.1", "0.0.0.0") + "\n")
        self.assert_exit(self.cli(f"--url_file={wildcard}", "health", url=unreachable), 0)
        # No file: --url.
        missing = self.path("missing")
        self.assert_exit(self.cli(f"--url_file={missing}", "health"), 0)
        result = self.cli("--timeout_ms=5000", f"--url_file={missing}", "health", url=unreachable)
        self.assert_exit(result, 1)

    def test_health_of_unreachable_server_fails_with_unavailable(self):
        # A bound but not listening socket: connections to it are refused,
        # and nobody else can take the port meanwhile.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            result = self.cli("--timeout_ms=10000", "health",
                              url=f"127.0.0.1:{s.getsockname()[1]}")
        self.assert_exit(result, 1)
        self.assertIn("UNAVAILABLE", result.stderr)

    # ---------------------------------------------------------- metadata

    def test_metadata_lists_matmul_inputs_and_outputs(self):
        result = self.cli("metadata", "matmul")
        self.assert_exit(result, 0)
        self.assertIn("model: matmul", result.stdout)
        for name in ("A", "B", "Y"):
            self.assertRegex(result.stdout, rf"(?m)^  {name}\s+\w+\s+\[")

    def test_metadata_of_unknown_model_is_not_found(self):
        result = self.cli("metadata", "no_such_model")
        self.assert_exit(result, 1)
        self.assertIn("NOT_FOUND", result.stderr)

    # ------------------------------------------------------------- infer

    def test_infer_fp32_matches_numpy(self):
        rng = np.random.default_rng(1)
        a = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
        b = rng.uniform(-1, 1, (4, 5)).astype(np.float32)
        y = self.infer_to_file("matmul", f"A={self.save('a.npy', a)}",
                               f"B={self.save('b.npy', b)}")
        self.assertEqual(y.dtype, np.float32)
        np.testing.assert_allclose(y, np.matmul(a, b), rtol=1e-5, atol=1e-6)

    def test_infer_int64_batched_matches_numpy_exactly(self):
        rng = np.random.default_rng(2)
        a = rng.integers(-100, 100, (2, 3, 4), dtype=np.int64)
        b = rng.integers(-100, 100, (4, 5), dtype=np.int64)
        y = self.infer_to_file("matmul", f"A={self.save('a.npy', a)}",
                               f"B={self.save('b.npy', b)}")
        self.assertEqual(y.dtype, np.int64)
        np.testing.assert_array_equal(y, np.matmul(a, b))

    def test_infer_other_npy_dtypes_match_numpy(self):
        rng = np.random.default_rng(5)
        for dtype, rtol in ((np.float16, 1e-2), (np.float64, 1e-12), (np.int32, 0),
                            (np.uint32, 0), (np.uint64, 0)):
            with self.subTest(dtype=np.dtype(dtype).name):
                if np.issubdtype(dtype, np.floating):
                    a = rng.uniform(-1, 1, (4, 6)).astype(dtype)
                    b = rng.uniform(-1, 1, (6, 3)).astype(dtype)
                else:
                    a = rng.integers(0, 50, (4, 6)).astype(dtype)
                    b = rng.integers(0, 50, (6, 3)).astype(dtype)
                y = self.infer_to_file("matmul", f"A={self.save('a.npy', a)}",
                                       f"B={self.save('b.npy', b)}")
                self.assertEqual(y.dtype, dtype)
                expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
                np.testing.assert_allclose(y.astype(np.float64), expected, rtol=rtol,
                                           atol=1e-3 if dtype == np.float16 else 0)

    def test_infer_bf16_as_uint16_bits_matches_numpy(self):
        rng = np.random.default_rng(3)
        a = float_to_bf16_bits(rng.uniform(-1, 1, (6, 8)))
        b = float_to_bf16_bits(rng.uniform(-1, 1, (8, 7)))
        y = self.infer_to_file("matmul", f"A={self.save('a.npy', a)}",
                               f"B={self.save('b.npy', b)}")
        self.assertEqual(y.dtype, np.uint16)  # BF16 bits, as they went in
        expected = np.matmul(bf16_bits_to_float(a).astype(np.float64),
                             bf16_bits_to_float(b).astype(np.float64))
        np.testing.assert_allclose(bf16_bits_to_float(y), expected, rtol=1e-2, atol=1e-3)

    def test_infer_grouped_matmul_with_bias_matches_numpy(self):
        rng = np.random.default_rng(4)
        m, k, n, g, s = 5, 4, 3, 3, 2
        x = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        w = rng.uniform(-1, 1, (g, k, n)).astype(np.float32)
        idx = rng.integers(0, g, (m, s), dtype=np.int32)
        bias = rng.uniform(-1, 1, (g, n)).astype(np.float32)
        y = self.infer_to_file(
            "grouped_matmul", f"input={self.save('x.npy', x)}",
            f"weights={self.save('w.npy', w)}", f"group_indices={self.save('i.npy', idx)}",
            f"bias={self.save('bias.npy', bias)}")
        expected = np.einsum("mk,mskn->msn", x, w[idx]) + bias[idx]
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)

    def test_infer_random_operands_prints_result(self):
        result = self.cli("infer", "matmul", "A=random:FP16:2x3", "B=random:FP16:3x4")
        self.assert_exit(result, 0)
        self.assertTrue(result.stdout.startswith("Y: FP16 [2,4]\n[["), result.stdout)

    def test_infer_random_operands_depend_only_on_seed(self):
        args = ("infer", "matmul", "A=random:INT32:4x4", "B=random:INT32:4x4")
        first = self.cli(*args, "--seed=7")
        again = self.cli(*args, "--seed=7")
        other = self.cli(*args, "--seed=8")
        for result in (first, again, other):
            self.assert_exit(result, 0)
        self.assertEqual(first.stdout, again.stdout)
        self.assertNotEqual(first.stdout, other.stdout)

    def test_infer_random_index_writes_outputs_to_dir(self):
        out_dir = self.path("outputs")
        os.mkdir(out_dir)
        result = self.cli("infer", "grouped_matmul", "input=random:BF16:8x16",
                          "weights=random:BF16:4x16x32",
                          "group_indices=random_index:INT64:8x2:4", f"--output_dir={out_dir}")
        self.assert_exit(result, 0)
        self.assertEqual(os.listdir(out_dir), ["output.npy"])
        y = np.load(os.path.join(out_dir, "output.npy"))
        self.assertEqual((y.dtype, y.shape), (np.uint16, (8, 2, 32)))

    def test_infer_large_output_is_abbreviated(self):
        result = self.cli("infer", "matmul", "A=random:FP32:100x10", "B=random:FP32:10x100")
        self.assert_exit(result, 0)
        lines = result.stdout.splitlines()
        self.assertEqual(lines[0], "Y: FP32 [100,100]")
        self.assertEqual(len(lines), 1 + 7)  # 3 rows, "...", 3 rows
        self.assertIn(" ... ", lines[1])

    def test_mismatched_shapes_fail_with_invalid_argument(self):
        result = self.cli("infer", "matmul", "A=random:FP32:3x4", "B=random:FP32:5x6")
        self.assert_exit(result, 1)
        self.assertIn("INVALID_ARGUMENT", result.stderr)

    def test_malformed_npy_fails_with_invalid_argument(self):
        path = self.path("bad.npy")
        with open(path, "wb") as f:
            f.write(b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'")
        result = self.cli("infer", "matmul", f"A={path}", "B=random:FP32:1x1")
        self.assert_exit(result, 1)
        self.assertIn("INVALID_ARGUMENT", result.stderr)

    # -------------------------------------------------------------- perf

    # Short runs: a 0.2 s warm-up, then 1 s measured. The per-call deadline
    # keeps a stuck server from stalling a run.
    PERF_FLAGS = ("--warmup=0.2", "--duration=1", "--timeout_ms=10000")

    def perf(self, *args, url=None):
        """Runs perf, expects exit status 0, returns (JSON report, stdout)."""
        out = self.path("perf.json")
        result = self.cli("perf", *self.PERF_FLAGS, f"--json_out={out}", *args, url=url)
        self.assert_exit(result, 0)
        with open(out) as f:
            return json.load(f), result.stdout

    def assert_clean_run(self, report, stdout):
        self.assertGreater(report["ok"], 0, stdout)
        self.assertEqual(report["errors"], {}, stdout)
        self.assertLessEqual(report["p50_us"], report["p90_us"])
        self.assertLessEqual(report["p90_us"], report["p99_us"])
        self.assertLessEqual(report["p99_us"], report["max_us"])
        self.assertAlmostEqual(report["throughput"], report["ok"] / report["duration_s"],
                               delta=1e-3)
        self.assertRegex(stdout, r"(?m)^  requests \d+ ok, 0 errors; throughput [\d.]+ infer/s$")
        self.assertRegex(stdout, r"(?m)^  latency p50 \d+ us, p90 \d+ us, p95 \d+ us, p99 \d+ us, max \d+ us")
        self.assertNotIn("errors:", stdout)

    def test_perf_closed_loop_matmul(self):
        report, stdout = self.perf("--model=matmul", "--concurrency=4", "--shape=A:2,3",
                                   "--shape", "B:3,4")
        self.assert_clean_run(report, stdout)
        self.assertEqual((report["model"], report["mode"], report["concurrency"], report["rate"]),
                         ("matmul", "closed_loop", 4, None))
        self.assertEqual(report["client_dropped"], 0)
        self.assertEqual(report["inputs"], {"A": {"datatype": "FP32", "shape": [2, 3]},
                                            "B": {"datatype": "FP32", "shape": [3, 4]}})
        self.assertTrue(stdout.startswith("model matmul, closed loop, concurrency 4, 1.0 s\n"),
                        stdout)

    def test_perf_closed_loop_grouped_matmul_indices_are_valid(self):
        # G comes from the first dimension of weights; an index outside
        # [0, G) would make every call fail with INVALID_ARGUMENT.
        report, stdout = self.perf(
            "--model", "grouped_matmul", "--concurrency=4", "--shape=input:16,8",
            "--shape=weights:5,8,4", "--shape=group_indices:16,2", "--shape=bias:5,4")
        self.assert_clean_run(report, stdout)
        self.assertEqual(report["inputs"]["group_indices"], {"datatype": "INT64",
                                                             "shape": [16, 2]})
        self.assertEqual(report["distinct_requests"], 64)

    def test_perf_open_loop_sends_at_the_rate(self):
        report, stdout = self.perf("--model=matmul", "--rate=200", "--concurrency=16",
                                   "--shape=A:2,3", "--shape=B:3,4")
        self.assert_clean_run(report, stdout)
        self.assertEqual((report["mode"], report["rate"]), ("open_loop", 200))
        # Poisson arrivals, mean 200 in the second measured: +-100 is 7 sigma.
        self.assertGreaterEqual(report["ok"], 100, stdout)
        self.assertLessEqual(report["ok"], 300, stdout)
        self.assertIn("dropped by the client", stdout)

    PERF_CSV_COLUMNS = [
        "Concurrency", "Inferences/Second", "Client Send", "Network+Server Send/Recv",
        "Server Queue", "Server Compute Input", "Server Compute Infer", "Server Compute Output",
        "Client Recv", "p50 latency", "p90 latency", "p95 latency", "p99 latency"]

    def read_csv(self, path):
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            return reader.fieldnames, list(reader)

    def assert_levels(self, rows, report, stdout):
        """Each CSV row against its level of the JSON report."""
        self.assertEqual(len(rows), len(report), stdout)
        for row, level in zip(rows, report):
            values = {k: float(v) for k, v in row.items()}
            self.assertGreater(values["Inferences/Second"], 0, stdout)
            self.assertAlmostEqual(values["Inferences/Second"], level["throughput"], delta=0.01)
            self.assertLessEqual(values["p50 latency"], values["p90 latency"])
            self.assertLessEqual(values["p90 latency"], values["p95 latency"])
            self.assertLessEqual(values["p95 latency"], values["p99 latency"])
            self.assertEqual((values["p50 latency"], values["p95 latency"]),
                             (level["p50_us"], level["p95_us"]))
            # The server's own statistics: requests it answered and a real
            # compute time per request, which the CSV rounds to microseconds.
            server = level["server"]
            self.assertGreater(server["requests"], 0, stdout)
            self.assertGreater(server["compute_infer_us"], 0, stdout)
            self.assertLessEqual(abs(values["Server Compute Infer"] - server["compute_infer_us"]),
                                 0.5 + 1e-3)
            self.assertLessEqual(abs(values["Server Queue"] - server["queue_us"]), 0.5 + 1e-3)
            self.assertEqual((values["Client Send"], values["Client Recv"]), (0, 0))

    def test_perf_concurrency_range_writes_perf_analyzers_csv(self):
        out = self.path("levels.csv")
        report, stdout = self.perf("--model=matmul", "--concurrency_range=1:3:2",
                                   "--shape=A:16,32", "--shape=B:32,16", "-f", out)
        columns, rows = self.read_csv(out)
        self.assertEqual(columns, self.PERF_CSV_COLUMNS)
        self.assertEqual([r["Concurrency"] for r in rows], ["1", "3"])
        # The JSON report holds a level each.
        self.assertEqual([r["concurrency"] for r in report], [1, 3])
        self.assert_levels(rows, report, stdout)
        self.assertEqual(len(re.findall(r"(?m)^  server: queue \d+ us, compute infer \d+ us "
                                        r"per request; \d+ requests answered$", stdout)), 2,
                         stdout)

    def test_perf_request_rate_range_names_its_column(self):
        out = self.path("rates.csv")
        report, stdout = self.perf("--model=matmul", "--request_rate_range=100:200:100",
                                   "--shape=A:2,3", "--shape=B:3,4", f"-f={out}")
        columns, rows = self.read_csv(out)
        self.assertEqual(columns, ["Request Rate"] + self.PERF_CSV_COLUMNS[1:])
        self.assertEqual([r["Request Rate"] for r in rows], ["100", "200"])
        self.assert_levels(rows, report, stdout)
        self.assertEqual([(r["mode"], r["rate"], r["concurrency"]) for r in report],
                         [("open_loop", 100, 64), ("open_loop", 200, 64)])

    def test_perf_zero_input_data_sends_one_request(self):
        report, stdout = self.perf(
            "--model", "grouped_matmul", "--concurrency=2", "--input_data=zero",
            "--shape=input:16,8", "--shape=weights:5,8,4", "--shape=group_indices:16,2")
        self.assert_clean_run(report, stdout)
        self.assertEqual(report["distinct_requests"], 1)
        self.assertIn("1 request throughout", stdout)

    def test_perf_over_http(self):
        """--protocol=http: the same load over the REST API with binary tensors, closed and
        open loop and through shared memory, the server's breakdown read over REST too."""
        flags = ("--model=grouped_matmul", "--shape=input:16,8", "--shape=weights:5,8,4",
                 "--shape=group_indices:16,2")
        report, stdout = self.perf(*flags, "--concurrency=3", "--protocol=http",
                                   url=self.http_url)
        self.assert_clean_run(report, stdout)
        self.assertEqual((report["protocol"], report["concurrency"]), ("http", 3))
        self.assertIn("; over HTTP/REST", stdout)
        self.assertGreaterEqual(report["server"]["requests"], report["ok"])
        report, stdout = self.perf(*flags, "--rate=200", "--protocol=http", url=self.http_url)
        self.assert_clean_run(report, stdout)
        self.assertEqual(report["mode"], "open_loop")
        report, stdout = self.perf(*flags, "--protocol=http", "--shared_memory=system",
                                   url=self.http_url)
        self.assert_clean_run(report, stdout)
        self.assertEqual(report["shared_memory"], "system")
        self.assertEqual([f for f in os.listdir("/dev/shm") if f.startswith("gemmserve-perf-")],
                         [])
        for args, code, message in [
                (("--protocol=quic",), 2, "--protocol 'quic'"),
                (("--protocol=http", "--concurrency=2000"), 2, "at most 1024"),
                (("--protocol=http", "--model=nope"), 1, "NOT_FOUND")]:
            result = self.cli("perf", *flags[:1], *self.PERF_FLAGS, *args, url=self.http_url)
            self.assert_exit(result, code)
            self.assertIn(message, result.stderr)

    def test_perf_over_one_stream(self):
        """--streaming: the load over one ModelStreamInfer stream, closed and open loop; every
        answer matched to its request by id (a lost or unknown id would be an error), and the
        server's statistics count the stream's requests as any others."""
        flags = ("--model=grouped_matmul", "--shape=input:16,8", "--shape=weights:5,8,4",
                 "--shape=group_indices:16,2")
        report, stdout = self.perf(*flags, "--concurrency=3", "--streaming")
        self.assert_clean_run(report, stdout)
        self.assertEqual((report["streaming"], report["protocol"], report["concurrency"]),
                         (True, "grpc", 3))
        self.assertIn("; over one ModelStreamInfer stream", stdout)
        self.assertGreaterEqual(report["server"]["requests"], report["ok"])
        report, stdout = self.perf(*flags, "--rate=200", "--streaming", "--shape=bias:5,4")
        self.assert_clean_run(report, stdout)
        self.assertEqual(report["mode"], "open_loop")
        self.assertGreaterEqual(report["ok"], 100, stdout)
        # A request the server refuses is an error of the stream's, counted, not a crash.
        report, stdout = self.perf("--model=matmul", "--shape=A:2,3", "--shape=B:4,5",
                                   "--streaming")
        self.assertEqual(report["ok"], 0, stdout)
        self.assertGreater(report["errors"].get("STREAM", 0), 0, stdout)
        result = self.cli("perf", *flags[:1], *self.PERF_FLAGS, "--streaming",
                          "--protocol=http", url=self.http_url)
        self.assert_exit(result, 2)
        self.assertIn("not with --protocol=http", result.stderr)

    def test_perf_input_data_file_sends_its_requests(self):
        """perf_analyzer's input data file: a request per entry, in turn, with its own
        shapes; the server answers every one (a request the model refuses would be an
        error), and faults in the file are usage errors."""
        data = self.path("data.json")
        with open(data, "w") as f:
            json.dump({"data": [
                {"A": {"content": [[1, 2, 3], [4, 5, 6]], "shape": [2, 3]},
                 "B": {"content": [1, 0, 0, 1, 1, 1], "shape": [3, 2]}},
                {"A": {"b64": base64.b64encode(np.arange(12, dtype=np.float32).tobytes())
                       .decode(), "shape": [4, 3]},
                 "B": {"content": [[1], [2], [3]], "shape": [3, 1]}},
            ]}, f)
        report, stdout = self.perf("--model=matmul", "--concurrency=2",
                                   f"--input_data={data}")
        self.assert_clean_run(report, stdout)
        self.assertEqual(report["distinct_requests"], 2)
        # The shapes differ between the requests: the report says which dimensions vary.
        self.assertEqual(report["inputs"], {"A": {"datatype": "FP32", "shape": [-1, 3]},
                                            "B": {"datatype": "FP32", "shape": [3, -1]}})
        self.assertIn("2 distinct requests", stdout)
        bad = self.path("bad.json")
        with open(bad, "w") as f:
            json.dump({"data": [{"A": {"content": [1, 2], "shape": [1, 2]}}]}, f)
        for path, code, message in [(bad, 2, "request 0, input 'B': missing"),
                                    (self.path("absent.json"), 1, "NOT_FOUND")]:
            result = self.cli("perf", "--model=matmul", *self.PERF_FLAGS, f"--input_data={path}")
            self.assert_exit(result, code)
            self.assertIn(message, result.stderr)

    def test_perf_bad_ranges_are_usage_errors(self):
        out = self.path("never.csv")
        for flags, message in [
                (["--concurrency_range=4:2"], "END is below START"),
                (["--concurrency_range=0:4"], "levels must be positive"),
                (["--concurrency_range=1:4:0"], "STEP must be positive"),
                (["--concurrency_range=1:20000:1"], "levels"),
                (["--concurrency_range=1:2", "--concurrency=3"], "replaces --concurrency"),
                (["--concurrency_range=1:2", "--request_rate_range=1:2"], "alternatives"),
                (["--request_rate_range=10:20:5", "--rate=3"], "replaces --rate")]:
            result = self.cli("perf", "--model=matmul", *self.PERF_FLAGS, f"-f={out}", *flags)
            self.assert_exit(result, 2)
            self.assertIn(message, result.stderr, flags)
            self.assertFalse(os.path.exists(out), flags)

    def test_perf_against_noop_server(self):
        noop = subprocess.Popen([CLI, "noop-server", "--port=0", "--host=127.0.0.1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            line = read_line(noop.stdout, STARTUP_TIMEOUT_S)
            match = re.fullmatch(r"noop-server listening on 127\.0\.0\.1:(\d+)", line)
            self.assertIsNotNone(match, line)
            url = f"127.0.0.1:{match.group(1)}"
            report, stdout = self.perf("--model=matmul", "--concurrency=4", "--shape=A:2,3",
                                       "--shape=B:3,4", url=url)
            self.assert_clean_run(report, stdout)
            # The no-op answer has the product's shape, A's datatype, and zeros.
            out = self.path("y.npy")
            result = self.cli("infer", "matmul", "A=random:FP16:5x7", "B=random:FP16:7x3",
                              f"--output={out}", url=url)
            self.assert_exit(result, 0)
            y = np.load(out)
            self.assertEqual((y.dtype, y.shape, y.any()), (np.float16, (5, 3), False))
        finally:
            if noop.poll() is None:
                noop.send_signal(signal.SIGTERM)
            try:
                code = noop.wait(timeout=SHUTDOWN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                noop.kill()
                code = noop.wait()
            stderr = noop.stderr.read().decode(errors="replace")
            noop.stdout.close()
            noop.stderr.close()
        self.assertEqual(code, 0, f"noop-server exited with {code} on SIGTERM: {stderr}")

    def test_perf_of_unknown_model_fails_with_not_found(self):
        result = self.cli("perf", *self.PERF_FLAGS, "--model=no_such_model")
        self.assert_exit(result, 1)
        self.assertIn("NOT_FOUND", result.stderr)

    def test_perf_of_unreachable_server_fails_with_unavailable(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            result = self.cli("perf", *self.PERF_FLAGS, "--model=matmul",
                              url=f"127.0.0.1:{s.getsockname()[1]}")
        self.assert_exit(result, 1)
        self.assertIn("UNAVAILABLE", result.stderr)

    # ------------------------------------------------------------- usage

    def test_usage_errors_exit_2(self):
        for args in ([], ["frobnicate"], ["--no_such_flag", "health"], ["--timeout_ms=soon", "health"],
                     ["--timeout_ms"], ["metadata"], ["infer"], ["infer", "matmul", "A"],
                     ["infer", "matmul", "A=random:FP33:2x2"], ["infer", "matmul", "A=random:FP32:2y2"],
                     ["infer", "grouped_matmul", "group_indices=random_index:INT64:2x2:0"],
                     ["infer", "matmul", "A=random:FP32:2", "A=random:FP32:2"],
                     ["perf"], ["perf", "--model=matmul", "--concurrency=-1"],
                     ["perf", "--model=matmul", "--duration=0"],
                     ["perf", "--model=matmul", "--rate=-1"],
                     ["perf", "--model=matmul", "--shape=A"],
                     ["perf", "--model=matmul", "--shape=A:1", "--shape=A:2"],
                     ["perf", "--model=matmul", "--shape=C:1,2"],  # no input C
                     ["infer", "matmul", "--shape=A:1"],
                     ["noop-server", "--port=70000"]):
            with self.subTest(args=args):
                result = self.cli(*args)
                self.assert_exit(result, 2)
                self.assertIn("usage:", result.stderr)

    def test_help_exits_0(self):
        result = self.cli("--help")
        self.assert_exit(result, 0)
        self.assertIn("usage: gemmserve-cli", result.stdout)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    SERVER, CLI = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1] + sys.argv[3:], verbosity=2)
