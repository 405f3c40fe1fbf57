#!/usr/bin/python3
"""scripts/make_moe_layer.py: every form of the layer graph, evaluated by the graph
interpreter, equals the mixture-of-experts block computed directly (a loop over tokens and
chosen experts, an independent formula); TopK's ties go to the lower index; an index out of
range is refused; the command writes a model that loads back."""
import os
import subprocess
import sys
import tempfile
import unittest
from math import erf

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "python_lib"))
import make_moe_layer as layer  # noqa: E402
from gemmserve_testing import hf_checkpoint  # noqa: E402

K, I, G, S, M = 12, 5, 6, 2, 7


def weights(model):
    return {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}


def direct(w, x, gate_up, activation, routing, normalise, shared, ids=None, rw=None):
    if routing != "given":
        logits = x @ w["W_r"]
        if routing == "softmax_topk":
            p = np.exp(logits - logits.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            ids = np.argsort(-p, axis=-1, kind="stable")[:, :S]
            rw = np.take_along_axis(p, ids, -1)
            if normalise:
                rw = rw / rw.sum(-1, keepdims=True)
        else:
            ids = np.argsort(-logits, axis=-1, kind="stable")[:, :S]
            v = np.take_along_axis(logits, ids, -1)
            rw = np.exp(v - v.max(-1, keepdims=True))
            rw /= rw.sum(-1, keepdims=True)
    out = np.zeros((x.shape[0], K))
    for m in range(x.shape[0]):
        for s in range(S):
            e = ids[m, s]
            if gate_up == "fused":
                gu = x[m] @ w["W_gu"][e]
                g, u = gu[:I], gu[I:]
            else:
                g, u = x[m] @ w["W_g"][e], x[m] @ w["W_u"][e]
            act = g / (1 + np.exp(-g)) if activation == "silu" else \
                np.array([0.5 * v * (1 + erf(v / np.sqrt(2))) for v in g])
            out[m] += rw[m, s] * ((act * u) @ w["W_d"][e])
    if shared:
        sg, su = x @ w["Ws_g"], x @ w["Ws_u"]
        out += ((sg / (1 + np.exp(-sg))) * su) @ w["Ws_d"]
    return out


class LayerGraphTest(unittest.TestCase):
    def test_every_form_is_the_moe_block(self):
        rng = np.random.default_rng(7)
        x = rng.standard_normal((M, K))
        forms = [(gu, act, routing, norm, shared)
                 for gu in ("fused", "separate") for act in ("silu", "gelu")
                 for routing in ("given", "softmax_topk", "topk_softmax")
                 for norm in (False, True) for shared in (False, True)
                 if not (norm and routing != "softmax_topk")]
        self.assertEqual(len(forms), 32)
        for gu, act, routing, norm, shared in forms:
            with self.subTest(gate_up=gu, activation=act, routing=routing, normalise=norm,
                              shared=shared):
                model = layer.layer_model(layer.layer_graph(
                    K, I, G, S, gate_up=gu, activation=act, routing=routing, normalise=norm,
                    shared_expert=shared, seed=3))
                feeds = {"x": x}
                ids = rw = None
                if routing == "given":
                    ids = rng.integers(0, G, (M, S))
                    rw = rng.random((M, S))
                    feeds.update(ids=ids, w=rw)
                got = layer.evaluate(model, feeds)["out"]
                want = direct(weights(model), x, gu, act, routing, norm, shared, ids, rw)
                self.assertEqual(got.shape, (M, K))
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)

    def test_topk_ties_go_to_the_lower_index(self):
        model = layer.layer_model(layer.layer_graph(K, I, G, S, routing="topk_softmax"))
        router = next(t for t in model.graph.initializer if t.name == "W_r")
        w_r = numpy_helper.to_array(router).copy()
        w_r[:, :] = 0  # every logit ties
        router.CopyFrom(numpy_helper.from_array(w_r, "W_r"))
        graph = model.graph
        graph.output.append(onnx.helper.make_tensor_value_info("ids", onnx.TensorProto.INT64,
                                                               ["M", S]))
        got = layer.evaluate(model, {"x": np.ones((3, K))})
        np.testing.assert_array_equal(got["ids"], [[0, 1]] * 3)

    def test_an_index_out_of_range_is_refused_not_read(self):
        model = layer.layer_model(layer.layer_graph(K, I, G, S, routing="given"))
        with self.assertRaisesRegex(ValueError, "out of range"):
            layer.evaluate(model, {"x": np.ones((1, K)), "ids": np.array([[0, G]]),
                                   "w": np.ones((1, S))})

    def test_the_command_writes_a_model_that_loads_back(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "moe_layer", "1", "model.onnx")
            subprocess.run([sys.executable, layer.__file__, "--out", path, "--k", "16", "--i",
                            "8", "--g", "4", "--dtype", "fp16", "--gate_up", "separate"],
                           check=True, capture_output=True)
            model = onnx.load(path)
            self.assertEqual(model.opset_import[0].version, 29)
            self.assertEqual(numpy_helper.to_array(
                next(t for t in model.graph.initializer if t.name == "W_g")).dtype, np.float16)
            out = layer.evaluate(model, {"x": np.ones((2, 16))})["out"]
            self.assertEqual(out.shape, (2, 16))
            self.assertTrue(np.all(np.isfinite(out)))


