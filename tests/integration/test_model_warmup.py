"""Model warmup (issue 18, part 2): config.pbtxt's model_warmup, Triton's field,
run at load before the model turns READY, through real server processes.

- A resident model with warmup samples is READY only once every sample ran:
  the first time ModelReady says so, ModelStatistics already counts every
  warmup run (execution_count, success, inference_count in rows).
- ModelConfig (gRPC and HTTP) reports the samples as Triton's clients read them.
- The first real request after READY is no slower than the median of the
  next ten (server compute time from ModelStatistics, and client latency),
  within a margin; its answers equal the float64 reference.
- A sample the model refuses fails the load with INVALID_ARGUMENT naming the
  sample, at start-up (listed UNAVAILABLE with the reason, the server serves
  on) and on RepositoryModelLoad (the served version serves on).
"""
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
import unittest
import urllib.request

import grpc
from google.protobuf import json_format
import model_config_pb2
import numpy as np

from gemmserve_client import pb2
from gemmserve_testing.base import GemmServeTestCase
from gemmserve_testing.onnx_models import grouped_graph, grouped_reference, model_bytes, write_model

K, N, G, S = 1024, 1024, 8, 2
TOKENS = 64
RNG = np.random.default_rng(18)
WEIGHTS = RNG.standard_normal((G, K, N)).astype(np.float32)
SMALL = RNG.standard_normal((4, 16, 8)).astype(np.float32)


def warmup_config(name, tokens, count, k=K, extra=""):
    return (f'model_warmup {{ name: "{name}" count: {count}\n'
            f'  inputs {{ key: "tokens" value {{ data_type: TYPE_FP32 dims: [{tokens}, {k}] '
            f'random_data: true }} }}\n'
            f'  inputs {{ key: "routing" value {{ data_type: TYPE_INT64 dims: [{tokens}, {S}] '
            f'{extra or "random_data: true"} }} }}\n'
            '}\n')


_REPO = tempfile.mkdtemp(prefix="gemmserve-warmup-")
write_model(_REPO, "moe_warm", grouped_graph("moe_warm", WEIGHTS, S),
            config=("dynamic_batching { max_queue_delay_microseconds: 100 }\n"
                    + warmup_config("decode", 1, 4) + warmup_config("prefill", TOKENS, 2)))
# Its warmup routes to group 5 of 4: the model refuses it, so it never serves.
write_model(_REPO, "moe_cold", grouped_graph("moe_cold", SMALL, S),
            config=warmup_config("bad_routing", 2, 1, k=16,
                                 extra="input_data_file: \"routing.bin\""))
os.makedirs(f"{_REPO}/moe_cold/warmup")
with open(f"{_REPO}/moe_cold/warmup/routing.bin", "wb") as _f:
    _f.write(np.array([[0, 1], [5, 0]], np.int64).tobytes())


def tearDownModule():
    shutil.rmtree(_REPO, ignore_errors=True)


