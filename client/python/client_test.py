#!/usr/bin/env python3
"""gemmserve_client against a live gemmserve: infer() with keyword arrays for
MatMul (FP32, INT64, BF16) and GroupedMatMul, the older list form, the input
checks made before anything is sent, and the examples in examples/ (moe_layer.py
against a small layer model written by scripts/make_moe_layer.py).

Run by ctest as `client_python` (tests/CMakeLists.txt sets PYTHONPATH to the
build's stubs, tests/python_lib and this folder, and GEMMSERVE_BIN). By hand:

    PYTHONPATH=build/python:tests/python_lib:client/python GEMMSERVE_BIN=build/bin/gemmserve \\
      python3 client/python/client_test.py -v
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import grpc
import numpy as np

from gemmserve_client import (GemmServeClient, Tensor, bf16, bf16_bits_to_float32,
                              float32_to_bf16_bits)
from gemmserve_testing.server import ServerProcess

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def bf16_bound(a, b):
    """The error allowed after one rounding of an FP32 sum to bfloat16 (8 significant bits),
    with a factor 2 to spare."""
    return (np.abs(a) @ np.abs(b)) / 128


class ClientTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        # A small mixture-of-experts layer for examples/moe_layer.py (scripts/make_moe_layer.py).
        cls.repo = tempfile.mkdtemp(prefix="gemmserve-client-")
        cls.addClassCleanup(shutil.rmtree, cls.repo, True)
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_moe_layer.py"),
                        "--out", os.path.join(cls.repo, "moe_layer", "1", "model.onnx"),
                        "--k", "64", "--i", "32", "--g", "8", "--s", "2"],
                       check=True, stdout=subprocess.DEVNULL)
        cls.server = ServerProcess(f"--model_repository={cls.repo}")
        cls.server.start()
        cls.addClassCleanup(cls.server.stop)
        cls.client = GemmServeClient(cls.server.address)
        cls.addClassCleanup(cls.client.close)
        cls.client.wait_ready(timeout=10)
        cls.rng = np.random.default_rng(7)

    def test_the_http_module_needs_neither_grpcio_nor_the_stubs(self):
        check = ("import sys, gemmserve_client.http as h; "
                 "assert 'grpc' not in sys.modules and 'grpc_service_pb2' not in sys.modules, "
                 "sorted(m for m in sys.modules if 'grpc' in m); "
                 "print(h.HttpClient.__name__)")
        env = {k: v for k, v in os.environ.items() if k != "GEMMSERVE_STUBS"}
        env["PYTHONPATH"] = os.path.dirname(os.path.abspath(__file__))  # client/python only
        result = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True,
                                text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), "HttpClient")

    # ------------------------------------------------------------ matmul

    def test_matmul_fp32_keyword_arrays(self):
        a = self.rng.standard_normal((3, 5)).astype(np.float32)
        b = self.rng.standard_normal((5, 4)).astype(np.float32)
        outputs = self.client.infer("matmul", A=a, B=b)
        self.assertEqual(list(outputs), ["Y"])
        y = outputs["Y"]
        self.assertEqual(y.dtype, np.float32)
        np.testing.assert_allclose(y, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)

    def test_matmul_int64_keyword_arrays_are_exact(self):
        a = self.rng.integers(-1000, 1000, (4, 6), dtype=np.int64)
        b = self.rng.integers(-1000, 1000, (2, 6, 3), dtype=np.int64)  # batch broadcast
        y = self.client.infer("matmul", A=a, B=b)["Y"]
        self.assertEqual(y.dtype, np.int64)
        np.testing.assert_array_equal(y, np.matmul(a, b))

    def test_matmul_bf16_marked_with_bf16_wrapper(self):
        a = float32_to_bf16_bits(self.rng.standard_normal((4, 16)))
        b = float32_to_bf16_bits(self.rng.standard_normal((16, 3)))
        y = self.client.infer("matmul", A=bf16(a), B=bf16(b))["Y"]
        self.assertEqual((y.dtype, y.shape), (np.uint16, (4, 3)))  # bit patterns back
        af, bf = bf16_bits_to_float32(a).astype(np.float64), bf16_bits_to_float32(b)
        error = np.abs(bf16_bits_to_float32(y) - af @ bf)
        self.assertTrue(np.all(error <= bf16_bound(af, bf)), error)

    def test_matmul_bf16_named_in_datatypes_matches_the_wrapper(self):
        a = float32_to_bf16_bits(self.rng.standard_normal((2, 8)))
        b = float32_to_bf16_bits(self.rng.standard_normal((8, 5)))
        wrapped = self.client.infer("matmul", A=bf16(a), B=bf16(b))["Y"]
        named = self.client.infer("matmul", A=a, B=b, datatypes={"A": "BF16", "B": "BF16"})["Y"]
        np.testing.assert_array_equal(named, wrapped)

    def test_list_dict_and_keyword_forms_send_the_same_request(self):
        a = self.rng.standard_normal((3, 4)).astype(np.float32)
        b = self.rng.standard_normal((4, 2)).astype(np.float32)
        by_keyword = self.client.infer("matmul", A=a, B=b)["Y"]
        by_list = self.client.infer("matmul", [("A", a), ("B", b)])["Y"]
        by_dict = self.client.infer("matmul", {"A": a, "B": b})["Y"]
        mixed = self.client.infer("matmul", [("A", a)], B=b)["Y"]
        for y in (by_list, by_dict, mixed):
            np.testing.assert_array_equal(y, by_keyword)

    def test_list_form_with_datatype_and_typed_contents_still_works(self):
        a = float32_to_bf16_bits(self.rng.standard_normal((2, 3)))
        y = self.client.infer("matmul", [("A", a, "BF16"), ("B", a.T.copy(), "BF16")],
                              outputs=["Y"], timeout=30)["Y"]
        self.assertEqual(y.shape, (2, 2))
        i = np.arange(6, dtype=np.int32).reshape(2, 3)
        y = self.client.infer("matmul", [("A", i), ("B", i.T.copy())], typed=True)["Y"]
        np.testing.assert_array_equal(y, i @ i.T)

    # ---------------------------------------------------- grouped_matmul

    def test_grouped_matmul_keyword_arrays_with_bias(self):
        x = self.rng.standard_normal((5, 8)).astype(np.float32)
        w = self.rng.standard_normal((3, 8, 4)).astype(np.float32)
        bias = self.rng.standard_normal((3, 4)).astype(np.float32)
        idx = np.array([[0, 2], [1, 1], [2, 0], [0, 1], [2, 2]], np.int32)
        out = self.client.infer("grouped_matmul", input=x, weights=w, group_indices=idx,
                                bias=bias)["output"]
        expected = np.einsum("mk,mskn->msn", x.astype(np.float64), w[idx]) + bias[idx]
        self.assertEqual(out.shape, (5, 2, 4))
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)

    def test_grouped_matmul_bf16(self):
        x = float32_to_bf16_bits(self.rng.standard_normal((4, 8)))
        w = float32_to_bf16_bits(self.rng.standard_normal((2, 8, 3)))
        idx = np.array([[1], [0], [1], [1]], np.int64)
        out = self.client.infer("grouped_matmul", input=bf16(x), weights=bf16(w),
                                group_indices=idx)["output"]
        xf, wf = bf16_bits_to_float32(x).astype(np.float64), bf16_bits_to_float32(w)
        for m in range(4):
            error = np.abs(bf16_bits_to_float32(out[m, 0]) - xf[m] @ wf[idx[m, 0]])
            self.assertTrue(np.all(error <= bf16_bound(xf[m], wf[idx[m, 0]])), error)

    # -------------------------------------------------------------- errors

    def test_server_rejection_raises_rpc_error_with_its_code(self):
        with self.assertRaises(grpc.RpcError) as caught:
            self.client.infer("matmul", A=np.ones((2, 3), np.float32),
                              B=np.ones((4, 2), np.float32))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertTrue(caught.exception.details())

    def test_checks_made_before_sending(self):
        a = np.ones((2, 2), np.float32)
        with self.assertRaisesRegex(TypeError, "float32_to_bf16_bits"):
            bf16(a)
        with self.assertRaisesRegex(TypeError, "uint16 bit patterns"):
            self.client.infer("matmul", A=a, B=a, datatypes={"A": "BF16"})
        with self.assertRaisesRegex(ValueError, "given twice"):
            self.client.infer("matmul", [("A", a)], A=a, B=a)
        with self.assertRaisesRegex(ValueError, "not given"):
            self.client.infer("matmul", A=a, B=a, datatypes={"C": "FP32"})
        with self.assertRaisesRegex(ValueError, "unknown datatype"):
            self.client.infer("matmul", A=Tensor(a, "FP8"), B=a)

    # ------------------------------------------------- repository and settings

    def test_load_model_uploads_a_model_with_tritons_json_config_over_both_protocols(self):
        """tritonclient's load_model(config=json.dumps({...}), files=...), here with a dict;
        the model answers, and its config says what was sent."""
        from gemmserve_client.http import HttpClient
        from gemmserve_testing.onnx_models import matmul_graph, model_bytes
        w = np.arange(6, dtype=np.float32).reshape(2, 3)
        model = model_bytes(matmul_graph("uploaded", w)).SerializeToString()
        config = {"name": "uploaded", "max_batch_size": 0,
                  "dynamic_batching": {"max_queue_delay_microseconds": 250}}
        http = HttpClient(self.server.http_url)
        self.addCleanup(http.close)
        for load, config_of in ((self.client.load_model, self.client.model_config),
                                (http.load_model, http.model_config)):
            load("uploaded", config=config, files={"1/model.onnx": model})
            reported = config_of("uploaded")
            delay = (reported.dynamic_batching.max_queue_delay_microseconds
                     if hasattr(reported, "dynamic_batching")
                     else reported["dynamic_batching"]["max_queue_delay_microseconds"])
            self.assertEqual(delay, 250)
            metadata = self.client.model_metadata("uploaded")
            x = np.ones((4, 2), np.float32)
            y = self.client.infer("uploaded", {metadata.inputs[0].name: x})
            np.testing.assert_array_equal(y[metadata.outputs[0].name], x @ w)
        self.client.unload_model("uploaded")
        names = {m["name"]: m["state"] for m in http.repository_index()}
        self.assertNotEqual(names.get("uploaded"), "READY")
        with self.assertRaises(grpc.RpcError) as caught:
            self.client.load_model("uploaded", config={"max_batch_size": "lots"},
                                   files={"1/model.onnx": model})
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_trace_settings_from_both_clients(self):
        from gemmserve_client.http import HttpClient
        settings = self.client.trace_settings()
        self.assertEqual(settings["trace_level"], ["OFF"])
        self.assertEqual(settings["trace_mode"], ["triton"])
        self.assertEqual(self.client.trace_settings("matmul", trace_rate="7")["trace_rate"],
                         ["7"])
        with HttpClient(self.server.http_url) as http:
            self.assertEqual(http.trace_settings("matmul")["trace_rate"], "7")
            self.assertEqual(http.trace_settings("matmul", trace_rate=None)["trace_rate"],
                             "1000")
            self.assertIn("log_info", http.log_settings())

    # ------------------------------------------------------------ examples

    def run_example(self, name):
        result = subprocess.run([sys.executable, os.path.join(EXAMPLES, name),
                                 "--url", self.server.address],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0,
                         f"{name} failed:\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        self.assertNotIn("MISMATCH", result.stdout)
        return result.stdout

    def test_matmul_example(self):
        stdout = self.run_example("matmul.py")
        self.assertIn("matmul FP32 [2, 3, 4] x [4, 5] -> [2, 3, 5]: OK", stdout)
        self.assertIn("matmul BF16 [3, 8] x [8, 2] -> [3, 2]: OK", stdout)

    def test_grouped_matmul_example(self):
        stdout = self.run_example("grouped_matmul.py")
        self.assertIn("grouped_matmul FP32 input [6, 16], weights [4, 16, 8], "
                      "group_indices [6, 2] -> [6, 2, 8]: OK", stdout)
        self.assertIn("grouped_matmul BF16 -> [6, 2, 8]: OK", stdout)

    def test_moe_layer_example(self):
        stdout = self.run_example("moe_layer.py")
        self.assertIn("moe_layer: fused gate/up, silu, routing softmax_topk, G 8, K 64", stdout)
        self.assertIn("moe_layer x [4, 64] -> [4, 64]: OK", stdout)
        self.assertIn("tokens sent alone get the same rows: OK", stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
