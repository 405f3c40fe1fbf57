"""The model repository through the real server: resident ONNX models (inline
and external weights), config.pbtxt, RepositoryIndex / Load / Unload,
ModelReady, ModelConfig, ModelStatistics, every model-file error reported at
load while the server keeps serving, and reload under load (no request lost,
none answered from the wrong weights)."""
import os
import shutil
import tempfile
import threading
import time
import unittest

import grpc
import numpy as np
import onnx
from onnx import TensorProto, helper

from gemmserve_client import decode_outputs, make_infer_request, pb2
from gemmserve_testing.base import GemmServeTestCase
from gemmserve_testing.onnx_models import (batching_config, grouped_graph, grouped_reference,
                                           matmul_graph, model_bytes, write_model)

RNG = np.random.default_rng(11)
K, N, G, S = 16, 8, 5, 2
W1 = RNG.standard_normal((G, K, N)).astype(np.float32)
BIAS1 = RNG.standard_normal((G, N)).astype(np.float32)
W2 = RNG.standard_normal((G, K, N)).astype(np.float32)
B_LIN = RNG.standard_normal((K, N)).astype(np.float64)

_REPO = tempfile.mkdtemp(prefix="gemmserve-repo-")
write_model(_REPO, "moe", grouped_graph("moe", W1, S, bias=BIAS1), config=batching_config(200))
write_model(_REPO, "moe_ext", grouped_graph("moe_ext", W2, S), external=True)
write_model(_REPO, "lin", matmul_graph("lin", B_LIN), config=batching_config(100, max_rows=64))
_broken = grouped_graph("broken", W1, S)
_broken.node[0].op_type = "Softmax"
write_model(_REPO, "broken", _broken)


def tearDownModule():
    shutil.rmtree(_REPO, ignore_errors=True)


