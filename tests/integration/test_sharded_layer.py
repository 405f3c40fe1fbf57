"""A mixture-of-experts layer sharded by expert across servers (issue 53): shards and a router
written by `scripts/make_moe_layer.py --shards`, each a real gemmserve on loopback.

The router answers every layer form (FP32, FP16, BF16, INT4; routed by the caller and in the
graph; a shared expert) as the same layer unsharded does (served beside it from the same
seed), within the value type's bound of the graph in float64, through gRPC and HTTP; its
metadata is the unsharded layer's. A shard answers the FP32 partial sum of its own experts
(others' ids add nothing, a negative id is refused). Faults: a shard killed (-9) under load
makes calls fail with UNAVAILABLE naming the shard, never a wrong answer; the router's
readiness (ModelReady, the repository index, HTTP's model ready with the reason) follows it,
and it is used again once restarted; with two
replicas per shard, killing one loses no call; a stopped (SIGSTOP) shard ends in the caller's
deadline. Where the run is root, shards in network namespaces behind veth links shaped like
25 GbE answer too, and a host whose link goes down is named."""
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import grpc
import numpy as np
import onnx

from gemmserve_client import decode_outputs, make_infer_request, pb2, pb2_grpc
from gemmserve_client.http import HttpClient
from gemmserve_testing.base import open_channel
from gemmserve_testing.process import metric_sum
from gemmserve_testing.references import to_float, to_wire
from gemmserve_testing.server import ServerProcess

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
    "make_moe_layer", os.path.join(_ROOT, "scripts", "make_moe_layer.py"))
layer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layer)

K, I, G, S = 64, 40, 12, 3
BOUND = {"FP32": 1e-4, "FP16": 5e-3, "BF16": 3e-2}
# name -> (datatype, shards, make_moe_layer options)
FORMS = {
    "given_fp32": ("FP32", 2, dict(gate_up="fused", routing="given")),
    "softmax_shared_bf16": ("BF16", 3, dict(gate_up="separate", routing="softmax_topk",
                                            normalise=True, shared_expert=True)),
    "topk_fp16": ("FP16", 2, dict(gate_up="fused", routing="topk_softmax")),
    "softmax_int4_shared": ("FP32", 3, dict(gate_up="fused", routing="softmax_topk", bits=4,
                                            shared_expert=True)),
}
SHARD_SERVERS = 3


def _whole(datatype, options):
    options = dict(options)
    options.pop("bits", None)
    return layer.layer_model(layer.layer_graph(K, I, G, S, datatype.lower(), seed=53, **options))


def write_repositories(root, forms, replicas_of=None):
    """root/whole (the unsharded layers, as `whole_<name>`), root/shard<j> (shard j of every
    form), and the router's models (their configs written once the shards listen, by
    `write_routers`). Returns {name: (datatype, unsharded model, options)}."""
    models = {}
    for name, (dt, shards, options) in forms.items():
        whole = _whole(dt, options)
        bits = options.get("bits", 0)
        out = os.path.join(root, "made", name)
        layer.write_sharded(out, name, whole, shards, ["pending"] * shards, bits, 16)
        for j in range(shards):
            shutil.copytree(os.path.join(out, f"shard{j}", name),
                            os.path.join(root, f"shard{j}", name))
        shutil.copytree(os.path.join(out, "router", name), os.path.join(root, "router", name))
        served = layer.quantize_layer(whole, bits, 16) if bits else whole
        path = os.path.join(root, "router", f"whole_{name}", "1", "model.onnx")
        os.makedirs(os.path.dirname(path))
        onnx.save(served, path)
        models[name] = (dt, served, options)
    return models


def write_routers(root, forms, addresses):
    """The routers' configs: shard j of each form at addresses[j] (a list of replicas)."""
    for name, (_, shards, _) in forms.items():
        ranges = layer.expert_ranges(G, shards)
        text = ";".join(f"{a}:{b}={'|'.join(addresses[j])}" for j, (a, b) in enumerate(ranges))
        with open(os.path.join(root, "router", name, "config.pbtxt"), "w") as f:
            f.write(layer._config(name, {"shards": text}))


