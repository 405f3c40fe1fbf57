"""A model repository written for Triton's ONNX Runtime backend, unchanged, through the real
server over gRPC and HTTP: config.pbtxt as Triton writes it (platform, max_batch_size with the
implicit batch dimension, preferred batch sizes, instance groups), backend and
default_model_filename, the three version policies with versions of different weights (each
answering on its own: inference, ModelReady, metadata, statistics, the index, the HTTP version
routes), the ModelConfig answer loading back through Triton's load-with-files to an equal
config, and the refusals by name while the other models serve on."""
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import grpc
import numpy as np
from google.protobuf import json_format
from onnx import TensorProto, helper

from gemmserve_client import decode_outputs, make_infer_request, pb2
from gemmserve_testing.base import GemmServeTestCase
from gemmserve_testing.onnx_models import model_bytes
from gemmserve_testing.server import server_binary

INVALID = grpc.StatusCode.INVALID_ARGUMENT
K, N = 16, 4
RNG = np.random.default_rng(51)
# Small integers: every float32 sum is exact, whatever the order.
WEIGHTS = {v: RNG.integers(-4, 5, (K, N)).astype(np.float32) for v in (1, 2, 3)}

# The config, as Triton's docs and tools write it.
TRITON_CONFIG = """name: "mm"
platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy: { latest: { num_versions: 1 } }
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 2000 }
"""


def xy_model(weights):
    """y = x @ weights, x of shape [batch, K] (a variable first dimension, as Triton's ONNX
    models with max_batch_size > 0 have)."""
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    graph = helper.make_graph(
        [node], "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", N])],
        initializer=[helper.make_tensor("w", TensorProto.FLOAT, [K, N], weights.tobytes(),
                                        raw=True)])
    return model_bytes(graph).SerializeToString()


def write(repo, name, config, files):
    os.makedirs(os.path.join(repo, name), exist_ok=True)
    if config is not None:
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(config)
    for path, data in files.items():
        full = os.path.join(repo, name, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)


_REPO = tempfile.mkdtemp(prefix="gemmserve-triton-repo-")
write(_REPO, "mm", TRITON_CONFIG, {"1/model.onnx": xy_model(WEIGHTS[1])})
write(_REPO, "renamed", 'backend: "onnxruntime"\ndefault_model_filename: "weights.onnx"\n'
      'max_batch_size: 4\n', {"1/weights.onnx": xy_model(WEIGHTS[2])})
# Three versions, each its own weights; the config on disk serves the latest.
write(_REPO, "versioned", 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n',
      {f"{v}/model.onnx": xy_model(WEIGHTS[v]) for v in (1, 2, 3)})


def tearDownModule():
    shutil.rmtree(_REPO, ignore_errors=True)