class ModelRepositoryTest(GemmServeTestCase):
    server_flags = (f"--model_repository={_REPO}",)

    def test_resident_grouped_model_matches_the_reference(self):
        for m in (1, 3, 0):
            x = RNG.standard_normal((m, K)).astype(np.float32)
            idx = RNG.integers(0, G, (m, S)).astype(np.int64)
            out = self.run_moe("moe", x, idx)
            np.testing.assert_allclose(out, grouped_reference(x, W1, idx, BIAS1), rtol=1e-5,
                                       atol=1e-5)
        x = RNG.standard_normal((4, K)).astype(np.float32)
        idx = RNG.integers(0, G, (4, S)).astype(np.int64)
        np.testing.assert_allclose(self.run_moe("moe_ext", x, idx), grouped_reference(x, W2, idx),
                                   rtol=1e-5, atol=1e-5)

    def test_resident_matmul_and_its_errors(self):
        a = RNG.standard_normal((3, K))
        y = decode_outputs(self.infer(make_infer_request("lin", [("hidden", a)])))["projected"]
        np.testing.assert_allclose(y, a @ B_LIN, rtol=1e-12)
        self.assert_rejected(make_infer_request("lin", [("hidden", np.zeros((3, K + 1)))]),
                             grpc.StatusCode.INVALID_ARGUMENT,
                             ["hidden", f"expected dimension 1 to be {K}"])
        bad_idx = np.array([[0, G]], np.int64)
        self.assert_rejected(self.moe_request("moe", np.zeros((1, K), np.float32), bad_idx),
                             grpc.StatusCode.INVALID_ARGUMENT, ["group_indices", "outside [0, G)"])

    def test_metadata_and_config_describe_the_graph(self):
        md = self.stub.ModelMetadata(pb2.ModelMetadataRequest(name="moe"), timeout=10)
        self.assertEqual([i.name for i in md.inputs], ["tokens", "routing"])
        self.assertEqual(list(md.inputs[0].shape), [-1, K])
        self.assertEqual(md.outputs[0].name, "expert_out")
        self.assertEqual(list(md.outputs[0].shape), [-1, S, N])
        cfg = self.stub.ModelConfig(pb2.ModelConfigRequest(name="moe"), timeout=10).config
        self.assertEqual(cfg.parameters["groups"].string_value, str(G))
        self.assertEqual(cfg.dynamic_batching.max_queue_delay_microseconds, 200)
        cfg = self.stub.ModelConfig(pb2.ModelConfigRequest(name="moe_ext"), timeout=10).config
        self.assertFalse(cfg.HasField("dynamic_batching"))

    def test_index_lists_ready_models_and_the_broken_one_with_its_reason(self):
        index = self.stub.RepositoryIndex(pb2.RepositoryIndexRequest(), timeout=10)
        states = {m.name: (m.state, m.reason) for m in index.models}
        for name in ("moe", "moe_ext", "lin", "matmul", "grouped_matmul"):
            self.assertEqual(states[name][0], "READY", name)
        self.assertEqual(states["broken"][0], "UNAVAILABLE")
        self.assertIn("unknown op 'Softmax'", states["broken"][1])
        ready = self.stub.RepositoryIndex(pb2.RepositoryIndexRequest(ready=True), timeout=10)
        self.assertNotIn("broken", [m.name for m in ready.models])
        self.assertFalse(self.stub.ModelReady(pb2.ModelReadyRequest(name="broken"), timeout=10).ready)
        error = self.rpc_error(self.stub.ModelInfer, self.moe_request(
            "broken", np.zeros((1, K), np.float32), np.zeros((1, S), np.int64)))
        self.assertEqual(error.code(), grpc.StatusCode.UNAVAILABLE, error.details())

    def test_every_model_file_error_is_reported_at_load_and_the_server_serves_on(self):
        two_nodes = grouped_graph("x", W1, S)
        two_nodes.node.append(helper.make_node("Relu", ["expert_out"], ["r"]))
        unknown = grouped_graph("x", W1, S)
        unknown.node[0].op_type = "Conv"
        wrong_shape = grouped_graph("x", W1, S)
        wrong_shape.initializer[0].dims[2] = N + 1
        cases = {
            "two nodes": (model_bytes(two_nodes).SerializeToString(), "the graph has 2 nodes"),
            "unknown op": (model_bytes(unknown).SerializeToString(), "unknown op 'Conv'"),
            "wrong initializer shape": (model_bytes(wrong_shape).SerializeToString(),
                                        "initializer 'experts': shape"),
            "not onnx": (b"\x00garbage\xff" * 10, "not a valid ONNX model"),
        }
        for what, (data, message) in cases.items():
            with self.subTest(what):
                with self.assertRaises(grpc.RpcError) as ctx:
                    self.load("upload", config="", files={"1/model.onnx": data})
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(message, ctx.exception.details())
                self.assertNotIn(tempfile.gettempdir(), ctx.exception.details())
                self.assert_server_still_serves()
        with self.assertRaises(grpc.RpcError) as ctx:  # missing file
            self.load("upload", config="", files={"1/other.onnx": b"x"})
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn("no numeric version directory holds model.onnx", ctx.exception.details())
        with self.assertRaises(grpc.RpcError) as ctx:
            self.load("no_such_model")
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(grpc.RpcError) as ctx:
            self.load("upload", config="dynamic_batching { bogus: 1 }",
                      files={"1/model.onnx": model_bytes(grouped_graph("x", W1, S)).SerializeToString()})
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("config.pbtxt: line 1", ctx.exception.details())
        with self.assertRaises(grpc.RpcError) as ctx:
            self.load("upload", config="", files={"../escape/model.onnx": b"x"})
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assert_server_still_serves()

    def test_upload_unload_and_reload(self):
        data = model_bytes(grouped_graph("up", W2, S)).SerializeToString()
        self.load("up", config=batching_config(50), files={"1/model.onnx": data})
        self.assertTrue(self.stub.ModelReady(pb2.ModelReadyRequest(name="up"), timeout=10).ready)
        x = RNG.standard_normal((2, K)).astype(np.float32)
        idx = RNG.integers(0, G, (2, S)).astype(np.int64)
        np.testing.assert_allclose(self.run_moe("up", x, idx), grouped_reference(x, W2, idx),
                                   rtol=1e-5, atol=1e-5)
        self.stub.RepositoryModelUnload(pb2.RepositoryModelUnloadRequest(model_name="up"), timeout=10)
        self.assertFalse(self.stub.ModelReady(pb2.ModelReadyRequest(name="up"), timeout=10).ready)
        # Nothing of an uploaded model is left once it is unloaded.
        error = self.rpc_error(self.stub.ModelInfer, self.moe_request("up", x, idx))
        self.assertEqual(error.code(), grpc.StatusCode.NOT_FOUND)
        index = self.stub.RepositoryIndex(pb2.RepositoryIndexRequest(), timeout=10)
        self.assertNotIn("up", [m.name for m in index.models])
        self.load("up", config="", files={"1/model.onnx": data})
        np.testing.assert_allclose(self.run_moe("up", x, idx), grouped_reference(x, W2, idx),
                                   rtol=1e-5, atol=1e-5)
        error = self.rpc_error(self.stub.RepositoryModelUnload,
                               pb2.RepositoryModelUnloadRequest(model_name="matmul"))
        self.assertEqual(error.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_directory_model_unloaded_is_unavailable_and_listed(self):
        self.stub.RepositoryModelUnload(pb2.RepositoryModelUnloadRequest(model_name="moe_ext"),
                                        timeout=10)
        try:
            error = self.rpc_error(self.stub.ModelInfer, self.moe_request(
                "moe_ext", np.zeros((1, K), np.float32), np.zeros((1, S), np.int64)))
            self.assertEqual(error.code(), grpc.StatusCode.UNAVAILABLE, error.details())
            index = self.stub.RepositoryIndex(pb2.RepositoryIndexRequest(), timeout=10)
            states = {m.name: m.state for m in index.models}
            self.assertEqual(states["moe_ext"], "UNAVAILABLE")
        finally:
            self.load("moe_ext")
        self.assertTrue(self.stub.ModelReady(pb2.ModelReadyRequest(name="moe_ext"),
                                             timeout=10).ready)

    def test_reload_swaps_weights_atomically_under_load(self):
        """Clients hammer `swap` while it is reloaded back and forth between two sets of
        weights. The swap is atomic, as the README promises: every call succeeds (never
        UNAVAILABLE), an answer that arrived before a reload began comes from the old
        weights, a request sent after a reload returned gets the new ones, and only a call
        that overlapped a reload may have either; none mixes the two."""
        weights = {1: W1, 2: W2}
        data = {v: model_bytes(grouped_graph("swap", w, S)).SerializeToString()
                for v, w in weights.items()}
        self.load("swap", config=batching_config(100), files={"1/model.onnx": data[1]})
        x = RNG.standard_normal((3, K)).astype(np.float32)
        idx = RNG.integers(0, G, (3, S)).astype(np.int64)
        refs = {v: grouped_reference(x, w, idx) for v, w in weights.items()}
        assert not np.allclose(refs[1], refs[2], rtol=1e-5, atol=1e-5)
        stop = threading.Event()
        progress = threading.Condition()
        records, failures = [], []  # (sent, received, version or None)

        def client():
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    out = self.run_moe("swap", x, idx)
                except AssertionError as e:
                    failures.append(str(e))
                    return
                received = time.monotonic()
                which = [v for v, r in refs.items() if np.allclose(out, r, rtol=1e-5, atol=1e-5)]
                with progress:
                    records.append((sent, received, which[0] if len(which) == 1 else None))
                    progress.notify_all()

        def wait_for_answers_sent_after(moment, count=12):
            """Blocks (on the clients' progress, not a sleep) until `count` requests sent
            after `moment` were answered, or a client failed."""
            deadline = time.monotonic() + 60
            with progress:
                while (sum(1 for r in records if r[0] > moment) < count and not failures
                       and time.monotonic() < deadline):
                    progress.wait(timeout=1)

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        swaps = [(0.0, 0.0, 1)]  # (began, returned, version now served)
        try:
            wait_for_answers_sent_after(0.0)
            for round_ in range(6):
                version = 2 if round_ % 2 == 0 else 1
                began = time.monotonic()
                self.load("swap", config=batching_config(100),
                          files={"1/model.onnx": data[version]})
                swaps.append((began, time.monotonic(), version))
                wait_for_answers_sent_after(swaps[-1][1])
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        self.assertEqual(failures, [])
        self.assertNotIn(None, [r[2] for r in records], "an answer mixed the two weight sets")
        for sent, received, version in records:
            # Served when sent: the last reload that had returned by then; a reload that
            # overlapped the call may have served it too.
            allowed = {max((s for s in swaps if s[1] <= sent), key=lambda s: s[1])[2]}
            allowed |= {s[2] for s in swaps if s[0] < received and s[1] > sent}
            self.assertIn(version, allowed, f"sent at {sent:.4f}, answered at {received:.4f}; "
                                            f"reloads {swaps}")
        for began, returned, version in swaps[1:]:
            after = [r[2] for r in records if r[0] > returned]
            self.assertGreaterEqual(len(after), 1)

    def test_statistics_count_rows_and_kernel_calls(self):
        before = self.stub.ModelStatistics(pb2.ModelStatisticsRequest(name="lin"), timeout=10)
        before = before.model_stats[0]
        for rows in (1, 2, 3):
            self.infer(make_infer_request("lin", [("hidden", np.ones((rows, K)))]))
        after = self.stub.ModelStatistics(pb2.ModelStatisticsRequest(name="lin"),
                                          timeout=10).model_stats[0]
        self.assertEqual(after.inference_count - before.inference_count, 6)
        self.assertEqual(after.execution_count - before.execution_count, 3)
        self.assertEqual(after.inference_stats.success.count - before.inference_stats.success.count, 3)
        self.assertGreater(after.inference_stats.compute_infer.ns, before.inference_stats.compute_infer.ns)
        self.assertGreater(after.last_inference, 0)
        every = self.stub.ModelStatistics(pb2.ModelStatisticsRequest(), timeout=10)
        self.assertIn("moe", [m.name for m in every.model_stats])


if __name__ == "__main__":
    unittest.main()