def inputs(model, datatype, options, m, rng):
    """Wire inputs and float64 feeds; routing in the graph kept clear of near-ties."""
    w_r = next((layer._initializer(t) for t in model.graph.initializer if t.name == "W_r"), None)
    x = to_wire(datatype, rng.uniform(-1, 1, (m, K)))
    if w_r is not None:
        for row in range(m):
            while np.diff(np.sort(to_float(datatype, x[row]) @ w_r)[::-1][S - 1:S + 1])[0] > -1e-3:
                x[row] = to_wire(datatype, rng.uniform(-1, 1, K))
    wire = {"x": (x, datatype)}
    if options["routing"] == "given":
        wire["ids"] = (np.stack([rng.permutation(G)[:S] for _ in range(m)]).astype(np.int64),
                       "INT64")
        wire["w"] = (to_wire(datatype, rng.uniform(0, 1, (m, S))), datatype)
    feeds = {n: (to_float(dt, a) if dt != "INT64" else a) for n, (a, dt) in wire.items()}
    return wire, feeds


def request(name, wire):
    return make_infer_request(name, [(n, a, dt) for n, (a, dt) in wire.items()])


def wait_ready(stub, name, ready=True, timeout=20.0):
    """Polls ModelReady until it says `ready`; the last answer."""
    end = time.monotonic() + timeout
    while True:
        got = stub.ModelReady(pb2.ModelReadyRequest(name=name), timeout=5).ready
        if got == ready or time.monotonic() > end:
            return got
        time.sleep(0.05)