class ModelWarmupTest(GemmServeTestCase):
    server_flags = (f"--model_repository={_REPO}",)

    def stats(self, name):
        return self.stub.ModelStatistics(pb2.ModelStatisticsRequest(name=name),
                                         timeout=10).model_stats[0]

    def moe(self, model, x, idx):
        return self.run_moe(model, x, idx)

    def test_1_warmup_runs_before_ready_and_is_counted(self):
        s = self.stats("moe_warm")
        # 4 runs of one token and 2 of 64, one request at a time.
        self.assertEqual(s.execution_count, 6)
        self.assertEqual(s.inference_stats.success.count, 6)
        self.assertEqual(s.inference_stats.fail.count, 0)
        self.assertEqual(s.inference_count, 4 * 1 + 2 * TOKENS)
        self.assertGreater(s.inference_stats.compute_infer.ns, 0)

    def test_model_config_reports_the_samples(self):
        config = self.stub.ModelConfig(pb2.ModelConfigRequest(name="moe_warm"), timeout=10).config
        self.assertEqual([w.name for w in config.model_warmup], ["decode", "prefill"])
        prefill = config.model_warmup[1]
        self.assertEqual(prefill.count, 2)
        self.assertEqual(prefill.batch_size, 0)
        self.assertEqual(sorted(prefill.inputs), ["routing", "tokens"])
        self.assertEqual(prefill.inputs["tokens"].data_type, model_config_pb2.TYPE_FP32)
        self.assertEqual(list(prefill.inputs["tokens"].dims), [TOKENS, K])
        self.assertTrue(prefill.inputs["tokens"].random_data)
        self.assertEqual(prefill.inputs["routing"].data_type, model_config_pb2.TYPE_INT64)
        with urllib.request.urlopen(f"{self.server.http_url}/v2/models/moe_warm/config",
                                    timeout=10) as reply:
            http = json.load(reply)
        self.assertEqual([w["name"] for w in http["model_warmup"]], ["decode", "prefill"])
        self.assertEqual(http["model_warmup"][1]["inputs"]["tokens"],
                         {"data_type": "TYPE_FP32", "dims": [TOKENS, K], "random_data": True})
        self.assertEqual(http["model_warmup"][1]["count"], 2)
        # ModelConfig parity: the REST answer is the gRPC message, field for field, for a
        # model with batching, parameters and warmup and for a built-in one.
        for name in ("moe_warm", "grouped_matmul", "matmul"):
            grpc_config = self.stub.ModelConfig(pb2.ModelConfigRequest(name=name),
                                                timeout=10).config
            with urllib.request.urlopen(f"{self.server.http_url}/v2/models/{name}/config",
                                        timeout=10) as reply:
                rest = json.load(reply)
            self.assertEqual(rest["max_batch_size"], 0)
            self.assertEqual(json_format.ParseDict(rest, model_config_pb2.ModelConfig()),
                             grpc_config, name)
        # A model without warmup lists none.
        self.assertEqual(len(self.stub.ModelConfig(pb2.ModelConfigRequest(name="matmul"),
                                                   timeout=10).config.model_warmup), 0)

    def first_against_the_next_ten(self, rng):
        """The model's first request after READY and the ten after it: (compute time of the
        first / median of the ten, the same for the client's latency, both lists)."""
        # The channel and ModelInfer's path are warm (a request to another
        # model), so what is measured is the model's first request; the
        # statistics give the server's compute time of each, the clock the
        # client's latency.
        self.assert_server_still_serves()
        compute_ns, latency = [], []
        for i in range(11):
            x = rng.standard_normal((TOKENS, K)).astype(np.float32)
            idx = np.stack([rng.permutation(G)[:S] for _ in range(TOKENS)]).astype(np.int64)
            before = self.stats("moe_warm").inference_stats.compute_infer.ns
            start = time.perf_counter()
            y = self.moe("moe_warm", x, idx)
            latency.append(time.perf_counter() - start)
            compute_ns.append(self.stats("moe_warm").inference_stats.compute_infer.ns - before)
            if i in (0, 10):
                want = grouped_reference(x, WEIGHTS, idx)
                np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-3 * np.sqrt(K))
        return (compute_ns[0] / statistics.median(compute_ns[1:]),
                latency[0] / statistics.median(latency[1:]), compute_ns, latency)

    def test_2_first_request_after_ready_is_no_slower_than_the_next_ten(self):
        rng = np.random.default_rng(7)
        # Margin: one request on a shared two-core machine, against a median.
        # Without warmup the first request read six experts that no request
        # had read, and was measured at 10x to 14x (the warmup's group indices
        # of 0 and 1 alone leave them so: the model's resident weights are read
        # at warmup for that reason). A neighbour's burst can make one request
        # slower, never faster: a pass is conclusive, and a miss is measured
        # again on a reload, whose warmup makes a new first request (3 tries;
        # seen in CI: a first latency of 32 ms against a median of 10 ms).
        for attempt in range(3):
            if attempt:
                self.load("moe_warm", timeout=300)
                self.assertTrue(self.stub.ModelReady(pb2.ModelReadyRequest(name="moe_warm"),
                                                     timeout=10).ready)
            first_compute, first_latency, compute_ns, latency = \
                self.first_against_the_next_ten(rng)
            print(f"first request / median of the next ten: compute {first_compute:.2f}x, "
                  f"latency {first_latency:.2f}x (try {attempt + 1})")
            if first_compute < 3.0 and first_latency < 3.0:
                break
        self.assertLess(first_compute, 3.0, compute_ns)
        self.assertLess(first_latency, 3.0, latency)

    def test_a_sample_the_model_refuses_fails_its_load(self):
        index = self.stub.RepositoryIndex(pb2.RepositoryIndexRequest(), timeout=10)
        cold = [m for m in index.models if m.name == "moe_cold"][0]
        self.assertEqual(cold.state, "UNAVAILABLE")
        self.assertIn("model_warmup 'bad_routing'", cold.reason)
        self.assertFalse(self.stub.ModelReady(pb2.ModelReadyRequest(name="moe_cold"),
                                              timeout=10).ready)
        error = self.rpc_error(self.stub.ModelInfer, self.moe_request(
            "moe_cold", np.zeros((1, 16), np.float32), np.zeros((1, S), np.int64)))
        self.assertEqual(error.code(), grpc.StatusCode.UNAVAILABLE, error.details())
        # Uploaded over a served model: refused, and the served version serves on.
        upload = model_bytes(grouped_graph("up", SMALL, S)).SerializeToString()
        self.load("up", config="", files={"1/model.onnx": upload})
        error = self.rpc_error(
            lambda r, timeout: self.load("up", config=warmup_config("typo", 1, 1, k=15),
                                         files={"1/model.onnx": upload}, timeout=timeout),
            None)
        self.assertEqual(error.code(), grpc.StatusCode.INVALID_ARGUMENT, error.details())
        self.assertIn("model_warmup 'typo'", error.details())
        x = RNG.standard_normal((3, 16)).astype(np.float32)
        idx = np.array([[0, 1], [2, 3], [3, 3]], np.int64)
        np.testing.assert_allclose(self.moe("up", x, idx), grouped_reference(x, SMALL, idx),
                                   rtol=1e-5, atol=1e-5)
        self.assert_server_still_serves()

    def test_a_reload_is_ready_only_after_its_warmup(self):
        """While a load's warmup runs, the model is not READY; the first READY
        already counts every warmup run."""
        upload = model_bytes(grouped_graph("slow_warm", WEIGHTS, S)).SerializeToString()
        runs = 40
        config = warmup_config("prefill", TOKENS, runs)
        done = threading.Event()
        outcome = {}

        def load():
            try:
                self.load("slow_warm", config=config, files={"1/model.onnx": upload},
                          timeout=300)
                outcome["ok"] = True
            except grpc.RpcError as error:
                outcome["error"] = f"{error.code().name}: {error.details()}"
            finally:
                done.set()

        thread = threading.Thread(target=load)
        thread.start()
        not_ready_seen = 0
        while True:
            finished = done.is_set()
            try:
                ready = self.stub.ModelReady(pb2.ModelReadyRequest(name="slow_warm"),
                                             timeout=10).ready
            except grpc.RpcError:
                ready = False
            if ready:
                self.assertEqual(self.stats("slow_warm").execution_count, runs)
                break
            not_ready_seen += 1
            self.assertFalse(finished and outcome.get("ok"), "loaded, yet not READY")
            if finished:
                break
            time.sleep(0.005)
        thread.join()
        self.assertEqual(outcome, {"ok": True})
        self.assertGreater(not_ready_seen, 0)
        self.assertEqual(self.stats("slow_warm").inference_count, runs * TOKENS)


if __name__ == "__main__":
    unittest.main()
