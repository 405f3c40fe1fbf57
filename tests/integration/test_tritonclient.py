"""NVIDIA's own client library, tritonclient, unchanged, against a real gemmserve: what a
Triton user runs, over gRPC and HTTP, sync, callback and asyncio, streaming, system shared
memory, model control with Triton's JSON config, statistics, log and trace settings.

The library is vendored in tests/third_party/tritonclient (the Python package of
triton-inference-server/client and Triton's protos, as they are upstream); its gRPC
modules are generated from Triton's protos exactly as its wheel build does
(build_package.py). Nothing here imports gemmserve's own client: its protos would share
protobuf's descriptor pool with Triton's (both define model_config.proto)."""
import asyncio
import json
import os
import queue
import shutil
import sys
import tempfile
import unittest
import warnings

import numpy as np

from gemmserve_testing.onnx_models import matmul_graph, model_bytes
from gemmserve_testing.server import ServerProcess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "third_party", "tritonclient"))
import build_package  # noqa: E402

_PACKAGE_DIR = tempfile.mkdtemp(prefix="tritonclient-")
sys.path.insert(0, build_package.build(_PACKAGE_DIR))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # its note on grpcio versions
    import tritonclient.grpc as grpcclient  # noqa: E402
    import tritonclient.grpc.aio as grpcaio  # noqa: E402
    import tritonclient.http as httpclient  # noqa: E402
    import tritonclient.http.aio as httpaio  # noqa: E402
    import tritonclient.utils.shared_memory as shm  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402


def tearDownModule():
    shutil.rmtree(_PACKAGE_DIR, ignore_errors=True)


A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.arange(6, dtype=np.float32).reshape(3, 2) / 4


def matmul_inputs(module, binary=True):
    inputs = [module.InferInput("A", list(A.shape), "FP32"),
              module.InferInput("B", list(B.shape), "FP32")]
    for tensor, value in zip(inputs, (A, B)):
        if module is httpclient or module is httpaio:
            tensor.set_data_from_numpy(value, binary_data=binary)
        else:
            tensor.set_data_from_numpy(value)
    return inputs


class TritonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        trace_dir = tempfile.mkdtemp(prefix="gemmserve-tritonclient-trace-")
        cls.addClassCleanup(shutil.rmtree, trace_dir, True)
        cls.server = ServerProcess("--allow_client_shm", f"--trace_file={trace_dir}/trace.json")
        cls.server.start()
        cls.addClassCleanup(cls.server.stop)

    def setUp(self):
        self.grpc = grpcclient.InferenceServerClient(self.server.address)
        self.http = httpclient.InferenceServerClient(self.server.http_url[len("http://"):])
        self.addCleanup(self.grpc.close)
        self.addCleanup(self.http.close)

    def clients(self):
        return ((grpcclient, self.grpc), (httpclient, self.http))

    def test_health_and_metadata(self):
        for module, client in self.clients():
            with self.subTest(module.__name__):
                self.assertTrue(client.is_server_live())
                self.assertTrue(client.is_server_ready())
                self.assertTrue(client.is_model_ready("matmul"))
                self.assertFalse(client.is_model_ready("nope"))
        grpc_meta = self.grpc.get_server_metadata(as_json=True)
        http_meta = self.http.get_server_metadata()
        self.assertEqual(grpc_meta["extensions"], http_meta["extensions"])
        self.assertIn("system_shared_memory", http_meta["extensions"])
        model = self.http.get_model_metadata("grouped_matmul")
        self.assertEqual([i["name"] for i in model["inputs"]],
                         ["input", "weights", "group_indices", "bias"])
        self.assertEqual(self.grpc.get_model_metadata("grouped_matmul").inputs[2].datatype,
                         "INT64")
        config = self.http.get_model_config("grouped_matmul")
        self.assertEqual(config["max_batch_size"], 0)
        self.assertEqual(config["input"][0]["dims"], [-1, -1])  # numbers, as Triton
        grpc_config = self.grpc.get_model_config("grouped_matmul", as_json=True)
        self.assertEqual(grpc_config["config"]["name"], "grouped_matmul")

    def test_infer_over_both_protocols_sync_and_callback(self):
        expected = A @ B
        result = self.grpc.infer("matmul", matmul_inputs(grpcclient),
                                 outputs=[grpcclient.InferRequestedOutput("Y")])
        np.testing.assert_allclose(result.as_numpy("Y"), expected, rtol=1e-6)
        for binary in (True, False):
            outputs = [httpclient.InferRequestedOutput("Y", binary_data=binary)]
            result = self.http.infer("matmul", matmul_inputs(httpclient, binary), outputs=outputs,
                                     request_id="r1")
            np.testing.assert_allclose(result.as_numpy("Y"), expected, rtol=1e-6)
            self.assertEqual(result.get_response()["id"], "r1")
        answers = queue.Queue()
        self.grpc.async_infer("matmul", matmul_inputs(grpcclient),
                              lambda result, error: answers.put((result, error)))
        result, error = answers.get(timeout=30)
        self.assertIsNone(error)
        np.testing.assert_allclose(result.as_numpy("Y"), expected, rtol=1e-6)
        pending = self.http.async_infer("matmul", matmul_inputs(httpclient))
        np.testing.assert_allclose(pending.get_result().as_numpy("Y"), expected, rtol=1e-6)

    def test_grouped_matmul_with_int64_indices(self):
        x = np.array([[1, 2], [3, 4]], np.float32)
        w = np.array([[[1], [1]], [[2], [2]]], np.float32)
        ids = np.array([[1], [0]], np.int64)
        for module, client in self.clients():
            with self.subTest(module.__name__):
                inputs = [module.InferInput("input", [2, 2], "FP32"),
                          module.InferInput("weights", [2, 2, 1], "FP32"),
                          module.InferInput("group_indices", [2, 1], "INT64")]
                for tensor, value in zip(inputs, (x, w, ids)):
                    tensor.set_data_from_numpy(value)
                out = client.infer("grouped_matmul", inputs).as_numpy("output")
                np.testing.assert_allclose(out.reshape(2), [6.0, 7.0])

    def test_errors_come_back_as_triton_exceptions(self):
        bad = [grpcclient.InferInput("A", [2, 3], "FP32")]
        bad[0].set_data_from_numpy(A)
        with self.assertRaises(InferenceServerException) as ctx:
            self.grpc.infer("matmul", bad)
        self.assertIn("B", ctx.exception.message())
        outputs = [httpclient.InferRequestedOutput("Y", class_count=2)]
        with self.assertRaises(InferenceServerException) as ctx:
            self.http.infer("matmul", matmul_inputs(httpclient), outputs=outputs)
        self.assertIn("classification", ctx.exception.message())
        outputs = [grpcclient.InferRequestedOutput("Y", class_count=2)]
        with self.assertRaises(InferenceServerException) as ctx:
            self.grpc.infer("matmul", matmul_inputs(grpcclient), outputs=outputs)
        self.assertIn("classification", ctx.exception.message())

    def test_streaming(self):
        answers = queue.Queue()
        self.grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            for i in range(6):
                self.grpc.async_stream_infer("matmul", matmul_inputs(grpcclient),
                                             request_id=f"s{i}")
            bad = [grpcclient.InferInput("A", [2, 3], "FP32")]
            bad[0].set_data_from_numpy(A)
            self.grpc.async_stream_infer("matmul", bad, request_id="bad")
            seen, errors = set(), []
            for _ in range(7):
                result, error = answers.get(timeout=30)
                if error is not None:
                    errors.append(error)
                    continue
                seen.add(result.get_response().id)
                np.testing.assert_allclose(result.as_numpy("Y"), A @ B, rtol=1e-6)
            self.assertEqual(seen, {f"s{i}" for i in range(6)})
            self.assertEqual(len(errors), 1)  # and the stream went on
        finally:
            self.grpc.stop_stream()

    def test_system_shared_memory(self):
        for module, client in self.clients():
            with self.subTest(module.__name__):
                name = f"tc_{module.__name__.split('.')[-1]}"
                region = shm.create_shared_memory_region(name, f"/{name}", 64)
                try:
                    shm.set_shared_memory_region(region, [A, B])
                    client.register_system_shared_memory(name, f"/{name}", 64)
                    status = client.get_system_shared_memory_status()
                    names = ([r["name"] for r in status] if module is httpclient
                             else list(status.regions))
                    self.assertIn(name, names)
                    inputs = [module.InferInput("A", [2, 3], "FP32"),
                              module.InferInput("B", [3, 2], "FP32")]
                    inputs[0].set_shared_memory(name, 24, offset=0)
                    inputs[1].set_shared_memory(name, 24, offset=24)
                    output = module.InferRequestedOutput("Y")
                    output.set_shared_memory(name, 16, offset=48)
                    # A region is free for its client to unregister as soon as the answer
                    # arrives (the server releases it before answering), every time.
                    for _ in range(30):
                        client.infer("matmul", inputs, outputs=[output])
                        y = shm.get_contents_as_numpy(region, np.float32, [2, 2], offset=48)
                        np.testing.assert_allclose(y, A @ B, rtol=1e-6)
                        client.unregister_system_shared_memory(name)
                        client.register_system_shared_memory(name, f"/{name}", 64)
                    client.unregister_system_shared_memory(name)
                finally:
                    shm.destroy_shared_memory_region(region)
        for module, client in self.clients():
            with self.assertRaises(InferenceServerException):
                client.register_cuda_shared_memory("gpu", b"\0" * 64, 0, 64)

    def test_model_control_with_tritons_json_config(self):
        model = model_bytes(matmul_graph(
            "tc_linear", np.arange(6, dtype=np.float32).reshape(2, 3))).SerializeToString()
        config = json.dumps({"name": "tc_linear", "platform": "onnxruntime_onnx",
                             "max_batch_size": 0,
                             "input": [{"name": "hidden", "data_type": "TYPE_FP32",
                                        "dims": [-1, 2]}],
                             "dynamic_batching": {"max_queue_delay_microseconds": 100}})
        for module, client in self.clients():
            with self.subTest(module.__name__):
                client.load_model("tc_linear", config=config, files={"file:1/model.onnx": model})
                self.assertTrue(client.is_model_ready("tc_linear"))
                x = module.InferInput("hidden", [1, 2], "FP32")
                x.set_data_from_numpy(np.ones((1, 2), np.float32))
                y = client.infer("tc_linear", [x]).as_numpy("projected")
                np.testing.assert_allclose(y, [[3, 5, 7]])
                index = client.get_model_repository_index()
                names = ([m["name"] for m in index] if module is httpclient
                         else [m.name for m in index.models])
                self.assertIn("tc_linear", names)
                client.unload_model("tc_linear")
                self.assertFalse(client.is_model_ready("tc_linear"))

    def test_a_versioned_model_with_the_batch_dimension(self):
        """Two versions of different weights, loaded with Triton's JSON config and files,
        each read and called on its own; max_batch_size 4 (dims without the batch)."""
        weights = {v: np.full((2, 3), v, np.float32) for v in (1, 2)}
        files = {f"file:{v}/model.onnx": model_bytes(matmul_graph("tc_versions", w))
                 .SerializeToString() for v, w in weights.items()}
        config = json.dumps({"name": "tc_versions", "backend": "onnxruntime",
                             "max_batch_size": 4, "version_policy": {"all": {}},
                             "input": [{"name": "hidden", "data_type": "TYPE_FP32",
                                        "dims": [2]}],
                             "dynamic_batching": {"preferred_batch_size": [2, 4]}})
        x = np.array([[1, 2], [3, 4]], np.float32)
        for module, client in self.clients():
            with self.subTest(module.__name__):
                client.load_model("tc_versions", config=config, files=files)
                meta = client.get_model_metadata("tc_versions")
                versions = meta["versions"] if module is httpclient else list(meta.versions)
                self.assertEqual(versions, ["1", "2"])
                inputs = meta["inputs"] if module is httpclient else meta.inputs
                shape = inputs[0]["shape"] if module is httpclient else list(inputs[0].shape)
                self.assertEqual([int(d) for d in shape], [-1, 2])
                for v, w in weights.items():
                    self.assertTrue(client.is_model_ready("tc_versions", str(v)))
                    hidden = module.InferInput("hidden", [2, 2], "FP32")
                    hidden.set_data_from_numpy(x)
                    result = client.infer("tc_versions", [hidden], model_version=str(v))
                    np.testing.assert_allclose(result.as_numpy("projected"), x @ w)
                    got = client.get_model_config("tc_versions", str(v))
                    got = got["max_batch_size"] if module is httpclient else \
                        got.config.max_batch_size
                    self.assertEqual(got, 4)
                self.assertFalse(client.is_model_ready("tc_versions", "3"))
                stats = client.get_inference_statistics("tc_versions")
                stats = stats["model_stats"] if module is httpclient else stats.model_stats
                self.assertEqual([s["version"] if module is httpclient else s.version
                                  for s in stats], ["1", "2"])
                big = module.InferInput("hidden", [5, 2], "FP32")
                big.set_data_from_numpy(np.ones((5, 2), np.float32))
                with self.assertRaises(InferenceServerException) as refused:
                    client.infer("tc_versions", [big])
                self.assertIn("max_batch_size 4", str(refused.exception))
                client.unload_model("tc_versions")

    def test_statistics(self):
        self.http.infer("matmul", matmul_inputs(httpclient))
        stats = self.http.get_inference_statistics("matmul")["model_stats"][0]
        self.assertGreaterEqual(stats["inference_count"], 1)
        self.assertIsInstance(stats["inference_stats"]["success"]["count"], int)
        grpc_stats = self.grpc.get_inference_statistics("matmul").model_stats[0]
        self.assertGreaterEqual(grpc_stats.inference_stats.success.count, 1)

    def test_log_and_trace_settings(self):
        for module, client in self.clients():
            with self.subTest(module.__name__):
                settings = client.update_log_settings({"log_verbose_level": 1})
                if module is grpcclient:
                    settings = client.get_log_settings(as_json=True)["settings"]
                    self.assertEqual(settings["log_verbose_level"]["uint32_param"], 1)
                else:
                    self.assertEqual(settings["log_verbose_level"], 1)
                client.update_log_settings({"log_verbose_level": 0})
                client.update_trace_settings(model_name="matmul",
                                             settings={"trace_rate": "7"})
                trace = client.get_trace_settings(model_name="matmul", as_json=True) \
                    if module is grpcclient else client.get_trace_settings(model_name="matmul")
                rate = (trace["settings"]["trace_rate"]["value"][0] if module is grpcclient
                        else trace["trace_rate"])
                self.assertEqual(rate, "7")
                client.update_trace_settings(model_name="matmul", settings={"trace_rate": None})
        with self.assertRaises(InferenceServerException):
            self.http.update_log_settings({"log_file": "/tmp/elsewhere.log"})

    def test_asyncio_clients(self):
        async def run():
            async with grpcaio.InferenceServerClient(self.server.address) as g:
                self.assertTrue(await g.is_server_ready())
                result = await g.infer("matmul", matmul_inputs(grpcaio))
                np.testing.assert_allclose(result.as_numpy("Y"), A @ B, rtol=1e-6)

                async def requests():
                    for i in range(3):
                        yield {"model_name": "matmul", "inputs": matmul_inputs(grpcaio),
                               "request_id": f"a{i}"}
                ids = set()
                async for result, error in g.stream_infer(requests()):
                    self.assertIsNone(error)
                    ids.add(result.get_response().id)
                    if len(ids) == 3:
                        break
                self.assertEqual(ids, {"a0", "a1", "a2"})
            h = httpaio.InferenceServerClient(self.server.http_url[len("http://"):])
            try:
                self.assertTrue(await h.is_server_live())
                result = await h.infer("matmul", matmul_inputs(httpaio))
                np.testing.assert_allclose(result.as_numpy("Y"), A @ B, rtol=1e-6)
            finally:
                await h.close()
        asyncio.run(run())


if __name__ == "__main__":
    unittest.main()
