"""Prometheus metrics, checked by Debian's real Prometheus server scraping a
real gemmserve on loopback (RELIABILITY F6): counters equal what was sent,
histogram counts match, a histogram_quantile of the latency lies between the
fastest and slowest latency the client saw; every metric the dashboard and
docs/metrics.md names exists in a live scrape; scraping during load neither fails
nor changes an answer."""
import glob
import json
import os
import re
import threading
import time
import unittest
import urllib.request

import grpc
import numpy as np

from gemmserve_client import make_infer_request
from gemmserve_testing.base import GemmServeTestCase
from gemmserve_testing.prometheus import PrometheusProcess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# Fine latency buckets (0.25 ms wide up to 50 ms) so the quantile estimate is
# close to what was observed.
BUCKETS = ",".join(f"{0.00025 * i:.5f}" for i in range(1, 201))


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        if r.status != 200:
            raise AssertionError(f"/metrics answered {r.status}")
        return r.read().decode()


class PrometheusCountsTest(GemmServeTestCase):
    server_flags = (f"--latency_buckets={BUCKETS}", "--max_output_bytes=67108864")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.prom = PrometheusProcess(cls.server.metrics_port).start()
        cls.addClassCleanup(cls.prom.stop)

    def timed(self, request, expect_code):
        start = time.perf_counter()
        try:
            self.stub.ModelInfer(request, timeout=60)
            code = grpc.StatusCode.OK
        except grpc.RpcError as error:
            code = error.code()
        elapsed = time.perf_counter() - start
        self.assertEqual(code, expect_code)
        return elapsed

    def test_counters_histograms_and_quantile_match_what_the_client_saw(self):
        rng = np.random.default_rng(5)
        latencies, flops, bytes_in, bytes_out, weight_bytes = [], 0, 0, 0, 0
        for i in range(20):  # sizes spread the latencies from ~0.1 to ~5 ms
            m, k, n = (int(rng.integers(64, 400)) for _ in range(3))
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
            latencies.append(self.timed(make_infer_request("matmul", [("A", a), ("B", b)]),
                                        grpc.StatusCode.OK))
            flops += 2 * m * n * k
            bytes_in += a.nbytes + b.nbytes
            bytes_out += m * n * 4
            weight_bytes += b.nbytes  # the request's B, read once by its call
        for i in range(5):
            bad = make_infer_request("matmul", [("A", np.ones((2, 3), np.float32)),
                                                ("B", np.ones((4, 5), np.float32))])
            latencies.append(self.timed(bad, grpc.StatusCode.INVALID_ARGUMENT))
        for i in range(2):
            huge = make_infer_request("matmul", [("A", np.ones((100000, 1), np.float32)),
                                                 ("B", np.ones((1, 100000), np.float32))])
            latencies.append(self.timed(huge, grpc.StatusCode.RESOURCE_EXHAUSTED))
        for i in range(3):
            self.timed(make_infer_request("no_such_model", [("A", np.ones((1, 1), np.float32))]),
                       grpc.StatusCode.NOT_FOUND)

        p = self.prom
        ok = p.wait_for('gemmserve_requests_total{model="matmul",code="OK"}', lambda v: v >= 20)
        self.assertEqual(ok, 20)
        # Everything below was recorded before the OK count reached 20 and the
        # scrape that saw it; wait for the last counters all the same.
        p.wait_for('gemmserve_requests_total{model="_unknown",code="NOT_FOUND"}', lambda v: v >= 3)
        expect = {
            'gemmserve_requests_total{model="matmul",code="INVALID_ARGUMENT"}': 5,
            'gemmserve_requests_total{model="matmul",code="RESOURCE_EXHAUSTED"}': 2,
            'gemmserve_requests_total{model="_unknown",code="NOT_FOUND"}': 3,
            'sum(gemmserve_requests_total{model="grouped_matmul"})': 0,
            'gemmserve_rejected_total{model="matmul",reason="invalid"}': 5,
            'gemmserve_rejected_total{model="matmul",reason="over_limit"}': 2,
            'gemmserve_rejected_total{model="matmul",reason="queue_full"}': 0,
            'gemmserve_request_duration_seconds_count{model="matmul"}': 27,
            'gemmserve_queue_duration_seconds_count{model="matmul"}': 20,
            'gemmserve_compute_duration_seconds_count{model="matmul"}': 20,
            'gemmserve_batch_requests_count{model="matmul"}': 20,
            'gemmserve_batch_requests_sum{model="matmul"}': 20,
            'gemmserve_flops_total{model="matmul",datatype="FP32"}': flops,
            'gemmserve_bytes_total{model="matmul",direction="in"}': bytes_in,
            'gemmserve_bytes_total{model="matmul",direction="out"}': bytes_out,
            'gemmserve_weight_bytes_total{model="matmul"}': weight_bytes,
            "gemmserve_inflight_requests": 0,
            'gemmserve_build_info{version!=""}': 1,
        }
        for expr, want in expect.items():
            with self.subTest(expr):
                self.assertEqual(p.scalar(expr), want)
        median = p.scalar('histogram_quantile(0.5, '
                          'gemmserve_request_duration_seconds_bucket{model="matmul"})')
        self.assertGreaterEqual(median, min(latencies) * 0.5)  # server time < client time
        self.assertLessEqual(median, max(latencies))
        p99 = p.scalar('histogram_quantile(0.99, '
                       'gemmserve_request_duration_seconds_bucket{model="matmul"})')
        self.assertLessEqual(median, p99)
        # The server takes its end time once the answer is handed to gRPC, so
        # a server thread descheduled right then (a loaded 2-core machine:
        # seen 1.3 ms) records more than the client saw: one bucket for the
        # interpolation, 2.5 ms for that.
        self.assertLessEqual(p99, max(latencies) + 0.00025 + 0.0025)


