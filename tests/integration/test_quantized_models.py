"""Resident weights kept quantized (issue 17): models written by
scripts/quantize_model.py (DequantizeLinear -> GroupedMatMul or -> MatMul),
served from the model repository through gRPC and HTTP. For every quantized
type (INT8, UINT8, INT4, UINT4), per channel and blocked (K not a multiple of
the block size, an odd K for the 4-bit packing), with and without zero
points, and each value type (FP32, FP16, BF16), the answer equals
DequantizeLinear then the op computed exactly, within the value type's
tolerance, over rows that stream as decode and rows cut into blocks. Bad
quantized model files are each refused at load with a named error, and the
server serves on."""
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import grpc
import numpy as np
import onnx
from onnx import TensorProto, helper

from gemmserve_client import decode_outputs, make_infer_request, pb2
from gemmserve_client.http import HttpClient
from gemmserve_testing.base import GemmServeTestCase
from gemmserve_testing.onnx_models import grouped_graph, matmul_graph, model_bytes, write_model
from gemmserve_testing.process import metric_sum
from gemmserve_testing.references import (assert_grouped_matmul_result, assert_matmul_result,
                                          random_wire, to_wire)

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
    "quantize_model", os.path.join(_ROOT, "scripts", "quantize_model.py"))
quantize_model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(quantize_model)

K, N, G, S = 77, 40, 5, 2  # K odd: 4-bit experts start mid-byte
_ONNX = {"FP32": TensorProto.FLOAT, "BF16": TensorProto.BFLOAT16, "FP16": TensorProto.FLOAT16}
RNG = np.random.default_rng(17)
_REPO = tempfile.mkdtemp(prefix="gemmserve-quantized-")
# name -> (value datatype, dequantized weights as the wire array, bias or None)
MODELS = {}
CASES = [(bits, asym, block, dt)
         for bits in (8, 4) for asym in (False, True) for block in (0, 16, 5)
         for dt in ("FP32", "BF16", "FP16")
         if dt == "FP32" or block == 16]


def _write(name, model, dequantized, datatype, bias=None):
    path = os.path.join(_REPO, name, "1", "model.onnx")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    MODELS[name] = (datatype, to_wire(datatype, dequantized), bias)


for _bits, _asym, _block, _dt in CASES:
    _kind = f"{'u' if _asym else ''}int{_bits}_b{_block}_{_dt.lower()}"
    _w = random_wire(RNG, _dt, (G, K, N))
    _b = random_wire(RNG, _dt, (G, N))
    _src = model_bytes(grouped_graph("m", _w, S, bias=_b, onnx_type=_ONNX[_dt]))
    _q, _, _deq = quantize_model.quantize_model(_src, _bits, not _asym, _block)
    _write(f"moe_{_kind}", _q, _deq, _dt, _b)
    _wm = random_wire(RNG, _dt, (K, N))
    _q, _, _deq = quantize_model.quantize_model(
        model_bytes(matmul_graph("m", _wm, onnx_type=_ONNX[_dt])), _bits, not _asym, _block)
    _write(f"lin_{_kind}", _q, _deq, _dt)


# The example repository's moe and moe_int4 (scripts/make_model_repository.py).
_EXAMPLE = tempfile.mkdtemp(prefix="gemmserve-example-")
subprocess.run([sys.executable, os.path.join(_ROOT, "scripts", "make_model_repository.py"),
                _EXAMPLE], check=True, stdout=subprocess.DEVNULL)
for _name in ("moe", "moe_int4", "moe_int4_a8"):
    shutil.copytree(os.path.join(_EXAMPLE, _name), os.path.join(_REPO, "example_" + _name))
shutil.rmtree(_EXAMPLE)


# llama.cpp's Q8_0 and Q4_0 experts from a GGUF file (scripts/gguf_to_onnx.py), the file
# written by its test's writer, by the format's spec; exact and with accuracy_level 4.
sys.path.insert(0, os.path.join(_ROOT, "scripts"))
import gguf_to_onnx_test as gguf  # noqa: E402

_GGUF = os.path.join(_REPO, "experts.gguf")
_GGUF_BYTES, GGUF_TENSORS, _, _ = gguf.sample_file(np.random.default_rng(175))
with open(_GGUF, "wb") as _f:
    _f.write(_GGUF_BYTES)