class ShardedLayerTest(unittest.TestCase):
    """Three shard servers and a router that also serves every layer unsharded."""

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="gemmserve-sharded-")
        cls.addClassCleanup(shutil.rmtree, cls.root, True)
        cls.models = write_repositories(cls.root, FORMS)
        cls.shards = []
        for j in range(SHARD_SERVERS):
            server = ServerProcess(f"--model_repository={cls.root}/shard{j}", "--http_port=-1",
                                   "--metrics_port=-1", compute_threads=1).start()
            cls.addClassCleanup(server.stop)
            cls.shards.append(server)
        write_routers(cls.root, FORMS, [[s.address] for s in cls.shards])
        cls.router = ServerProcess(f"--model_repository={cls.root}/router",
                                   compute_threads=1).start()
        cls.addClassCleanup(cls.router.stop)
        cls.channel = open_channel(cls.router.address)
        cls.addClassCleanup(cls.channel.close)
        cls.stub = pb2_grpc.GRPCInferenceServiceStub(cls.channel)
        for name in FORMS:
            assert wait_ready(cls.stub, name), f"router model {name} never ready"

    def infer(self, name, wire):
        return decode_outputs(self.stub.ModelInfer(request(name, wire), timeout=60))["out"]

    def test_every_form_answers_as_the_unsharded_layer(self):
        rng = np.random.default_rng(530)
        for name, (dt, model, options) in self.models.items():
            for m in (1, 5, 40):
                with self.subTest(model=name, m=m):
                    wire, feeds = inputs(model, dt, options, m, rng)
                    sharded = to_float(dt, self.infer(name, wire))
                    whole = to_float(dt, self.infer(f"whole_{name}", wire))
                    ref = layer.evaluate(model, feeds)["out"]
                    scale = max(np.max(np.abs(ref)), 1e-30)
                    self.assertLessEqual(np.max(np.abs(sharded - ref)) / scale, BOUND[dt])
                    self.assertLessEqual(np.max(np.abs(sharded - whole)) / scale, BOUND[dt])

    def test_http_answers_equal_grpc_and_metadata_is_the_unsharded_layers(self):
        rng = np.random.default_rng(531)
        for name, (dt, model, options) in self.models.items():
            with self.subTest(name):
                wire, _ = inputs(model, dt, options, 7, rng)
                via_grpc = self.infer(name, wire)
                with HttpClient(self.router.http_url) as http:
                    via_http = http.infer(name, [(n, a, d) for n, (a, d) in wire.items()])["out"]
                self.assertEqual(np.asarray(via_http).tobytes(), via_grpc.tobytes())
                md = [self.stub.ModelMetadata(pb2.ModelMetadataRequest(name=n), timeout=10)
                      for n in (name, f"whole_{name}")]
                describe = [[(t.name, t.datatype, list(t.shape)) for t in list(m.inputs) +
                             list(m.outputs)] for m in md]
                self.assertEqual(describe[0], describe[1])

    def test_a_shard_answers_its_own_experts_partial_sum_in_fp32(self):
        name = "given_fp32"
        dt, model, options = self.models[name]
        first, last = layer.expert_ranges(G, 2)[1]
        channel = open_channel(self.shards[1].address)
        self.addCleanup(channel.close)
        shard = pb2_grpc.GRPCInferenceServiceStub(channel)
        config = shard.ModelConfig(pb2.ModelConfigRequest(name=name), timeout=10).config
        self.assertEqual(config.parameters["expert_range"].string_value, f"{first}:{last}")
        rng = np.random.default_rng(532)
        wire, feeds = inputs(model, dt, options, 6, rng)
        ids = wire["ids"][0]
        got = decode_outputs(shard.ModelInfer(request(name, wire), timeout=30))["out"]
        self.assertEqual(got.dtype, np.float32)
        # The reference with the other shards' pairs weighted 0.
        mine = (ids >= first) & (ids < last)
        feeds["w"] = np.where(mine, feeds["w"], 0.0)
        ref = layer.evaluate(model, feeds)["out"]
        self.assertLessEqual(np.max(np.abs(got - ref)) / np.max(np.abs(ref)), BOUND["FP32"])
        wire["ids"] = (np.where(np.arange(S) == 0, -1, ids), "INT64")
        with self.assertRaises(grpc.RpcError) as refused:
            shard.ModelInfer(request(name, wire), timeout=30)
        self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("negative", refused.exception.details())

    def test_a_server_holding_other_experts_is_not_taken_for_the_shard(self):
        """Shards listed the wrong way round: each answers, but its expert_range is not the
        range the router names, so no replica is ready and no call is made to it."""
        name = "given_fp32"
        good = [[s.address] for s in self.shards]

        def reload(addresses):
            ranges = layer.expert_ranges(G, 2)
            text = ";".join(f"{a}:{b}={addresses[j][0]}" for j, (a, b) in enumerate(ranges))
            self.stub.RepositoryModelLoad(pb2.RepositoryModelLoadRequest(
                model_name=name, parameters={"config": pb2.ModelRepositoryParameter(
                    string_param=layer._config(name, {"shards": text}))}), timeout=60)

        reload([good[1], good[0]])
        self.addCleanup(wait_ready, self.stub, name)
        self.addCleanup(reload, good)
        self.assertFalse(wait_ready(self.stub, name, ready=False))

        def reason():  # "not probed yet" until the new router's first probe
            index = self.stub.RepositoryIndex(pb2.RepositoryIndexRequest(), timeout=10)
            return next(m.reason for m in index.models if m.name == name)

        end = time.monotonic() + 20
        while "not probed yet" in reason() and time.monotonic() < end:
            time.sleep(0.05)
        self.assertIn("is not shard 0:6 (parameter expert_range is '6:12')", reason())
        self.assertFalse(wait_ready(self.stub, name, ready=False))

    def test_router_counts_tokens_per_expert_and_times_each_shard(self):
        name = "given_fp32"
        dt, model, options = self.models[name]
        wire, _ = inputs(model, dt, options, 4, np.random.default_rng(533))
        wire["ids"] = (np.array([[0, 1, 11]] * 4, np.int64), "INT64")
        url = self.router.metrics_url
        before = [metric_sum(url, "gemmserve_expert_tokens_total", model=name, expert=str(e))
                  for e in (0, 5, 11)]
        calls = metric_sum(url, "gemmserve_shard_call_duration_seconds_count", model=name,
                           shard="1")
        self.infer(name, wire)
        after = [metric_sum(url, "gemmserve_expert_tokens_total", model=name, expert=str(e))
                 for e in (0, 5, 11)]
        self.assertEqual([a - b for a, b in zip(after, before)], [4, 0, 4])
        self.assertEqual(metric_sum(url, "gemmserve_shard_call_duration_seconds_count",
                                    model=name, shard="1") - calls, 1)

    def test_out_of_range_ids_are_refused_by_the_router_before_any_shard_call(self):
        name = "given_fp32"
        dt, model, options = self.models[name]
        wire, _ = inputs(model, dt, options, 2, np.random.default_rng(534))
        wire["ids"] = (np.array([[0, 1, 2], [G, 0, 1]], np.int64), "INT64")
        with self.assertRaises(grpc.RpcError) as refused:
            self.stub.ModelInfer(request(name, wire), timeout=30)
        self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("'ids'", refused.exception.details())

    def test_configs_that_do_not_fit_the_layer_are_refused_at_load(self):
        """Each rule of expert_range and shards, through RepositoryModelLoad; the models
        already served serve on."""
        def config(name, key, value):
            return layer._config(name, {key: value})

        cases = [
            ("whole_given_fp32", "expert_range", "0:6", "holds 6 experts; the model file holds 12"),
            ("whole_topk_fp16", "expert_range", "0:12", "caller-routed form"),
            ("whole_softmax_shared_bf16", "expert_range", "12:0", "FIRST:LAST"),
            ("whole_given_fp32", "shards", "0:6=127.0.0.1:1", "the layer has G=12"),
            ("whole_given_fp32", "shards", "0:12=a b", "an address must be"),
            ("given_fp32", "shards", "0:4=a:1;6:12=b:1", "expected 4"),
        ]
        for name, key, value, want in cases:
            with self.subTest(name=name, key=key, value=value):
                with self.assertRaises(grpc.RpcError) as refused:
                    self.stub.RepositoryModelLoad(pb2.RepositoryModelLoadRequest(
                        model_name=name, parameters={"config": pb2.ModelRepositoryParameter(
                            string_param=config(name, key, value))}), timeout=60)
                self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(want, refused.exception.details())
        self.test_every_form_answers_as_the_unsharded_layer()