_MADE = []


def tearDownModule():
    import shutil
    for path in _MADE:
        shutil.rmtree(path, ignore_errors=True)


def _sharded_router_repository():
    """A sharded layer's router (its shards need not answer: its metric series exist from
    load), so the router's metrics are in the scrape too."""
    import importlib.util
    import tempfile
    spec = importlib.util.spec_from_file_location(
        "make_moe_layer", os.path.join(ROOT, "scripts", "make_moe_layer.py"))
    layer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layer)
    out = tempfile.mkdtemp(prefix="gemmserve-metrics-router-")
    _MADE.append(out)
    whole = layer.layer_model(layer.layer_graph(8, 4, 2, 1, "fp32", routing="softmax_topk"))
    layer.write_sharded(out, "router", whole, 2, ["127.0.0.1:1", "127.0.0.1:1"])
    return os.path.join(out, "router")


class MetricNamesTest(GemmServeTestCase):
    server_flags = (f"--model_repository={_sharded_router_repository()}",)

    def test_every_metric_the_dashboard_and_readme_name_exists_in_a_live_scrape(self):
        text = scrape(self.server.metrics_url)
        live = set(re.findall(r"^(gemmserve_[a-z_]+)", text, re.M))
        named = set()
        sources = glob.glob(os.path.join(ROOT, "deploy", "grafana", "**", "*.json"), recursive=True)
        self.assertTrue(sources, "no Grafana dashboard under deploy/grafana")
        sources += glob.glob(os.path.join(ROOT, "deploy", "prometheus", "*.yml"))
        for path in sources:
            with open(path) as f:
                named |= set(re.findall(r"\b(gemmserve_[a-z_]+)", f.read()))
        with open(os.path.join(ROOT, "docs", "metrics.md")) as f:
            metrics_section = f.read()
        # Histograms appear as their _bucket/_sum/_count series.
        named |= {n for n in re.findall(r"\b(gemmserve_[a-z_]+)", metrics_section)}
        live |= {re.sub(r"_(bucket|sum|count)$", "", n) for n in live}
        self.assertGreater(len(named), 10)
        for name in sorted(named):
            with self.subTest(name):
                self.assertIn(name, live, f"{name} is named but not exported")
        for path in sources:
            if path.endswith(".json"):
                with open(path) as f:
                    json.load(f)  # the dashboard is valid JSON


class ScrapeDuringLoadTest(GemmServeTestCase):
    def test_scraping_during_load_neither_fails_nor_changes_answers(self):
        stop = threading.Event()
        scrapes, failures = [0], []

        def scraper():
            while not stop.is_set():
                try:
                    body = scrape(self.server.metrics_url)
                    if "gemmserve_requests_total" not in body:
                        failures.append("scrape without gemmserve_requests_total")
                    scrapes[0] += 1
                except Exception as e:  # any failure of the endpoint counts
                    failures.append(repr(e))

        threads = [threading.Thread(target=scraper) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            rng = np.random.default_rng(9)
            for i in range(150):
                a = rng.integers(-8, 8, (int(rng.integers(1, 40)), 16)).astype(np.float32)
                b = rng.integers(-8, 8, (16, int(rng.integers(1, 40)))).astype(np.float32)
                y = self.infer_outputs("matmul", [("A", a), ("B", b)])["Y"]
                np.testing.assert_array_equal(y, a @ b)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
        self.assertEqual(failures, [])
        self.assertGreater(scrapes[0], 5)
        final = scrape(self.server.metrics_url)
        match = re.search(r'^gemmserve_requests_total\{[^}]*code="OK"[^}]*model="matmul"[^}]*\} (\S+)',
                          final, re.M) or re.search(
            r'^gemmserve_requests_total\{[^}]*model="matmul"[^}]*code="OK"[^}]*\} (\S+)', final, re.M)
        self.assertIsNotNone(match, final[:2000])
        self.assertGreaterEqual(float(match.group(1)), 150)


if __name__ == "__main__":
    unittest.main()
