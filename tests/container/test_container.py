"""The image, run for real in a Docker engine (tests/container.sh builds it and
runs this): through published loopback ports, under the restrictions the
Kubernetes manifest asks for, with the HEALTHCHECK, `docker stop` and a model
repository mounted from the host; then docker-compose brings up gemmserve with
Prometheus, which must scrape it inside the compose network.

Environment: GEMMSERVE_IMAGE (default gemmserve:test), GEMMSERVE_CLI (the host's
gemmserve-cli, for health and the load generator)."""
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

import grpc
import numpy as np
import onnx
from onnx import numpy_helper

from gemmserve_client import decode_outputs, make_infer_request, pb2, pb2_grpc
from gemmserve_client.http import HttpClient
from gemmserve_testing.base import open_channel
from gemmserve_testing.onnx_models import grouped_graph, grouped_reference, write_model
from gemmserve_testing.process import metric_sum

DOCKER = "/usr/bin/docker"  # the package's client, not a newer static one earlier in PATH
IMAGE = os.environ.get("GEMMSERVE_IMAGE", "gemmserve:test")
CLI = os.environ["GEMMSERVE_CLI"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RNG = np.random.default_rng(14)
# What the Kubernetes manifest asks of the container (deploy/k8s/deployment.yaml).
RESTRICTED = ("--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
              "--security-opt", "no-new-privileges")


def docker(*args, check=True, timeout=120):
    result = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({result.returncode}):\n"
                             f"{result.stdout}\n{result.stderr}")
    return result.stdout.strip()


def wait_until(predicate, what, timeout=90):
    """Polls an outside state (a container's, Prometheus') with a deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        threading.Event().wait(0.25)
    raise AssertionError(f"timed out waiting for {what}")


class Container:
    """One container of the image with its gRPC, metrics and HTTP ports published on
    loopback."""

    def __init__(self, *run_args, args=(), grpc_port=8001, metrics_port=8002, http_port=8000):
        self.id = docker("run", "-d", "-p", f"127.0.0.1::{grpc_port}",
                         "-p", f"127.0.0.1::{metrics_port}", "-p", f"127.0.0.1::{http_port}",
                         *run_args, IMAGE, *args)
        self.grpc = self.published(grpc_port)
        self.metrics_url = f"http://{self.published(metrics_port)}/metrics"
        self.http_url = f"http://{self.published(http_port)}"
        wait_until(self.serving, f"container {self.id[:12]} to serve")

    def published(self, port):
        return docker("port", self.id, f"{port}/tcp").splitlines()[0]

    def serving(self):
        state = docker("inspect", "-f", "{{.State.Running}}", self.id)
        if state != "true":
            raise AssertionError(f"the container stopped:\n{self.logs()}")
        return subprocess.run([CLI, f"--url={self.grpc}", "--timeout_ms=2000", "health"],
                              capture_output=True).returncode == 0

    def health(self):
        return docker("inspect", "-f", "{{.State.Health.Status}}", self.id)

    def logs(self):
        return subprocess.run([DOCKER, "logs", self.id], capture_output=True, text=True).stderr

    def remove(self):
        docker("rm", "-f", self.id, check=False)


def example_repository_weights():
    """The example repository the image embeds, written again here from the same seeds."""
    repo = tempfile.mkdtemp(prefix="gemmserve-example-")
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "make_model_repository.py"),
                    repo], check=True, capture_output=True)
    weights = {}
    for name in ("moe", "linear", "moe_layer"):
        model = onnx.load(os.path.join(repo, name, "1", "model.onnx"),
                          load_external_data=False)
        onnx.load_external_data_for_model(model, os.path.join(repo, name, "1"))
        weights[name] = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        if name == "moe_layer":
            weights[name]["model"] = model  # evaluated by scripts/make_moe_layer.py
    shutil.rmtree(repo)
    return weights


def moe_layer_reference(model, x):
    """The example's mixture-of-experts layer in float64, as its graph computes it."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "make_moe_layer", os.path.join(ROOT, "scripts", "make_moe_layer.py"))
    make_moe_layer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_moe_layer)
    return make_moe_layer.evaluate(model, {"x": x.astype(np.float64)})["out"]


