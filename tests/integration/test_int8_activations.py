"""accuracy_level 4 (issue 42): quantized GroupedMatMul, MatMul and mixture-of-experts layer
models whose config asks for 8-bit activations, served through gRPC and HTTP. Each answer equals
a numpy evaluation of the same arithmetic (activations quantized per row and K block, symmetric,
round half to even; integer sums; the scales applied per block), and stays near
DequantizeLinear-then-op. ModelConfig reports the setting; anything but "0" and "4", and "4" on
weights that are not quantized, is refused at load by name; the server serves on."""
import importlib.util
import os
import unittest

import grpc
import numpy as np
from onnx import TensorProto

from gemmserve_client import decode_outputs, make_infer_request, pb2
from gemmserve_client.http import HttpClient
from gemmserve_testing.base import GemmServeTestCase
from gemmserve_testing.onnx_models import grouped_graph, matmul_graph, model_bytes

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load_module(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(_ROOT, "scripts",
                                                                     f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


quantize_model = _load_module("quantize_model")
make_moe_layer = _load_module("make_moe_layer")

K, N, G, S = 80, 24, 4, 2
LEVEL_4 = 'parameters { key: "accuracy_level" value { string_value: "4" } }\n'


def same_arithmetic(x, q_w, w_scale, w_zero, block_size):
    """accuracy_level 4's arithmetic in float64 (scripts/quantize_model.py)."""
    return quantize_model.int8_activation_matmul(x, q_w, w_scale, w_zero, block_size)


class Int8ActivationsTest(GemmServeTestCase):
    def load_model(self, name, model, config=LEVEL_4):
        self.load(name, config=config, files={"1/model.onnx": model.SerializeToString()})

    def quantized(self, bits, symmetric, block, grouped, rng):
        """A quantized model of random weights and their integers, scales and zero points."""
        if grouped:
            w = rng.standard_normal((G, K, N)).astype(np.float32) / np.sqrt(K)
            source = model_bytes(grouped_graph("m", w, S))
        else:
            w = rng.standard_normal((K, N)).astype(np.float32) / np.sqrt(K)
            source = model_bytes(matmul_graph("m", w))
        model, original, _ = quantize_model.quantize_model(source, bits, symmetric, block)
        q, scale, zero, dequantized, _, _ = quantize_model.quantize(
            original, TensorProto.FLOAT, bits, symmetric, block)
        return model, q, scale, zero, dequantized

    def test_answers_are_the_same_arithmetic_and_near_the_exact_path(self):
        rng = np.random.default_rng(420)
        for bits, symmetric, block in ((4, True, 16), (8, False, 0), (4, False, 20), (8, True, 16)):
            for grouped in (True, False):
                name = f"l4_{'g' if grouped else 'm'}{bits}_{int(symmetric)}_{block}"
                with self.subTest(name):
                    model, q, scale, zero, deq = self.quantized(bits, symmetric, block, grouped,
                                                                rng)
                    self.load_model(name, model)
                    x = rng.standard_normal((5, K)).astype(np.float32)
                    if grouped:
                        idx = np.stack([rng.permutation(G)[:S] for _ in range(5)])
                        got = decode_outputs(self.infer(make_infer_request(
                            name, [("tokens", x), ("routing", idx)])))["expert_out"]
                        want = np.stack([np.stack([same_arithmetic(
                            x[m:m + 1], q[e], scale[e] if block else scale,
                            None if zero is None else (zero[e] if block else zero), block)[0]
                            for e in idx[m]]) for m in range(5)])
                        exact = np.einsum("mk,mskn->msn", x.astype(np.float64), deq[idx])
                    else:
                        got = decode_outputs(self.infer(make_infer_request(
                            name, [("hidden", x)])))["projected"]
                        want = same_arithmetic(x, q, scale, zero, block)
                        exact = x.astype(np.float64) @ deq
                    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(
                        want).max())
                    rel = np.abs(got - exact).max() / np.abs(exact).max()
                    self.assertLess(rel, 3e-2, "8-bit activations against the exact path")
                    self.assertGreater(rel, 0.0)

    def test_config_reports_the_setting_and_http_equals_grpc(self):
        rng = np.random.default_rng(421)
        model, *_ = self.quantized(4, True, 16, True, rng)
        self.load_model("l4_reported", model)
        self.load_model("l0_reported", model, config="")
        for name, level in (("l4_reported", "4"), ("l0_reported", "0")):
            config = self.stub.ModelConfig(pb2.ModelConfigRequest(name=name), timeout=10).config
            self.assertEqual(config.parameters["accuracy_level"].string_value, level)
        x = rng.standard_normal((3, K)).astype(np.float32)
        idx = np.array([[0, 1], [2, 3], [3, 0]], np.int64)
        inputs = [("tokens", x), ("routing", idx)]
        via_grpc = decode_outputs(self.infer(make_infer_request("l4_reported", inputs)))
        with HttpClient(self.server.http_url) as http:
            via_http = http.infer("l4_reported", inputs)
        self.assertEqual(np.asarray(via_http["expert_out"]).tobytes(),
                         via_grpc["expert_out"].tobytes())
        exact = decode_outputs(self.infer(make_infer_request("l0_reported", inputs)))
        self.assertFalse(np.array_equal(exact["expert_out"], via_grpc["expert_out"]))

    def test_a_quantized_layer_is_the_same_arithmetic_token_by_token(self):
        """The whole layer at level 4 against an independent float64 evaluation of the same
        arithmetic (make_moe_layer.evaluate at accuracy_level 4: both projections on
        activations quantized per block of 16), each token to a bound derived from it: FP32
        roundings (1e-5 of the token's largest output), plus, for each activation of the
        down projection whose scaled value lies within 1e-3 of a rounding boundary (where
        FP32 and float64 intermediates may round it apart), one step of it times the
        weight it meets. The exact path (level 0) is outside FP32's part nearly everywhere."""
        for bits, block in ((4, 16), (8, 0)):
            with self.subTest(bits=bits, block=block):
                self.check_layer(bits, block)

    def check_layer(self, bits, block):
        model = make_moe_layer.quantize_layer(make_moe_layer.layer_model(
            make_moe_layer.layer_graph(64, 32, 8, 2, "fp32", routing="topk_softmax", seed=4)),
            bits, block)
        name = f"l4_layer_{bits}_{block}"
        self.load_model(name, model)
        self.load_model(name + "_l0", model, config="")
        x = np.random.default_rng(422).uniform(-1, 1, (6, 64)).astype(np.float32)
        got = decode_outputs(self.infer(make_infer_request(name, [("x", x)])))["out"]
        exact = decode_outputs(self.infer(make_infer_request(name + "_l0", [("x", x)])))["out"]
        values = {}
        want = make_moe_layer.evaluate(model, {"x": x}, accuracy_level=4, values=values)["out"]
        bound = self.layer_bound(values, want, 16 if block else 32)
        for t in range(x.shape[0]):
            err = np.abs(got[t] - want[t])
            self.assertTrue(np.all(err <= bound[t]), f"token {t}: {err.max()} over "
                            f"{bound[t][np.argmax(err - bound[t])]}")
        # Level 4 was used: the exact path is outside FP32's part of the bound nearly
        # everywhere, where the answer is inside all of it.
        fp32 = 1e-5 * np.abs(want).max(axis=1, keepdims=True)
        self.assertGreater(np.mean(np.abs(exact - want) > fp32), 0.9)
        rel = np.abs(got - exact).max() / np.abs(exact).max()
        self.assertLess(rel, 3e-2)
        config = self.stub.ModelConfig(pb2.ModelConfigRequest(name=name), timeout=10).config
        self.assertEqual(config.parameters["accuracy_level"].string_value, "4")

    @staticmethod
    def layer_bound(values, want, block):
        """Per token and output: FP32's roundings, and one step of each down-projection
        activation that lies near a rounding boundary times the largest weight it meets."""
        bound = 1e-5 * np.abs(want).max(axis=1, keepdims=True) * np.ones_like(want)
        a = values["a2"].astype(np.float32)  # [M * S, I], as the server holds it
        ids, w, w_d = values["ids2"].reshape(-1), values["w"].reshape(-1), values["W_d"]
        s = values["w"].shape[1]
        q, scale = make_moe_layer.qm.quantize_activations(a, block)
        for row in range(a.shape[0]):
            for b in range(scale.shape[1]):
                cols = slice(b * block, (b + 1) * block)
                inv = np.float32(127) / np.float32(scale[row, b] * 127) if scale[row, b] else 0
                scaled = a[row, cols].astype(np.float64) * inv
                near = np.abs(np.abs(scaled - np.floor(scaled)) - 0.5) < 1e-3
                for r in np.nonzero(near)[0]:
                    weights = np.abs(w_d[ids[row], b * block + r])  # [K]
                    bound[row // s] += abs(w[row]) * scale[row, b] * weights
        return bound

    def test_other_levels_and_unquantized_weights_are_refused_by_name(self):
        rng = np.random.default_rng(423)
        quantized, *_ = self.quantized(4, True, 16, True, rng)
        fp32 = model_bytes(grouped_graph("m", rng.standard_normal((G, K, N)).astype(np.float32),
                                         S))
        cases = [
            (quantized, LEVEL_4.replace('"4"', '"3"'), "accuracy_level"),
            (quantized, '{"parameters": {"accuracy_level": {"string_value": "8"}}}',
             "accuracy_level"),
            (fp32, LEVEL_4, "applies to quantized weights"),
        ]
        for model, config, message in cases:
            with self.subTest(config=config, message=message):
                with self.assertRaises(grpc.RpcError) as ctx:
                    self.load_model("refused_level", model, config=config)
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(message, ctx.exception.details())
                self.assert_server_still_serves()


if __name__ == "__main__":
    unittest.main()