class ShardFaultTest(unittest.TestCase):
    """One layer, two shards; replicas per shard as the test says. Every answer is compared
    with the float64 reference: a fault may fail a call, never falsify one."""

    def start_layer(self, replicas):
        root = tempfile.mkdtemp(prefix="gemmserve-shard-fault-")
        self.addCleanup(shutil.rmtree, root, True)
        forms = {"layer": ("FP32", 2, dict(gate_up="fused", routing="softmax_topk"))}
        self.dt, self.model, self.options = write_repositories(root, forms)["layer"]
        self.shards = []  # [shard][replica]
        for j in range(2):
            self.shards.append([self.start_shard(f"{root}/shard{j}") for _ in range(replicas)])
        write_routers(root, forms, [[r.address for r in s] for s in self.shards])
        self.root = root
        self.router = ServerProcess(f"--model_repository={root}/router",
                                    compute_threads=1).start()
        self.addCleanup(self.router.stop)
        channel = open_channel(self.router.address)
        self.addCleanup(channel.close)
        self.stub = pb2_grpc.GRPCInferenceServiceStub(channel)
        self.assertTrue(wait_ready(self.stub, "layer"))

    def start_shard(self, repo, port=0):
        server = ServerProcess(f"--model_repository={repo}", "--http_port=-1",
                               "--metrics_port=-1", compute_threads=1)
        if port:
            server.flags[0] = f"--grpc_port={port}"
        server.start()
        self.addCleanup(server._kill)
        return server

    def call(self, rng, timeout=20.0):
        """One call: ("ok", None) when right, (code, details) when refused; a wrong answer
        fails the test."""
        wire, feeds = inputs(self.model, self.dt, self.options, 3, rng)
        try:
            got = decode_outputs(self.stub.ModelInfer(request("layer", wire), timeout=timeout))
        except grpc.RpcError as e:
            return e.code(), e.details()
        ref = layer.evaluate(self.model, feeds)["out"]
        err = np.max(np.abs(got["out"] - ref)) / np.max(np.abs(ref))
        self.assertLessEqual(err, BOUND["FP32"], "a wrong answer")
        return "ok", None

    def load(self, seconds, during):
        """Calls from two threads for `seconds`, `during()` run after the first third."""
        outcomes, lock = [], threading.Lock()
        end = time.monotonic() + seconds

        def client(seed):
            rng = np.random.default_rng(seed)
            while time.monotonic() < end:
                got = self.call(rng)
                with lock:
                    outcomes.append(got)

        threads = [threading.Thread(target=client, args=(s,)) for s in (1, 2)]
        for t in threads:
            t.start()
        time.sleep(seconds / 3)
        during()
        for t in threads:
            t.join()
        return outcomes

    def test_a_killed_shard_fails_calls_by_name_and_is_used_again_once_restarted(self):
        self.start_layer(replicas=1)
        victim = self.shards[1][0]
        port = victim.port
        outcomes = self.load(3.0, victim._kill)
        self.assertIn("ok", [o[0] for o in outcomes])
        failed = [o for o in outcomes if o[0] != "ok"]
        self.assertTrue(failed, "no call failed with a shard killed")
        for code, details in failed:
            self.assertEqual(code, grpc.StatusCode.UNAVAILABLE, details)
            self.assertIn("shard 1 (experts 6:12)", details)
        self.assertFalse(wait_ready(self.stub, "layer", ready=False))
        index = self.stub.RepositoryIndex(pb2.RepositoryIndexRequest(), timeout=10)
        entry = next(m for m in index.models if m.name == "layer")
        self.assertEqual(entry.state, "UNAVAILABLE")
        self.assertIn("shard 1", entry.reason)
        with self.assertRaises(urllib.error.HTTPError) as http_ready:  # the HTTP probe says so too
            urllib.request.urlopen(f"{self.router.http_url}/v2/models/layer/ready", timeout=10)
        self.assertEqual(http_ready.exception.code, 400)
        self.assertIn("shard 1 (experts 6:12) has no ready replica",
                      http_ready.exception.read().decode())
        self.start_shard(f"{self.root}/shard1", port=port)
        self.assertTrue(wait_ready(self.stub, "layer"))
        rng = np.random.default_rng(7)
        self.assertEqual([self.call(rng)[0] for _ in range(5)], ["ok"] * 5)

    def test_with_two_replicas_a_killed_one_loses_no_call(self):
        self.start_layer(replicas=2)
        url = self.router.metrics_url
        victim = self.shards[0][1]

        def hang_then_die():
            # Stopped first: the router takes turns between ready replicas, so within
            # two calls one waits on the victim (its prober needs a second's probe
            # deadline to see it gone). Killed then: that call's connection is reset
            # under it and it must be asked again of the other replica.
            os.kill(victim.proc.pid, signal.SIGSTOP)
            time.sleep(0.5)
            victim._kill()

        outcomes = self.load(3.0, hang_then_die)
        self.assertGreater(len(outcomes), 5)
        self.assertEqual([o for o in outcomes if o[0] != "ok"][:3], [])
        # The kill was felt: a call to the dead replica failed and was asked again.
        self.assertGreater(metric_sum(url, "gemmserve_shard_call_errors_total", model="layer",
                                      shard="0"), 0)

    def test_a_stopped_shard_ends_in_the_callers_deadline(self):
        self.start_layer(replicas=1)
        victim = self.shards[0][0]
        os.kill(victim.proc.pid, signal.SIGSTOP)
        self.addCleanup(lambda: victim.proc.poll() is None and
                        os.kill(victim.proc.pid, signal.SIGCONT))
        url = self.router.metrics_url

        def errors():
            return metric_sum(url, "gemmserve_shard_call_errors_total", model="layer", shard="0")

        before = errors()
        code, details = self.call(np.random.default_rng(8), timeout=1.5)
        self.assertEqual(code, grpc.StatusCode.DEADLINE_EXCEEDED, details)
        # The router gave the shard no more than its caller's time: its call has ended too
        # (its own default is 30 s), so its worker is free again.
        end = time.monotonic() + 5
        while errors() == before and time.monotonic() < end:
            time.sleep(0.05)
        self.assertEqual(errors(), before + 1)
        os.kill(victim.proc.pid, signal.SIGCONT)
        rng = np.random.default_rng(9)
        self.assertTrue(wait_ready(self.stub, "layer"))
        self.assertEqual(self.call(rng)[0], "ok")


