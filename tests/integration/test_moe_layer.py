"""Mixture-of-experts layer models (issue 41): graphs written by scripts/make_moe_layer.py, in
every required form (gate/up fused or separate; routing given, softmax then top-k, top-k then
softmax; FP32, FP16, BF16 and INT4 weights; a shared expert; GELU), served from a repository and
from an upload. Each answer, through gRPC and HTTP, is within the layer's bound of the graph
evaluated in float64 (max|out - ref| / max|ref|: 1e-4 FP32, 5e-3 FP16, 3e-2 BF16). Metadata and
config describe the layer; out-of-range ids are refused; graphs that do not fit are refused at
load with a message naming the first node that does not fit; the server serves on."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

import grpc
import numpy as np
import onnx
from onnx import helper

from gemmserve_client import decode_outputs, make_infer_request, pb2
from gemmserve_client.http import HttpClient
from gemmserve_testing import hf_checkpoint
from gemmserve_testing.base import GemmServeTestCase
from gemmserve_testing.process import metric_sum
from gemmserve_testing.references import to_float, to_wire

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
    "make_moe_layer", os.path.join(_ROOT, "scripts", "make_moe_layer.py"))
layer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layer)

K, I, G, S = 64, 40, 8, 2
BOUND = {"FP32": 1e-4, "FP16": 5e-3, "BF16": 3e-2}
_REPO = tempfile.mkdtemp(prefix="gemmserve-moe-layer-")
# name -> (datatype, model, make_moe_layer options)
MODELS = {}
FORMS = [
    ("fused_given_fp32", "FP32", dict(gate_up="fused", routing="given")),
    ("separate_given_fp16", "FP16", dict(gate_up="separate", routing="given")),
    ("fused_softmax_fp32", "FP32", dict(gate_up="fused", routing="softmax_topk", normalise=True)),
    ("separate_softmax_bf16", "BF16", dict(gate_up="separate", routing="softmax_topk")),
    ("fused_topk_bf16", "BF16", dict(gate_up="fused", routing="topk_softmax")),
    ("separate_topk_fp16", "FP16", dict(gate_up="separate", routing="topk_softmax")),
    ("shared_gelu_fp32", "FP32", dict(gate_up="fused", routing="softmax_topk",
                                      activation="gelu", shared_expert=True)),
    ("fused_softmax_int4", "FP32", dict(gate_up="fused", routing="softmax_topk", bits=4)),
    ("separate_given_int8_bf16", "BF16", dict(gate_up="separate", routing="given", bits=8)),
]


def _model(datatype, options):
    options = dict(options)
    bits = options.pop("bits", 0)
    model = layer.layer_model(layer.layer_graph(K, I, G, S, datatype.lower(), seed=41, **options))
    if bits:
        model = layer.quantize_layer(model, bits, block_size=16)
    return model


_spec = importlib.util.spec_from_file_location(
    "make_model_repository", os.path.join(_ROOT, "scripts", "make_model_repository.py"))
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)
example.moe_layer_model(_REPO, "example_moe_layer", example.BATCHING)

for _name, _dt, _options in FORMS:
    _model_proto = _model(_dt, _options)
    _path = os.path.join(_REPO, _name, "1", "model.onnx")
    os.makedirs(os.path.dirname(_path))
    onnx.save(_model_proto, _path)
    MODELS[_name] = (_dt, _model_proto, _options)


# One layer of a tiny Hugging Face checkpoint per family, converted by the script's command.
HF = {}
for _family, _dt, _norm in (("olmoe", "FP32", True), ("mixtral", "BF16", False)):
    _dir = tempfile.mkdtemp(prefix="gemmserve-hf-")
    _weights = hf_checkpoint.tiny_checkpoint(_dir, _family, K, I, G, S, norm=_norm)
    subprocess.run([sys.executable, os.path.join(_ROOT, "scripts", "make_moe_layer.py"),
                    "--out", os.path.join(_REPO, f"hf_{_family}", "1", "model.onnx"),
                    "--checkpoint", _dir, "--layer", "1", "--dtype", _dt.lower()],
                   check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(_dir)
    HF[f"hf_{_family}"] = (_family, _dt, _norm, _weights)


def tearDownModule():
    shutil.rmtree(_REPO, ignore_errors=True)


def _router(model):
    init = next((t for t in model.graph.initializer if t.name == "W_r"), None)
    return None if init is None else layer._initializer(init)


def _inputs(model, datatype, options, m, rng):
    """Wire inputs {name: (array, datatype)} and float64 feeds; computed routing is kept
    clear of near-ties (a top-S gap under 1e-3), which a rounding could flip."""
    w_r = _router(model)
    x = to_wire(datatype, rng.uniform(-1, 1, (m, K)))
    if w_r is not None:
        for row in range(m):
            while True:
                logits = np.sort(to_float(datatype, x[row]) @ w_r)[::-1]
                if logits[S - 1] - logits[S] > 1e-3:
                    break
                x[row] = to_wire(datatype, rng.uniform(-1, 1, K))
    wire = {"x": (x, datatype)}
    if options["routing"] == "given":
        ids = np.stack([rng.permutation(G)[:S] for _ in range(m)]).astype(np.int64)
        wire["ids"] = (ids, "INT64")
        wire["w"] = (to_wire(datatype, rng.uniform(0, 1, (m, S))), datatype)
    feeds = {name: (to_float(dt, a) if dt != "INT64" else a) for name, (a, dt) in wire.items()}
    return wire, feeds


def _request(name, wire):
    return make_infer_request(name, [(n, a, dt) for n, (a, dt) in wire.items()])


class MoeLayerTest(GemmServeTestCase):
    server_flags = (f"--model_repository={_REPO}",)

    def assert_close(self, got, model, feeds, datatype, what):
        ref = layer.evaluate(model, feeds)["out"]
        got = to_float(datatype, got)
        self.assertEqual(got.shape, ref.shape, what)
        err = np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30)
        self.assertLessEqual(err, BOUND[datatype], f"{what}: max error {err:.3g} of max|ref|")

    def test_every_form_matches_the_graph_in_float64(self):
        rng = np.random.default_rng(410)
        for name, (dt, model, options) in MODELS.items():
            for m in (1, 4, 37):
                with self.subTest(model=name, m=m):
                    wire, feeds = _inputs(model, dt, options, m, rng)
                    got = decode_outputs(self.infer(_request(name, wire)))["out"]
                    self.assert_close(got, model, feeds, dt, f"{name} m={m}")

    def test_the_example_repository_layer_serves(self):
        """deploy/run.sh's moe_layer (scripts/make_model_repository.py): routed in the graph."""
        model = onnx.load(os.path.join(_REPO, "example_moe_layer", "1", "model.onnx"))
        md = self.stub.ModelMetadata(pb2.ModelMetadataRequest(name="example_moe_layer"),
                                     timeout=10)
        self.assertEqual([(t.name, list(t.shape)) for t in md.inputs], [("x", [-1, 512])])
        rng = np.random.default_rng(417)
        x = rng.uniform(-1, 1, (3, 512)).astype(np.float32)
        got = decode_outputs(self.infer(_request("example_moe_layer", {"x": (x, "FP32")})))["out"]
        self.assert_close(got, model, {"x": x.astype(np.float64)}, "FP32", "example")

    def test_hugging_face_layers_serve_as_their_blocks_compute(self):
        """A layer of a safetensors checkpoint (OLMoE's names, FP32; Mixtral's, BF16), converted
        by scripts/make_moe_layer.py, against the Hugging Face block computed in float64."""
        rng = np.random.default_rng(418)
        for name, (family, dt, norm, weights) in HF.items():
            with self.subTest(name):
                x = to_wire(dt, rng.uniform(-1, 1, (6, K)))
                for row in range(6):  # clear of near-ties, which a rounding could flip
                    while np.diff(np.sort(to_float(dt, x[row]) @ weights["router"].T)
                                  [::-1][S - 1:S + 1])[0] > -1e-3:
                        x[row] = to_wire(dt, rng.uniform(-1, 1, K))
                got = decode_outputs(self.infer(_request(name, {"x": (x, dt)})))["out"]
                ref = hf_checkpoint.hf_block(weights, to_float(dt, x), S, norm, family)
                err = np.max(np.abs(to_float(dt, got) - ref)) / np.max(np.abs(ref))
                self.assertLessEqual(err, BOUND[dt], f"{name}: {err:.3g}")

    def test_http_answers_equal_grpc_byte_for_byte(self):
        rng = np.random.default_rng(411)
        for name in ("separate_softmax_bf16", "separate_given_fp16"):
            dt, model, options = MODELS[name]
            wire, feeds = _inputs(model, dt, options, 5, rng)
            via_grpc = decode_outputs(self.infer(_request(name, wire)))["out"]
            with HttpClient(self.server.http_url) as http:
                via_http = http.infer(name, [(n, a, d) for n, (a, d) in wire.items()])["out"]
            self.assertEqual(np.asarray(via_http).tobytes(), via_grpc.tobytes(), name)
            self.assert_close(via_grpc, model, feeds, dt, name)

    def test_metadata_and_config_describe_the_layer(self):
        md = self.stub.ModelMetadata(pb2.ModelMetadataRequest(name="fused_given_fp32"), timeout=10)
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in md.inputs],
                         [("x", "FP32", [-1, K]), ("ids", "INT64", [-1, S]),
                          ("w", "FP32", [-1, S])])
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in md.outputs],
                         [("out", "FP32", [-1, K])])
        md = self.stub.ModelMetadata(pb2.ModelMetadataRequest(name="fused_topk_bf16"), timeout=10)
        self.assertEqual([(t.name, t.datatype) for t in md.inputs], [("x", "BF16")])
        expected = {
            "fused_softmax_fp32": dict(layer="moe_ffn", routing="softmax_topk", normalised="true",
                                       gate_up="fused", activation="silu", shared_expert="false"),
            "separate_topk_fp16": dict(routing="topk_softmax", normalised="false",
                                       gate_up="separate"),
            "shared_gelu_fp32": dict(activation="gelu", shared_expert="true", shared_i=str(I)),
            "fused_softmax_int4": dict(weights_layout="quantized", quantization="INT4",
                                       block_size="16"),
        }
        for name, want in expected.items():
            with self.subTest(name):
                config = self.stub.ModelConfig(pb2.ModelConfigRequest(name=name), timeout=10).config
                p = {k: v.string_value for k, v in config.parameters.items()}
                for key, value in dict(want, groups=str(G), k=str(K), i=str(I), s=str(S)).items():
                    self.assertEqual(p.get(key), value, key)
                self.assertGreater(int(p["weights_bytes"]), 0)

    def test_weight_bytes_metric_counts_each_chosen_expert_once(self):
        name = "fused_given_fp32"
        dt, model, options = MODELS[name]

        def read():
            return metric_sum(self.server.metrics_url, "gemmserve_weight_bytes_total", model=name)

        rng = np.random.default_rng(412)
        before = read()
        wire, _ = _inputs(model, dt, options, 3, rng)
        wire["ids"] = (np.array([[0, 3], [3, 0], [0, 3]], np.int64), "INT64")
        self.infer(_request(name, wire))
        per_expert = (K * 2 * I + I * K) * 4  # row-major or panels of whole columns: at least
        grown = read() - before
        self.assertGreaterEqual(grown, 2 * per_expert)
        self.assertLess(grown, 3 * per_expert)  # two experts read, not three or all

    def test_perf_drives_layer_models_with_fresh_valid_routing(self):
        """gemmserve-cli perf on a layer routed by the caller (its ids drawn in [0, G) from
        the "groups" parameter) and on one routed in the graph: every call answered."""
        cli = os.path.join(os.path.dirname(os.environ["GEMMSERVE_BIN"]), "gemmserve-cli")
        tmp = tempfile.mkdtemp(prefix="gemmserve-perf-layer-")
        self.addCleanup(shutil.rmtree, tmp, True)
        for name in ("fused_given_fp32", "fused_topk_bf16"):
            with self.subTest(name):
                out = os.path.join(tmp, f"{name}.json")
                run = subprocess.run([cli, f"--url={self.server.address}", "perf",
                                      f"--model={name}", "--rows=3", "--duration=0.3",
                                      "--warmup=0.1", "--timeout_ms=10000", "--request_pool=8",
                                      f"--json_out={out}"],
                                     capture_output=True, text=True, timeout=60)
                self.assertEqual(run.returncode, 0, run.stderr)
                with open(out) as f:
                    report = json.load(f)
                self.assertGreater(report["ok"], 0)
                self.assertEqual(report["errors"], {})
                self.assertEqual(report["distinct_requests"], 8)

    def test_out_of_range_ids_and_bad_shapes_are_refused(self):
        dt, model, options = MODELS["fused_given_fp32"]
        wire, _ = _inputs(model, dt, options, 2, np.random.default_rng(413))
        wire["ids"] = (np.array([[0, 1], [G, 0]], np.int64), "INT64")
        self.assert_rejected(_request("fused_given_fp32", wire),
                             grpc.StatusCode.INVALID_ARGUMENT, ["'ids'", "outside [0, G)"])
        wire["ids"] = (np.array([[0, 1, 2], [1, 2, 3]], np.int64), "INT64")
        self.assert_rejected(_request("fused_given_fp32", wire),
                             grpc.StatusCode.INVALID_ARGUMENT, ["ids"])
        wire, _ = _inputs(model, dt, options, 2, np.random.default_rng(414))
        wire["x"] = (np.zeros((2, K + 1), np.float32), "FP32")
        self.assert_rejected(_request("fused_given_fp32", wire),
                             grpc.StatusCode.INVALID_ARGUMENT, ["x"])

    def test_a_batch_of_concurrent_requests_each_gets_its_own_answer(self):
        dt, model, options = MODELS["fused_softmax_fp32"]
        self.load("batched_layer", config="dynamic_batching { max_queue_delay_microseconds: "
                                          "20000 }\n",
                  files={"1/model.onnx": model.SerializeToString()})
        rng = np.random.default_rng(415)
        cases = [_inputs(model, dt, options, m, rng) for m in (1, 3, 2, 5, 1, 4)]
        results = [None] * len(cases)

        def run(j):
            results[j] = decode_outputs(self.infer(_request("batched_layer", cases[j][0])))["out"]

        threads = [threading.Thread(target=run, args=(j,)) for j in range(len(cases))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for j, (wire, feeds) in enumerate(cases):
            self.assert_close(results[j], model, feeds, dt, f"request {j}")

    # ------------------------------------------------------------ bad graphs

    def _refused(self, model, *texts):
        with self.assertRaises(grpc.RpcError) as ctx:
            self.load("bad_layer", config="", files={"1/model.onnx": model.SerializeToString()})
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT,
                         ctx.exception.details())
        for text in texts:
            self.assertIn(text, ctx.exception.details())
        self.assert_server_still_serves()

    def _variant(self, edit, name="fused_softmax_fp32"):
        model = onnx.ModelProto()
        model.CopyFrom(MODELS[name][1])
        edit(model.graph)
        return model

    def _node(self, graph, output):
        return next(n for n in graph.node if output in n.output)

    def test_graphs_that_do_not_fit_are_refused_naming_the_node(self):
        def tanh(graph):
            self._node(graph, "sig").op_type = "Tanh"

        def keepdims(graph):
            node = self._node(graph, "out")
            del node.attribute[:]
            node.attribute.extend([helper.make_attribute("keepdims", 1)])

        def extra(graph):
            graph.node.extend([helper.make_node("Relu", ["x"], ["unused"], name="stray")])

        def wrong_s(graph):
            init = next(t for t in graph.initializer if t.name == "back")
            init.CopyFrom(onnx.numpy_helper.from_array(np.array([-1, S + 1, K], np.int64), "back"))

        def wrong_down(graph):
            init = next(t for t in graph.initializer if t.name == "W_d")
            init.CopyFrom(onnx.numpy_helper.from_array(np.zeros((G, I, K - 1), np.float32), "W_d"))

        def wrong_router(graph):
            init = next(t for t in graph.initializer if t.name == "W_r")
            init.CopyFrom(onnx.numpy_helper.from_array(np.zeros((K, G + 1), np.float32), "W_r"))

        def uneven_split(graph):
            node = self._node(graph, "g")
            del node.attribute[:]
            node.attribute.extend([helper.make_attribute("axis", 1),
                                   helper.make_attribute("num_outputs", 2)])

        cases = [(tanh, ["(Mul -> 'a')", "Mul(act(g), u)"]),
                 (keepdims, ["ReduceSum -> 'out'", "keepdims=0"]),
                 (extra, ["'stray' (Relu", "not part of the layer"]),
                 (wrong_s, ["TopK", "S=3"]),
                 (wrong_down, ["'W_d'", "[8,40,63]"]),
                 (wrong_router, ["router", "'W_r'"]),
                 (uneven_split, ["Split", "last axis"])]
        for edit, texts in cases:
            with self.subTest(edit.__name__):
                self._refused(self._variant(edit), *texts)

    def test_an_uploaded_layer_serves(self):
        dt, model, options = MODELS["separate_topk_fp16"]
        self.load("uploaded_layer", config="", files={"1/model.onnx": model.SerializeToString()})
        wire, feeds = _inputs(model, dt, options, 6, np.random.default_rng(416))
        got = decode_outputs(self.infer(_request("uploaded_layer", wire)))["out"]
        self.assert_close(got, model, feeds, dt, "uploaded")


if __name__ == "__main__":
    unittest.main()