class TritonRepositoryTest(GemmServeTestCase):
    # Requests are never computed on the caller's thread, so concurrent ones queue and merge.
    server_flags = (f"--model_repository={_REPO}", "--inline_max_flops=0")

    # ------------------------------------------------------------ helpers

    def xy(self, model, x, version=""):
        request = make_infer_request(model, [("x", x)])
        request.model_version = version
        return decode_outputs(self.infer(request))["y"]

    def http_infer(self, model, x, version=None):
        route = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
        status, body = self.http("POST", route, {"inputs": [
            {"name": "x", "datatype": "FP32", "shape": list(x.shape),
             "data": x.flatten().tolist()}]})
        self.assertEqual(status, 200, body)
        out = body["outputs"][0]
        return np.array(out["data"], np.float32).reshape(out["shape"])

    def config_of(self, model, version=""):
        return self.stub.ModelConfig(pb2.ModelConfigRequest(name=model, version=version)).config

    def load_error(self, name, config, files=None):
        try:
            self.load(name, config=config, files=files)
        except grpc.RpcError as error:
            return error
        self.fail(f"the load of {name} succeeded")

    # -------------------------------------------------------------- tests

    def test_tritons_config_serves_with_the_batch_dimension(self):
        x = RNG.integers(-3, 4, (3, K)).astype(np.float32)
        np.testing.assert_array_equal(self.xy("mm", x), x @ WEIGHTS[1])
        np.testing.assert_array_equal(self.http_infer("mm", x), x @ WEIGHTS[1])
        meta = self.stub.ModelMetadata(pb2.ModelMetadataRequest(name="mm"))
        self.assertEqual(meta.platform, "onnxruntime_onnx")
        self.assertEqual(list(meta.inputs[0].shape), [-1, K])
        self.assertEqual(list(meta.outputs[0].shape), [-1, N])
        status, http_meta = self.http("GET", "/v2/models/mm")
        self.assertEqual(http_meta["inputs"][0]["shape"], [-1, K])
        config = self.config_of("mm")
        self.assertEqual(config.max_batch_size, 8)
        self.assertEqual(list(config.dynamic_batching.preferred_batch_size), [4, 8])
        self.assertEqual(config.instance_group[0].count, 2)
        self.assertEqual(config.input[0].dims, [K])

    def test_a_batch_past_max_batch_size_is_refused(self):
        for rows in (9, 64):
            x = np.ones((rows, K), np.float32)
            error = self.rpc_error(self.stub.ModelInfer, make_infer_request("mm", [("x", x)]))
            self.assertEqual(error.code(), INVALID, error.details())
            self.assertIn(f"batch size {rows}", error.details())
            self.assertIn("max_batch_size 8", error.details())
            status, body = self.http("POST", "/v2/models/mm/infer", {"inputs": [
                {"name": "x", "datatype": "FP32", "shape": [rows, K],
                 "data": [1.0] * (rows * K)}]})
            self.assertEqual(status, 400, body)
            self.assertIn("max_batch_size 8", body["error"])
        x = RNG.integers(-3, 4, (8, K)).astype(np.float32)
        np.testing.assert_array_equal(self.xy("mm", x), x @ WEIGHTS[1])
        # The config's dims are held too: K is 16, not 15.
        error = self.rpc_error(self.stub.ModelInfer,
                               make_infer_request("mm", [("x", np.ones((2, K - 1), np.float32))]))
        self.assertEqual(error.code(), INVALID, error.details())

    def test_concurrent_single_rows_are_merged_along_the_batch(self):
        def stats():
            s = self.stub.ModelStatistics(pb2.ModelStatisticsRequest(name="mm")).model_stats[0]
            return s.inference_count, s.execution_count
        before = stats()
        rows = [RNG.integers(-3, 4, (1, K)).astype(np.float32) for _ in range(64)]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda x: self.xy("mm", x), rows))
        for x, y in zip(rows, answers):
            np.testing.assert_array_equal(y, x @ WEIGHTS[1])
        after = stats()
        inferences, executions = after[0] - before[0], after[1] - before[1]
        self.assertEqual(inferences, 64)
        print(f"64 concurrent single-row requests to max_batch_size 8: {executions} kernel calls "
              f"({inferences / executions:.1f} rows per call)", file=sys.stderr)
        self.assertLess(executions, 64, "no two requests were merged into one batch")

    def test_backend_and_default_model_filename(self):
        x = RNG.integers(-3, 4, (4, K)).astype(np.float32)
        np.testing.assert_array_equal(self.xy("renamed", x), x @ WEIGHTS[2])
        config = self.config_of("renamed")
        self.assertEqual(config.backend, "onnxruntime")
        self.assertEqual(config.default_model_filename, "weights.onnx")
        error = self.rpc_error(self.stub.ModelInfer,
                               make_infer_request("renamed", [("x", np.ones((5, K), np.float32))]))
        self.assertIn("max_batch_size 4", error.details())

    def test_each_version_policy_serves_its_versions(self):
        cases = {"latest { num_versions: 2 }": ["2", "3"], "all {}": ["1", "2", "3"],
                 "specific { versions: [1, 3] }": ["1", "3"], None: ["3"]}
        x = RNG.integers(-3, 4, (2, K)).astype(np.float32)
        try:
            for policy, versions in cases.items():
                with self.subTest(policy=policy):
                    config = 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
                    if policy:
                        config += f"version_policy {{ {policy} }}\n"
                    self.load("versioned", config=config)
                    self.assert_serves_versions("versioned", versions, x)
        finally:
            self.load("versioned")  # back to the config on disk

    def assert_serves_versions(self, name, versions, x):
        meta = self.stub.ModelMetadata(pb2.ModelMetadataRequest(name=name))
        self.assertEqual(list(meta.versions), versions)
        for v in ("1", "2", "3"):
            ready = self.stub.ModelReady(pb2.ModelReadyRequest(name=name, version=v)).ready
            self.assertEqual(ready, v in versions, v)
            status, _ = self.http("GET", f"/v2/models/{name}/versions/{v}/ready")
            self.assertEqual(status == 200, v in versions, v)
            if v not in versions:
                error = self.rpc_error(self.stub.ModelInfer, self.versioned_request(name, x, v))
                self.assertEqual(error.code(), grpc.StatusCode.NOT_FOUND, error.details())
                continue
            expected = x @ WEIGHTS[int(v)]
            np.testing.assert_array_equal(self.xy(name, x, v), expected)
            np.testing.assert_array_equal(self.http_infer(name, x, v), expected)
            self.assertEqual(self.infer(self.versioned_request(name, x, v)).model_version, v)
            stats = self.stub.ModelStatistics(pb2.ModelStatisticsRequest(name=name, version=v))
            self.assertEqual([s.version for s in stats.model_stats], [v])
            self.assertGreaterEqual(stats.model_stats[0].inference_count, 3)
        # No version asked: the highest served.
        np.testing.assert_array_equal(self.xy(name, x), x @ WEIGHTS[int(versions[-1])])
        every = self.stub.ModelStatistics(pb2.ModelStatisticsRequest(name=name)).model_stats
        self.assertEqual([s.version for s in every], versions)
        index = self.stub.RepositoryIndex(pb2.RepositoryIndexRequest(ready=True)).models
        self.assertEqual([m.version for m in index if m.name == name], versions)
        status, http_index = self.http("POST", "/v2/repository/index", {"ready": True})
        self.assertEqual([m["version"] for m in http_index if m["name"] == name], versions)

    @staticmethod
    def versioned_request(name, x, version):
        request = make_infer_request(name, [("x", x)])
        request.model_version = version
        return request

    def test_the_model_config_answer_loads_back_to_an_equal_config(self):
        for name in ("mm", "renamed", "versioned", "matmul"):
            with self.subTest(name):
                answer = self.config_of(name)
                status, http_answer = self.http("GET", f"/v2/models/{name}/config")
                self.assertEqual(status, 200)
                self.assertEqual(json_format.ParseDict(http_answer, type(answer)()), answer,
                                 "HTTP and gRPC answers differ")
                if name == "matmul":
                    continue  # built in: nothing to load back
                files = {}
                for v in ("1", "2", "3"):
                    path = os.path.join(_REPO, name, v, answer.default_model_filename)
                    if os.path.exists(path):
                        with open(path, "rb") as f:
                            files[f"{v}/{answer.default_model_filename}"] = f.read()
                try:
                    self.load(name, config=json_format.MessageToJson(answer), files=files)
                    self.assertEqual(self.config_of(name), answer)
                finally:
                    self.load(name)

    def test_a_batched_warmup_sample_reads_one_item_for_every_item(self):
        item = np.arange(K, dtype=np.float32)
        config = ('max_batch_size: 4\nmodel_warmup { name: "w" batch_size: 3 count: 2 '
                  'inputs { key: "x" value { data_type: TYPE_FP32 dims: [16] '
                  'input_data_file: "x.bin" } } }\n')
        files = {"1/model.onnx": xy_model(WEIGHTS[1]), "warmup/x.bin": item.tobytes()}
        self.load("warmed", config=config, files=files)
        stats = self.stub.ModelStatistics(pb2.ModelStatisticsRequest(name="warmed")).model_stats
        self.assertEqual(stats[0].execution_count, 2)  # the sample's two runs
        self.assertEqual(stats[0].inference_count, 6)  # of 3 batch items each
        short = {**files, "warmup/x.bin": item.tobytes()[:-4]}
        error = self.load_error("warmed_short", config, short)
        self.assertIn("need at least 64 (one batch item)", error.details())

    def test_what_gemmserve_cannot_do_is_refused_by_name(self):
        files = {"1/model.onnx": xy_model(WEIGHTS[1])}
        cases = {
            'instance_group [ { kind: KIND_GPU count: 1 } ]': "instance_group.kind",
            'platform: "tensorrt_plan"': "platform",
            'backend: "python"': "backend",
            "sequence_batching { }": "sequence_batching",
            'ensemble_scheduling { step [ { model_name: "a" model_version: -1 } ] }':
                "ensemble_scheduling",
            "model_transaction_policy { decoupled: true }": "decoupled",
            "dynamic_batching { max_batch_rows: 8 }": "max_batch_rows",
            "max_batch_sizes: 8": "max_batch_sizes",
            'parameters { key: "max_batch_row" value { string_value: "8" } }': "max_batch_row",
            'version_policy { specific { versions: [ 2 ] } }': "version 2",
            'parameters { key: "k" value { string_value: "999" } }': "the model's is '16'",
            'input [ { name: "x" dims: [ -2 ] } ]': "neither -1 (any) nor a size",
        }
        for config, name in cases.items():
            with self.subTest(config):
                error = self.load_error("refused", config, files)
                self.assertEqual(error.code() in (INVALID, grpc.StatusCode.NOT_FOUND), True,
                                 error.details())
                self.assertIn(name, error.details())
                x = RNG.integers(-3, 4, (2, K)).astype(np.float32)
                np.testing.assert_array_equal(self.xy("mm", x), x @ WEIGHTS[1])