def _run(*argv):
    subprocess.run(argv, check=True, capture_output=True, text=True)


class Host:
    """A network namespace joined to the test's by a veth pair, its link shaped like a 25 GbE
    one: `tc netem` (rate and a 10 us delay) where the kernel has it, else a token bucket
    (rate alone; `netem` is then named in `shaping`)."""

    def __init__(self, index):
        tag = f"{os.getpid() % 100000}{index}"
        self.ns, self.outside, self.inside = f"gs{tag}", f"gsa{tag}", f"gsb{tag}"
        subnet = f"10.{100 + index}.{os.getpid() % 250}"
        self.address, self.gateway = f"{subnet}.2", f"{subnet}.1"
        _run("ip", "netns", "add", self.ns)
        try:
            _run("ip", "link", "add", self.outside, "type", "veth", "peer", "name", self.inside)
            _run("ip", "link", "set", self.inside, "netns", self.ns)
            _run("ip", "addr", "add", f"{self.gateway}/30", "dev", self.outside)
            _run("ip", "link", "set", self.outside, "up")
            inside = ["ip", "netns", "exec", self.ns]
            _run(*inside, "ip", "addr", "add", f"{self.address}/30", "dev", self.inside)
            _run(*inside, "ip", "link", "set", self.inside, "up")
            _run(*inside, "ip", "link", "set", "lo", "up")
            self.shaping = []
            for prefix, device in (([], self.outside), (inside, self.inside)):
                try:
                    _run(*prefix, "tc", "qdisc", "add", "dev", device, "root", "netem",
                         "delay", "10us", "rate", "25gbit")
                    self.shaping.append("netem 25gbit 10us")
                except subprocess.CalledProcessError:
                    _run(*prefix, "tc", "qdisc", "add", "dev", device, "root", "tbf", "rate",
                         "25gbit", "burst", "512kb", "latency", "10ms")
                    self.shaping.append("tbf 25gbit (no netem in this kernel)")
        except BaseException:
            self.close()
            raise

    def close(self):
        subprocess.run(["ip", "link", "del", self.outside], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)

    def start(self, tmp, *flags):
        """A gemmserve in this namespace, listening on its address."""
        wrapper = os.path.join(tmp, f"gemmserve-in-{self.ns}")
        with open(wrapper, "w") as f:
            f.write(f"#!/bin/sh\nexec ip netns exec {self.ns} {os.environ['GEMMSERVE_BIN']} "
                    "\"$@\"\n")
        os.chmod(wrapper, 0o755)
        real = os.environ["GEMMSERVE_BIN"]
        os.environ["GEMMSERVE_BIN"] = wrapper
        try:
            server = ServerProcess(*flags, "--host=0.0.0.0", "--http_port=-1",
                                   "--metrics_port=-1", compute_threads=1).start()
        finally:
            os.environ["GEMMSERVE_BIN"] = real
        return server, f"{self.address}:{server.port}"


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("ip") and shutil.which("tc"),
                     "network namespaces need root and iproute2 (ip, tc)")