class ImageTest(unittest.TestCase):
    def setUp(self):
        self.containers = []

    def tearDown(self):
        for c in self.containers:
            c.remove()

    def start(self, *run_args, **kw):
        c = Container(*run_args, **kw)
        self.containers.append(c)
        return c

    def test_restricted_container_serves_operators_example_models_metrics_and_load(self):
        c = self.start(*RESTRICTED)
        self.assertEqual(docker("exec", c.id, "id", "-u"), "10001")
        self.assertEqual(docker("inspect", "-f", "{{.Config.User}}", c.id), "10001")
        stub = pb2_grpc.GRPCInferenceServiceStub(open_channel(c.grpc))
        a = RNG.standard_normal((3, 5)).astype(np.float32)
        b = RNG.standard_normal((5, 4)).astype(np.float32)
        y = decode_outputs(stub.ModelInfer(make_infer_request("matmul", [("A", a), ("B", b)]),
                                           timeout=30))["Y"]
        np.testing.assert_allclose(y, a @ b, rtol=1e-5, atol=1e-5)
        # The REST front end on the image's port 8000: the same answer, binary and JSON.
        with HttpClient(c.http_url, timeout=30) as http:
            self.assertTrue(http.ready())
            for binary in (True, False):
                y_http = http.infer("matmul", [("A", a), ("B", b)], binary=binary)["Y"]
                self.assertEqual(y_http.tobytes(), y.tobytes(), f"binary={binary}")
        x = RNG.standard_normal((4, 8)).astype(np.float32)
        w = RNG.standard_normal((3, 8, 2)).astype(np.float32)
        idx = RNG.integers(0, 3, (4, 2)).astype(np.int64)
        out = decode_outputs(stub.ModelInfer(make_infer_request(
            "grouped_matmul", [("input", x), ("weights", w), ("group_indices", idx)]),
            timeout=30))["output"]
        np.testing.assert_allclose(out, grouped_reference(x, w, idx), rtol=1e-5, atol=1e-5)
        weights = example_repository_weights()
        tokens = RNG.standard_normal((3, 512)).astype(np.float32)
        routing = RNG.integers(0, 16, (3, 2)).astype(np.int64)
        moe = decode_outputs(stub.ModelInfer(make_infer_request(
            "moe", [("tokens", tokens), ("routing", routing)]), timeout=30))["expert_out"]
        np.testing.assert_allclose(moe, grouped_reference(tokens, weights["moe"]["experts"],
                                                          routing, weights["moe"]["expert_bias"]),
                                   rtol=1e-4, atol=1e-4)
        hidden = RNG.standard_normal((2, 512)).astype(np.float32)
        projected = decode_outputs(stub.ModelInfer(make_infer_request(
            "linear", [("hidden", hidden)]), timeout=30))["projected"]
        np.testing.assert_allclose(projected, hidden.astype(np.float64) @ weights["linear"]["proj"],
                                   rtol=1e-4, atol=1e-4)
        layer_out = decode_outputs(stub.ModelInfer(make_infer_request(
            "moe_layer", [("x", hidden)]), timeout=30))["out"]
        np.testing.assert_allclose(layer_out, moe_layer_reference(weights["moe_layer"]["model"],
                                                                  hidden), rtol=1e-4, atol=1e-4)
        self.assertGreaterEqual(metric_sum(c.metrics_url, "gemmserve_requests_total",
                                           model="moe", code="OK"), 1)
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "perf.json")
            subprocess.run([CLI, f"--url={c.grpc}", "perf", "--model=moe", "--rows=4",
                            "--concurrency=4", "--duration=2", "--warmup=0.5",
                            f"--json_out={report}"], check=True, capture_output=True, timeout=60)
            with open(report) as f:
                perf = json.load(f)
        self.assertGreater(perf["ok"], 0)
        self.assertEqual(perf["errors"], {})

    def test_healthcheck_turns_healthy_with_default_ports_and_with_moved_ones(self):
        fast = ("--health-interval=1s", "--health-start-period=1s")
        default = self.start(*fast, *RESTRICTED)
        moved = self.start(*fast, *RESTRICTED, args=("--grpc_port=18001", "--metrics_port=18002"),
                           grpc_port=18001, metrics_port=18002)
        for c in (default, moved):
            wait_until(lambda c=c: c.health() == "healthy", f"{c.id[:12]} healthy")

    def test_docker_stop_with_a_request_in_flight_completes_it_and_exits_0(self):
        c = self.start(*RESTRICTED)
        a = np.ones((3072, 3072), np.float32)
        stub = pb2_grpc.GRPCInferenceServiceStub(open_channel(c.grpc))
        future = stub.ModelInfer.future(make_infer_request("matmul", [("A", a), ("B", a)]),
                                        timeout=300)
        wait_until(lambda: metric_sum(c.metrics_url, "gemmserve_inflight_requests") >= 1
                   or future.done(), "the request in flight", timeout=60)
        self.assertFalse(future.done(), "the request ended before docker stop was sent")
        start = time.monotonic()
        docker("stop", "-t", "30", c.id, timeout=60)
        took = time.monotonic() - start
        y = decode_outputs(future.result(timeout=60))["Y"]
        self.assertEqual(float(y[0, 0]), 3072.0)
        self.assertEqual(docker("inspect", "-f", "{{.State.ExitCode}}", c.id), "0")
        self.assertLess(took, 15, "the stop took most of the 30 s grace period")

    def test_a_model_repository_mounted_read_only_from_the_host_is_served(self):
        repo = tempfile.mkdtemp(prefix="gemmserve-mounted-")
        self.addCleanup(shutil.rmtree, repo, True)
        w = RNG.standard_normal((4, 6, 3)).astype(np.float32)
        write_model(repo, "mounted", grouped_graph("mounted", w, 2), external=True)
        for dirpath, dirnames, filenames in os.walk(repo):  # readable by uid 10001
            os.chmod(dirpath, 0o755)
            for name in filenames:
                os.chmod(os.path.join(dirpath, name), 0o644)
        c = self.start(*RESTRICTED, "-v", f"{repo}:/models:ro")
        stub = pb2_grpc.GRPCInferenceServiceStub(open_channel(c.grpc))
        x = RNG.standard_normal((5, 6)).astype(np.float32)
        idx = RNG.integers(0, 4, (5, 2)).astype(np.int64)
        out = decode_outputs(stub.ModelInfer(make_infer_request(
            "mounted", [("tokens", x), ("routing", idx)]), timeout=30))["expert_out"]
        np.testing.assert_allclose(out, grouped_reference(x, w, idx), rtol=1e-5, atol=1e-5)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ComposeTest(unittest.TestCase):
    """deploy/docker-compose.yml with Debian's docker-compose, Prometheus from Debian's
    package (tests/container/compose.test.yml); Grafana is not started."""
    PROJECT = "gemmserve-container-test"
    FILES = (("deploy", "docker-compose.yml"), ("tests", "container", "compose.test.yml"))

    def compose(self, *args, timeout=600):
        env = {**os.environ, **self.ports}
        files = [arg for path in self.FILES for arg in ("-f", os.path.join(ROOT, *path))]
        result = subprocess.run(["docker-compose", "-p", self.PROJECT, *files, *args],
                                capture_output=True, text=True, env=env, timeout=timeout)
        if result.returncode != 0:
            raise AssertionError(f"docker-compose {' '.join(args)}:\n{result.stderr}")
        return result.stdout

    def test_prometheus_scrapes_gemmserve_inside_the_compose_network(self):
        self.ports = {"GEMMSERVE_HTTP_PORT": str(free_port()),
                      "GEMMSERVE_GRPC_PORT": str(free_port()),
                      "GEMMSERVE_METRICS_PORT": str(free_port()),
                      "PROMETHEUS_PORT": str(free_port())}
        self.addCleanup(self.compose, "down", "--volumes", "--remove-orphans")
        self.compose("up", "-d", "gemmserve", "prometheus")
        grpc_address = f"127.0.0.1:{self.ports['GEMMSERVE_GRPC_PORT']}"
        wait_until(lambda: subprocess.run([CLI, f"--url={grpc_address}", "--timeout_ms=2000",
                                           "health"], capture_output=True).returncode == 0,
                   "gemmserve in compose to serve")
        stub = pb2_grpc.GRPCInferenceServiceStub(open_channel(grpc_address))
        a = np.ones((2, 2), np.float32)
        for _ in range(2):
            stub.ModelInfer(make_infer_request("matmul", [("A", a), ("B", a)]), timeout=30)
        # The third over the HTTP port compose publishes; counted in the same metric.
        with HttpClient(f"http://127.0.0.1:{self.ports['GEMMSERVE_HTTP_PORT']}",
                        timeout=30) as http:
            self.assertEqual(http.infer("matmul", [("A", a), ("B", a)])["Y"].tolist(),
                             [[2.0, 2.0], [2.0, 2.0]])
        api = f"http://127.0.0.1:{self.ports['PROMETHEUS_PORT']}/api/v1/query?"

        def query(expr):
            try:
                with urllib.request.urlopen(api + urllib.parse.urlencode({"query": expr}),
                                            timeout=5) as r:
                    result = json.load(r)["data"]["result"]
            except OSError:
                return None  # not up yet
            return float(result[0]["value"][1]) if result else None

        self.assertEqual(wait_until(lambda: query('up{job="gemmserve"}') == 1,
                                    "Prometheus to scrape gemmserve", timeout=120), True)
        wait_until(lambda: (query('sum(gemmserve_requests_total{model="matmul",code="OK"})')
                            or 0) >= 3, "the requests in Prometheus", timeout=120)