class BuiltinFlagsTest(unittest.TestCase):
    """The built-in models' --builtin_* flags become their config and are held to config.pbtxt's
    limits: past one, the server does not start and names the flag and the limit."""

    def test_flags_past_a_config_limit_stop_the_server_at_start(self):
        cases = {"--builtin_max_queue_size=1000001": "max_queue_size 1000001 is over the limit",
                 "--builtin_max_batch_rows=16777217": "max_batch_rows 16777217 is over the limit",
                 "--builtin_max_queue_delay_us=-1": "must not be negative"}
        for flag, message in cases.items():
            with self.subTest(flag):
                run = subprocess.run([server_binary(), "--grpc_port=0", "--http_port=0",
                                      "--metrics_port=-1", flag], capture_output=True, text=True,
                                     timeout=60)
                self.assertNotEqual(run.returncode, 0)
                self.assertIn("--builtin_", run.stderr)
                self.assertIn(message, run.stderr)



class FlagsCheckedFirstTest(unittest.TestCase):
    """Every flag is checked once, where the flags are parsed, before anything is built: a
    value out of range for any layer (Serving's, either front end's, /metrics, tracing) stops
    the server naming the flag, with no model of the repository loaded and no port bound."""

    def test_a_bad_flag_of_any_layer_stops_the_server_before_a_model_loads(self):
        cases = {"--http_threads=0": "--http_threads",
                 "--grpc_max_stream_inflight=0": "--grpc_max_stream_inflight",
                 "--metrics_port=70000": "--metrics_port 70000",
                 "--max_inflight_bytes=0": "--max_inflight_bytes",
                 "--max_client_shm_bytes=-1": "--max_client_shm_bytes",
                 "--trace_max_files=0": "--trace_max_files",
                 "--max_message_bytes=4294967296": "--max_message_bytes"}
        for flag, message in cases.items():
            with self.subTest(flag):
                run = subprocess.run([server_binary(), "--grpc_port=0", "--http_port=0",
                                      "--metrics_port=0", f"--model_repository={_REPO}", flag],
                                     capture_output=True, text=True, timeout=60)
                self.assertNotEqual(run.returncode, 0)
                self.assertIn(message, run.stderr)
                self.assertNotIn("loaded model", run.stderr)
                self.assertNotIn("listening", run.stdout)
        run = subprocess.run([server_binary(), "--grpc_port=0", "--http_port=-1",
                              "--metrics_port=-1", f"--model_repository={_REPO}",
                              "--trace_file=/nonexistent-dir/trace.json"],
                             capture_output=True, text=True, timeout=60)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("--trace_file's directory", run.stderr)
        self.assertNotIn("loaded model", run.stderr)


if __name__ == "__main__":
    unittest.main()