class NetworkNamespaceTest(unittest.TestCase):
    """Hosts as the network sees them: two shards, each in its own network namespace behind
    a veth link shaped like 25 GbE, the router (and the test) outside; the layer answers as
    its graph does, and a shard whose host is gone fails calls by name."""

    def test_shards_on_other_hosts_answer_and_a_lost_host_is_named(self):
        root = tempfile.mkdtemp(prefix="gemmserve-netns-")
        self.addCleanup(shutil.rmtree, root, True)
        forms = {"layer": ("BF16", 2, dict(gate_up="fused", routing="softmax_topk",
                                           shared_expert=True))}
        dt, model, options = write_repositories(root, forms)["layer"]
        addresses = []
        for j in range(2):
            host = Host(j)
            self.addCleanup(host.close)
            server, address = host.start(root, f"--model_repository={root}/shard{j}")
            self.addCleanup(server._kill)
            addresses.append([address])
            print(f"shard {j} at {address}: {host.shaping}", file=sys.stderr)
        write_routers(root, forms, addresses)
        router = ServerProcess(f"--model_repository={root}/router", "--http_port=-1",
                               compute_threads=1).start()
        self.addCleanup(router.stop)
        channel = open_channel(router.address)
        self.addCleanup(channel.close)
        stub = pb2_grpc.GRPCInferenceServiceStub(channel)
        self.assertTrue(wait_ready(stub, "layer"))
        rng = np.random.default_rng(535)
        for m in (1, 33):
            wire, feeds = inputs(model, dt, options, m, rng)
            got = to_float(dt, decode_outputs(stub.ModelInfer(request("layer", wire),
                                                              timeout=60))["out"])
            ref = layer.evaluate(model, feeds)["out"]
            self.assertLessEqual(np.max(np.abs(got - ref)) / np.max(np.abs(ref)), BOUND[dt])
        # The second host's link goes down: its shard is unreachable, not refused.
        _run("ip", "link", "set", f"gsa{os.getpid() % 100000}1", "down")
        wire, _ = inputs(model, dt, options, 4, rng)
        with self.assertRaises(grpc.RpcError) as failed:
            stub.ModelInfer(request("layer", wire), timeout=3)
        self.assertIn(failed.exception.code(), (grpc.StatusCode.UNAVAILABLE,
                                                grpc.StatusCode.DEADLINE_EXCEEDED))
        if failed.exception.code() == grpc.StatusCode.UNAVAILABLE:
            self.assertIn("shard 1", failed.exception.details())
        self.assertFalse(wait_ready(stub, "layer", ready=False))


if __name__ == "__main__":
    unittest.main()