class CheckpointTest(unittest.TestCase):
    """Hugging Face checkpoints in safetensors: one layer of OLMoE's and of Mixtral's names
    converted, evaluated as a graph, equals the Hugging Face block computed directly."""

    def test_a_layer_of_each_family_is_the_hugging_face_block(self):
        x = np.random.default_rng(9).standard_normal((5, K))
        for family, norm in (("olmoe", False), ("olmoe", True), ("mixtral", False)):
            with self.subTest(family=family, norm=norm), tempfile.TemporaryDirectory() as d:
                hf = hf_checkpoint.tiny_checkpoint(d, family, K, I, G, S, norm=norm)
                weights, found, g = layer.hf_layer_weights(d, 1)
                self.assertEqual((found, g), (family, G))
                routing = layer.HF_FAMILIES[family]["routing"]
                model = layer.layer_model(layer.layer_graph(
                    K, I, G, S, gate_up="separate", routing=routing, normalise=norm,
                    weights=weights))
                got = layer.evaluate(model, {"x": x})["out"]
                want = hf_checkpoint.hf_block(hf, x, S, norm, family)
                np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)

    def test_all_layers_writes_each_moe_layer_as_its_block_and_sharded_too(self):
        """--all-layers: one model per layer of the checkpoint (its two MoE layers), each the
        Hugging Face block of that layer; with --shards, a router and shards per layer."""
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_moe_layer.py")
        x = np.random.default_rng(10).standard_normal((4, K))
        with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as out:
            checkpoint = os.path.join(d, "ckpt")
            os.makedirs(checkpoint)
            blocks = [hf_checkpoint.tiny_checkpoint(checkpoint, "olmoe", K, I, G, S, layer=n)
                      for n in (0, 1)]
            self.assertEqual(layer.hf_moe_layers(checkpoint), [0, 1])
            subprocess.run([sys.executable, script, "--checkpoint", checkpoint, "--all-layers",
                            "--out", os.path.join(out, "plain"), "--name", "olmoe"],
                           check=True, capture_output=True)
            for n in (0, 1):
                model = onnx.load(os.path.join(out, "plain", f"olmoe_l{n}", "1", "model.onnx"))
                np.testing.assert_allclose(layer.evaluate(model, {"x": x})["out"],
                                           hf_checkpoint.hf_block(blocks[n], x, S, False,
                                                                  "olmoe"), rtol=1e-6, atol=1e-6)
            subprocess.run([sys.executable, script, "--checkpoint", checkpoint, "--all-layers",
                            "--out", os.path.join(out, "sharded"), "--name", "olmoe", "--shards",
                            "2", "--shard_addresses", "a:1,b:1"], check=True, capture_output=True)
            for part in ("router", "shard0", "shard1"):
                self.assertEqual(sorted(os.listdir(os.path.join(out, "sharded", part))),
                                 ["olmoe_l0", "olmoe_l1"], part)
            refused = subprocess.run([sys.executable, script, "--all-layers", "--out", out],
                                     capture_output=True, text=True)
            self.assertNotEqual(refused.returncode, 0)
            self.assertIn("--all-layers needs --checkpoint", refused.stderr)

    def test_the_command_reads_s_and_normalisation_from_config_json(self):
        with tempfile.TemporaryDirectory() as d:
            hf = hf_checkpoint.tiny_checkpoint(d, "olmoe", K, I, G, 3, norm=True)
            out = os.path.join(d, "repo", "l1", "1", "model.onnx")
            subprocess.run([sys.executable, layer.__file__, "--out", out, "--checkpoint", d,
                            "--layer", "1"], check=True, capture_output=True)
            model = onnx.load(out)
            x = np.random.default_rng(4).standard_normal((3, K))
            np.testing.assert_allclose(layer.evaluate(model, {"x": x})["out"],
                                       hf_checkpoint.hf_block(hf, x, 3, True, "olmoe"),
                                       rtol=1e-6, atol=1e-6)  # weights rounded to FP32

    def test_shards_add_up_to_the_layer_and_the_router_holds_no_experts(self):
        """write_sharded's shards (fused or separate gate/up, INT4 or not) on the whole
        layer's ids, each given only the pairs of its experts (the rest weighted 0), sum to
        the unsharded layer; the router's model keeps its routing and shared expert and
        names the routed experts' weights by shape only."""
        for gate_up, bits in (("fused", 0), ("separate", 0), ("fused", 4)):
            with self.subTest(gate_up=gate_up, bits=bits), tempfile.TemporaryDirectory() as tmp:
                whole = layer.layer_model(layer.layer_graph(K, I, G, S, "fp32", gate_up,
                                                            routing="given", shared_expert=True))
                served = layer.quantize_layer(whole, bits, 4) if bits else whole
                text = layer.write_sharded(tmp, "m", whole, 3, ["a:1", "b:1|c:1", "d:1"], bits, 4)
                self.assertEqual(text, "0:2=a:1;2:4=b:1|c:1;4:6=d:1")
                rng = np.random.default_rng(5)
                x = rng.standard_normal((M, K))
                ids = np.stack([rng.permutation(G)[:S] for _ in range(M)])
                w = rng.uniform(0, 1, (M, S))
                want = layer.evaluate(served, {"x": x, "ids": ids, "w": w})["out"]
                total = np.zeros((M, K))
                for j, (first, last) in enumerate(layer.expert_ranges(G, 3)):
                    shard = onnx.load(os.path.join(tmp, f"shard{j}", "m", "1", "model.onnx"))
                    mine = (ids >= first) & (ids < last)
                    total += layer.evaluate(shard, {"x": x, "ids": np.where(mine, ids - first, 0),
                                                    "w": np.where(mine, w, 0.0)})["out"]
                    with open(os.path.join(tmp, f"shard{j}", "m", "config.pbtxt")) as f:
                        config = f.read()
                    self.assertIn(f'string_value: "{first}:{last}"', config)
                router = onnx.load(os.path.join(tmp, "router", "m", "1", "model.onnx"),
                                   load_external_data=False)
                stubs = [t for t in router.graph.initializer
                         if t.data_location == onnx.TensorProto.EXTERNAL]
                self.assertTrue(stubs)
                for t in stubs:
                    self.assertTrue(t.name.startswith(("W_gu", "W_g", "W_u", "W_d")), t.name)
                    self.assertEqual(t.external_data[0].value, layer.ON_SHARDS)
                # The shared expert is the router's: the shards' sum lacks exactly it (the
                # layer with every routing weight 0).
                shared = layer.evaluate(served, {"x": x, "ids": ids, "w": np.zeros_like(w)})
                np.testing.assert_allclose(total, want - shared["out"], rtol=1e-9, atol=1e-9)

    def test_bad_checkpoints_are_refused_by_name(self):
        with tempfile.TemporaryDirectory() as d:
            hf_checkpoint.tiny_checkpoint(d, "mixtral", K, I, G, S)
            with self.assertRaisesRegex(ValueError, "no layer 7 router"):
                layer.hf_layer_weights(d, 7)
            path = os.path.join(d, "model-00001-of-00002.safetensors")
            with open(path, "r+b") as f:  # a header length past the file
                f.write((1 << 40).to_bytes(8, "little"))
            with self.assertRaisesRegex(ValueError, "header of"):
                layer.open_checkpoint(d)
            with open(path, "r+b") as f:
                f.write((10).to_bytes(8, "little"))
            with self.assertRaises(ValueError):  # ten bytes of a JSON header: not JSON
                layer.open_checkpoint(d)


if __name__ == "__main__":
    unittest.main()