for _name in GGUF_TENSORS:
    for _level in ("0", "4"):
        subprocess.run([sys.executable, os.path.join(_ROOT, "scripts", "gguf_to_onnx.py"), _GGUF,
                        "--tensor", _name, "--out", _REPO, "--top_k", "2", "--accuracy_level",
                        _level, "--model_name", f"gguf_{_name.split('.')[2]}_a{_level}"],
                       check=True, stdout=subprocess.DEVNULL)


def tearDownModule():
    shutil.rmtree(_REPO, ignore_errors=True)


def _grouped_source():
    return model_bytes(grouped_graph("m", random_wire(RNG, "FP32", (G, K, N)), S))


class QuantizedModelsTest(GemmServeTestCase):
    server_flags = (f"--model_repository={_REPO}",)

    def test_every_quantized_layout_equals_dequantize_then_the_op(self):
        rng = np.random.default_rng(170)
        for name, (dt, w, b) in MODELS.items():
            for m in (1, 3, 16, 70, 200):  # decode; blocks of 64 rows and a partial one
                with self.subTest(model=name, m=m):
                    x = random_wire(rng, dt, (m, K))
                    if name.startswith("moe_"):
                        idx = np.stack([rng.permutation(G)[:S] for _ in range(m)]).astype(np.int64)
                        got = decode_outputs(self.infer(make_infer_request(
                            name, [("tokens", x, dt), ("routing", idx)])))["expert_out"]
                        assert_grouped_matmul_result(got, x, w, idx, b, dt, name)
                    else:
                        got = decode_outputs(self.infer(make_infer_request(
                            name, [("hidden", x, dt)])))["projected"]
                        assert_matmul_result(got, x, w, dt, name)

    def test_the_example_moe_int4_is_moe_quantized(self):
        """The answer equals moe's weights quantized by the script, and is close to moe's."""
        source = onnx.load(os.path.join(_REPO, "example_moe", "1", "model.onnx"))
        bias = quantize_model.read_float_tensor(
            next(t for t in source.graph.initializer if t.name == source.graph.node[0].input[3]))
        _, w, dequantized = quantize_model.quantize_model(source, 4, True, 32)
        rng = np.random.default_rng(172)
        x = random_wire(rng, "FP32", (8, w.shape[1]))
        idx = rng.integers(0, w.shape[0], (8, 2)).astype(np.int64)

        def run(name):
            return decode_outputs(self.infer(make_infer_request(
                "example_" + name, [("tokens", x, "FP32"), ("routing", idx)])))["expert_out"]

        quantized, original = run("moe_int4"), run("moe")
        assert_grouped_matmul_result(quantized, x, to_wire("FP32", dequantized), idx,
                                     to_wire("FP32", bias), "FP32", "moe_int4")
        rel = np.linalg.norm(quantized - original) / np.linalg.norm(original)
        self.assertLess(rel, 0.15, "INT4 in blocks of 32 against FP32")
        self.assertGreater(rel, 0.0)

    def test_the_example_moe_int4_a8_is_moe_int4_on_8_bit_activations(self):
        """accuracy_level 4 in its config.pbtxt: reported, and near moe_int4's answer."""
        config = self.stub.ModelConfig(pb2.ModelConfigRequest(name="example_moe_int4_a8"),
                                       timeout=10).config
        self.assertEqual(config.parameters["accuracy_level"].string_value, "4")
        rng = np.random.default_rng(174)
        x = rng.standard_normal((8, 512)).astype(np.float32)
        idx = rng.integers(0, 16, (8, 2)).astype(np.int64)

        def run(name):
            return decode_outputs(self.infer(make_infer_request(
                "example_" + name, [("tokens", x), ("routing", idx)])))["expert_out"]

        approx, exact = run("moe_int4_a8"), run("moe_int4")
        rel = np.abs(approx - exact).max() / np.abs(exact).max()
        self.assertLess(rel, 3e-2)
        self.assertGreater(rel, 0.0)

    def test_gguf_experts_serve_llama_cpp_s_weights(self):
        """A converted Q8_0 or Q4_0 expert tensor answers x @ W[idx] with W dequantized as
        llama.cpp dequantizes it (exactly, at level 0), and within 3e-2 with accuracy_level 4."""
        rng = np.random.default_rng(176)
        for name, (ggml_type, data, dims) in GGUF_TENSORS.items():
            w = gguf.dequantize_gguf(data, ggml_type, dims).transpose(0, 2, 1)  # [G, K, N]
            x = rng.standard_normal((5, dims[0])).astype(np.float32)
            idx = np.stack([rng.permutation(dims[2])[:2] for _ in range(5)]).astype(np.int64)
            for level in ("0", "4"):
                model = f"gguf_{name.split('.')[2]}_a{level}"
                with self.subTest(model=model):
                    got = decode_outputs(self.infer(make_infer_request(
                        model, [("X", x), ("indices", idx)])))["Y"]
                    if level == "0":
                        assert_grouped_matmul_result(got, x, w.astype(np.float32), idx, None,
                                                     "FP32", model)
                        continue
                    want = np.einsum("mk,mskn->msn", x.astype(np.float64), w[idx])
                    self.assertLess(np.abs(got - want).max() / np.abs(want).max(), 3e-2)

    def test_http_answers_equal_grpc_byte_for_byte(self):
        rng = np.random.default_rng(171)
        name = "moe_int4_b16_bf16"
        dt, w, b = MODELS[name]
        x = random_wire(rng, dt, (9, K))
        idx = rng.integers(0, G, (9, S)).astype(np.int64)
        via_grpc = decode_outputs(self.infer(make_infer_request(
            name, [("tokens", x, dt), ("routing", idx)])))["expert_out"]
        with HttpClient(self.server.http_url) as http:
            via_http = http.infer(name, [("tokens", x, dt), ("routing", idx)])["expert_out"]
        self.assertEqual(np.asarray(via_http).tobytes(), via_grpc.tobytes())
        assert_grouped_matmul_result(via_grpc, x, w, idx, b, dt, name)

    def test_config_and_metadata_report_the_quantization(self):
        cases = {"moe_int4_b16_bf16": ("INT4", "4", "16", "blocked", "false"),
                 "moe_uint8_b0_fp32": ("UINT8", "8", "0", "per_channel", "true"),
                 "lin_uint4_b5_fp32": ("UINT4", "4", "5", "blocked", "true")}
        for name, (qtype, bits, block, grain, zp) in cases.items():
            with self.subTest(name):
                config = self.stub.ModelConfig(pb2.ModelConfigRequest(name=name), timeout=10).config
                p = {k: v.string_value for k, v in config.parameters.items()}
                self.assertEqual((p["quantization"], p["bits"], p["block_size"], p["granularity"],
                                  p["zero_point"], p["weights_layout"]),
                                 (qtype, bits, block, grain, zp, "quantized"))
                # Held as integers, and scales and zero points as FP32: less
                # than the FP32 weights even in blocks of 5 rows with zero points.
                elements = G * K * N if name.startswith("moe") else K * N
                self.assertLess(int(p["weights_bytes"]), elements * 4)
                self.assertGreater(int(p["weight_bytes_per_group"]), 0)

    def test_weight_bytes_metric_counts_each_used_expert_once_per_call(self):
        """gemmserve_weight_bytes_total grows by what the call read: each expert the
        tokens chose, once however many tokens chose it, at the bytes ModelConfig reports
        (quantized integers, scales and zero points); a MatMul reads its B once."""
        rng = np.random.default_rng(173)

        def weight_bytes(name):
            return metric_sum(self.server.metrics_url, "gemmserve_weight_bytes_total", model=name)

        def per_group(name):
            config = self.stub.ModelConfig(pb2.ModelConfigRequest(name=name), timeout=10).config
            return int(config.parameters["weight_bytes_per_group"].string_value)

        for name in ("moe_uint4_b5_fp32", "moe_int8_b16_bf16", "lin_uint8_b0_fp32"):
            dt = MODELS[name][0]
            with self.subTest(name):
                before = weight_bytes(name)
                if name.startswith("moe_"):
                    idx = np.array([[0, 3], [3, 0], [0, 3], [4, 3]], dtype=np.int64)  # {0, 3, 4}
                    self.infer(make_infer_request(
                        name, [("tokens", random_wire(rng, dt, (4, K)), dt), ("routing", idx)]))
                    self.assertEqual(weight_bytes(name) - before, 3 * per_group(name))
                else:
                    self.infer(make_infer_request(
                        name, [("hidden", random_wire(rng, dt, (3, K)), dt)]))
                    self.assertEqual(weight_bytes(name) - before, per_group(name))
                self.assertLess(per_group(name), K * N * 4)  # held quantized, not as FP32

    def test_out_of_range_expert_is_refused_on_a_quantized_model(self):
        dt, _, _ = MODELS["moe_int8_b16_fp32"]
        x = random_wire(np.random.default_rng(3), dt, (2, K))
        request = make_infer_request("moe_int8_b16_fp32",
                                     [("tokens", x, dt), ("routing", np.array([[0, 1], [G, 0]]))])
        self.assert_rejected(request, grpc.StatusCode.INVALID_ARGUMENT, ["outside [0, G)"])

    def _load_fails(self, model, message):
        with self.assertRaises(grpc.RpcError) as ctx:
            self.load("bad_quantized", config="",
                      files={"1/model.onnx": model.SerializeToString()})
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT,
                         ctx.exception.details())
        self.assertIn(message, ctx.exception.details())
        self.assert_server_still_serves()

    def test_bad_quantized_model_files_are_refused_with_a_named_error(self):
        def quantized(bits=4, asym=True, block=16):
            return quantize_model.quantize_model(_grouped_source(), bits, not asym, block)[0]

        def init(model, suffix):
            return next(t for t in model.graph.initializer if t.name.endswith(suffix))

        def attr(model, name, value):
            dq = model.graph.node[0]
            for a in dq.attribute:
                if a.name == name:
                    a.i = value
                    return model
            dq.attribute.append(helper.make_attribute(name, value))
            return model

        def float_attr(model, name, value):
            dq = model.graph.node[0]
            kept = [a for a in dq.attribute if a.name != name]
            del dq.attribute[:]
            dq.attribute.extend(kept + [helper.make_attribute(name, float(value))])
            return model

        zp_type = quantized(bits=8)
        init(zp_type, "_zero_point").data_type = TensorProto.INT8
        feeds_other = quantized()
        feeds_other.graph.node[1].input[0] = feeds_other.graph.node[0].output[0]
        wrong_first = quantized()
        wrong_first.graph.node[0].op_type = "Cast"
        short_data = quantized()
        init(short_data, "_quantized").raw_data = init(short_data, "_quantized").raw_data[:-1]
        bad_type = quantized(bits=8, asym=False)
        init(bad_type, "_quantized").data_type = TensorProto.INT16
        nan_scale = quantized(asym=False, bits=8, block=0)
        init(nan_scale, "_scale").raw_data = np.full(N, np.nan, np.float32).tobytes()
        cases = {
            "scale shape disagreeing with block_size": (
                self._scale_dims(quantized(), 1, +1), "disagrees with block_size 16"),
            "zero_point type differing from the weights'": (zp_type, "x_zero_point"),
            "block_size 0 with a blocked scale": (attr(quantized(), "block_size", 0),
                                                  "blocked quantization needs block_size >= 1"),
            "block_size above K": (attr(quantized(), "block_size", K + 1), f"is above K={K}"),
            "negative block_size": (attr(quantized(), "block_size", -3), "is negative"),
            "axis out of range": (attr(quantized(block=0), "axis", 3), "axis 3 is outside"),
            "blocked along N": (attr(quantized(), "axis", 2), "gemmserve serves blocks along K"),
            # A FLOAT attribute's `i` reads 0, which would be a valid axis: refused.
            "a FLOAT axis": (float_attr(quantized(block=0), "axis", 1.0),
                             "'axis' must be an INT attribute"),
            "DequantizeLinear feeding the input": (feeds_other, "must be the weights (input 1)"),
            "first node not DequantizeLinear": (wrong_first, "not DequantizeLinear"),
            "weights shorter than their shape": (short_data, "the file holds"),
            "weights of a type not served": (bad_type, "quantized weights are INT8, UINT8, INT4"),
            "non-finite scale": (nan_scale, "is not finite"),
        }
        for what, (model, message) in cases.items():
            with self.subTest(what):
                self._load_fails(model, message)

    @staticmethod
    def _scale_dims(model, dim, delta):
        scale = next(t for t in model.graph.initializer if t.name.endswith("_scale"))
        zp = [t for t in model.graph.initializer if t.name.endswith("_zero_point")]
        per = scale.dims[dim]
        scale.dims[dim] = per + delta
        # the data resized to the new shape so only the shape is wrong
        size = int(np.prod(scale.dims))
        scale.raw_data = np.ones(size, np.float32).tobytes()
        for z in zp:
            z.dims[dim] = per + delta
            z.raw_data = bytes((size + 1) // 2)
        return model


if __name__ == "__main__":
    unittest.main()