class ShardedComposeTest(ComposeTest):
    """deploy/docker-compose.sharded.yml: a router and two shard containers answer the
    example's moe_layer as the unsharded layer (its graph in float64) does."""
    PROJECT = "gemmserve-sharded-test"
    FILES = (("deploy", "docker-compose.sharded.yml"),
             ("tests", "container", "compose.sharded.test.yml"))
    test_prometheus_scrapes_gemmserve_inside_the_compose_network = None  # ComposeTest's own

    def test_router_and_two_shards_answer_as_the_unsharded_layer(self):
        self.ports = {"GEMMSERVE_HTTP_PORT": str(free_port()),
                      "GEMMSERVE_GRPC_PORT": str(free_port()),
                      "GEMMSERVE_METRICS_PORT": str(free_port())}
        self.addCleanup(self.compose, "down", "--volumes", "--remove-orphans")
        self.compose("up", "-d", "shard0", "shard1", "router")
        address = f"127.0.0.1:{self.ports['GEMMSERVE_GRPC_PORT']}"
        channel = open_channel(address)
        self.addCleanup(channel.close)
        stub = pb2_grpc.GRPCInferenceServiceStub(channel)

        def ready():
            try:
                return stub.ModelReady(pb2.ModelReadyRequest(name="moe_layer"), timeout=2).ready
            except grpc.RpcError:
                return False

        wait_until(ready, "the router to see both shards ready", timeout=120)
        spec = importlib.util.spec_from_file_location(
            "make_moe_layer", os.path.join(ROOT, "scripts", "make_moe_layer.py"))
        layer = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(layer)
        model = layer.layer_model(layer.layer_graph(512, 256, 16, 2, "fp32", gate_up="fused",
                                                    routing="softmax_topk", normalise=True,
                                                    seed=4))
        x = np.random.default_rng(53).uniform(-1, 1, (9, 512)).astype(np.float32)
        got = decode_outputs(stub.ModelInfer(make_infer_request("moe_layer", [("x", x)]),
                                             timeout=30))["out"]
        ref = layer.evaluate(model, {"x": x.astype(np.float64)})["out"]
        self.assertLessEqual(np.max(np.abs(got - ref)) / np.max(np.abs(ref)), 1e-4)


if __name__ == "__main__":
    unittest.main()
