#!/usr/bin/python3
"""Writes a mixture-of-experts layer as an ONNX graph of opset-29 operators (issue 41), and
evaluates such a graph in float64 as the reference the served layer is judged against.

The forms (issue 41, "The model"):
  - gate/up fused (one GroupedMatMul to [M, S, 2I], Split) or separate (two GroupedMatMuls);
  - activation SiLU(g) * u (Mul(Mul(g, Sigmoid(g)), u)) or Gelu(g) * u;
  - down: Reshape to [M*S, I] and [M*S, 1], GroupedMatMul, Reshape to [M, S, K];
  - combine: ReduceSum(Mul(y3, Unsqueeze(w, [2])), axes=[1], keepdims=0);
  - routing given (inputs x, ids, w) or computed from a router W_r [K, G]: softmax_topk
    (Softmax, TopK, optionally renormalised) or topk_softmax (TopK, Softmax);
  - optionally a shared expert added to the output.
Weights are seeded random values of FP32, FP16 or BF16; `quantize_layer` (--bits) keeps the
expert weights as DequantizeLinear of INT8/INT4 (UINT8/UINT4 with --asymmetric), per column or in
blocks along K, as scripts/quantize_model.py does for one-node models.

  /usr/bin/python3 scripts/make_moe_layer.py --out repo/moe_layer/1/model.onnx \\
      --k 64 --i 32 --g 8 --s 2 --routing softmax_topk --gate_up fused
  /usr/bin/python3 scripts/make_moe_layer.py --out repo/olmoe_l3/1/model.onnx \\
      --checkpoint ~/OLMoE-1B-7B-0924 --layer 3 --dtype bf16

`--all-layers` (with --checkpoint) writes every mixture-of-experts layer of the checkpoint, one
model each (`--name` + `_l<index>`), into the model repository `--out` (with `--shards`, into
its router/ and shard<j>/ repositories): a real model has 16 to 61.

From a Hugging Face checkpoint (safetensors, read by the format's spec with numpy): OLMoE,
Qwen-MoE and DeepSeek names (`mlp.experts.{e}.{gate,up,down}_proj.weight`, `mlp.gate.weight`,
`mlp.shared_experts.*`: softmax then top-k) and Mixtral names
(`block_sparse_moe.experts.{e}.w1/w3/w2.weight`, `block_sparse_moe.gate.weight`: top-k then
softmax); Linear weights are stored [out, in] and transposed.

Sharded by expert (issue 53): `--shards N --shard_addresses A0,A1|A1b,...` makes `--out` a
directory holding `router/` and `shard0/` ... `shard<N-1>/`, each a model repository with the
model `--name`: shard j holds experts [j*G/N, (j+1)*G/N) in the caller-routed form
(config parameter expert_range), the router the routing and the shared expert and lists its
shards (parameter shards; `|` between one shard's replicas). Its model.onnx names the routed
experts' weights by shape only (external data "experts_on_shards", never read). With the same
--seed or checkpoint, the sharded layer is the unsharded one.

  /usr/bin/python3 scripts/make_moe_layer.py --out /srv/moe --shards 2 \
      --shard_addresses dns:///moe-shard-0:8001,dns:///moe-shard-1:8001 --g 64 --s 8

Python: `layer_graph(...)` returns the onnx.GraphProto; `evaluate(model, feeds)` the float64
outputs of any graph of the operators above; `shard_models(...)` the sharded models.
"""
import argparse
import json
import os
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quantize_model as qm  # noqa: E402

# Value types by name: (numpy type the values are drawn in, ONNX type).
TYPES = {"fp32": (np.float32, TensorProto.FLOAT), "fp16": (np.float16, TensorProto.FLOAT16),
         "bf16": (np.float32, TensorProto.BFLOAT16)}
_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}
# The expert weights quantize_layer may quantize (the router stays in T).
EXPERT_WEIGHTS = ("W_gu", "W_g", "W_u", "W_d", "Ws_g", "Ws_u", "Ws_d")


def _const(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _values(name, values, onnx_type):
    """An initializer of the float type `onnx_type` (BF16 as raw bits)."""
    if onnx_type == TensorProto.BFLOAT16:
        return qm.raw_tensor(name, onnx_type, values.shape, qm.value_bytes(values, onnx_type))
    dtype = np.float32 if onnx_type == TensorProto.FLOAT else np.float16
    return numpy_helper.from_array(np.asarray(values).astype(dtype), name)


def _experts(rng, prefix, g, k, n, t, scale):
    return _values(prefix, rng.standard_normal((g, k, n)) * scale, t)


def layer_graph(k, i, g, s, dtype=np.float32, gate_up="fused", activation="silu",
                routing="softmax_topk", normalise=False, shared_expert=False, seed=1,
                index_type=TensorProto.INT64, weights=None):
    """The layer as a graph: inputs x [M, K] (and ids [M, S], w [M, S] when routing is
    "given"), output `out` [M, K]. `weights` (a checkpoint's, see hf_layer_weights): arrays
    by name, W_r [K, G], W_g and W_u [G, K, I], W_d [G, I, K], and Ws_g, Ws_u [K, I_s],
    Ws_d [I_s, K] for a shared expert; without them, seeded random values."""
    rng = np.random.default_rng(seed)
    given = weights or {}

    def draw(name, shape, scale):
        return np.asarray(given[name], np.float64) if name in given else \
            rng.standard_normal(shape) * scale
    t = TYPES[dtype][1] if isinstance(dtype, str) else _ONNX[np.dtype(dtype)]
    scale = 1.0 / np.sqrt(k)
    nodes, inits = [], []
    inputs = [helper.make_tensor_value_info("x", t, ["M", k])]
    if routing == "given":
        inputs += [helper.make_tensor_value_info("ids", index_type, ["M", s]),
                   helper.make_tensor_value_info("w", t, ["M", s])]
    else:
        inits.append(_values("W_r", draw("W_r", (k, g), scale), t))
        inits.append(_const("k_top", [s]))
        nodes.append(helper.make_node("MatMul", ["x", "W_r"], ["logits"], name="router"))
        if routing == "softmax_topk":
            nodes.append(helper.make_node("Softmax", ["logits"], ["p"], axis=-1))
            top = "w_raw" if normalise else "w"
            nodes.append(helper.make_node("TopK", ["p", "k_top"], [top, "ids"], axis=-1))
            if normalise:
                inits.append(_const("last_axis", [-1]))
                nodes.append(helper.make_node("ReduceSum", ["w_raw", "last_axis"], ["w_sum"],
                                              keepdims=1))
                nodes.append(helper.make_node("Div", ["w_raw", "w_sum"], ["w"]))
        elif routing == "topk_softmax":
            nodes.append(helper.make_node("TopK", ["logits", "k_top"], ["v", "ids"], axis=-1))
            nodes.append(helper.make_node("Softmax", ["v"], ["w"], axis=-1))
        else:
            raise ValueError(f"routing {routing!r}")
    if gate_up == "fused":
        if "W_g" in given:
            inits.append(_values("W_gu", np.concatenate([given["W_g"], given["W_u"]], -1), t))
        else:
            inits.append(_experts(rng, "W_gu", g, k, 2 * i, t, scale))
        nodes.append(helper.make_node("GroupedMatMul", ["x", "W_gu", "ids"], ["gu"]))
        nodes.append(helper.make_node("Split", ["gu"], ["g", "u"], axis=-1, num_outputs=2))
    else:
        inits += [_values("W_g", draw("W_g", (g, k, i), scale), t),
                  _values("W_u", draw("W_u", (g, k, i), scale), t)]
        nodes.append(helper.make_node("GroupedMatMul", ["x", "W_g", "ids"], ["g"]))
        nodes.append(helper.make_node("GroupedMatMul", ["x", "W_u", "ids"], ["u"]))
    if activation == "silu":
        nodes.append(helper.make_node("Sigmoid", ["g"], ["sig"]))
        nodes.append(helper.make_node("Mul", ["g", "sig"], ["act"]))
    else:
        nodes.append(helper.make_node("Gelu", ["g"], ["act"]))
    nodes.append(helper.make_node("Mul", ["act", "u"], ["a"]))
    inits += [_values("W_d", draw("W_d", (g, i, k), 1.0 / np.sqrt(i)), t),
              _const("rows_i", [-1, i]), _const("rows_1", [-1, 1]), _const("back", [-1, s, k]),
              _const("axis_2", [2]), _const("axis_1", [1])]
    nodes += [helper.make_node("Reshape", ["a", "rows_i"], ["a2"]),
              helper.make_node("Reshape", ["ids", "rows_1"], ["ids2"]),
              helper.make_node("GroupedMatMul", ["a2", "W_d", "ids2"], ["y"]),
              helper.make_node("Reshape", ["y", "back"], ["y3"]),
              helper.make_node("Unsqueeze", ["w", "axis_2"], ["w3"]),
              helper.make_node("Mul", ["y3", "w3"], ["weighted"])]
    combined = "experts_out" if shared_expert else "out"
    nodes.append(helper.make_node("ReduceSum", ["weighted", "axis_1"], [combined], keepdims=0))
    if shared_expert:
        i_s = np.shape(given["Ws_g"])[1] if "Ws_g" in given else i
        for name, shape in (("Ws_g", (k, i_s)), ("Ws_u", (k, i_s)), ("Ws_d", (i_s, k))):
            inits.append(_values(name, draw(name, shape, 1 / np.sqrt(shape[0])), t))
        nodes += [helper.make_node("MatMul", ["x", "Ws_g"], ["sg"]),
                  helper.make_node("MatMul", ["x", "Ws_u"], ["su"]),
                  helper.make_node("Sigmoid", ["sg"], ["ssig"]),
                  helper.make_node("Mul", ["sg", "ssig"], ["sact"]),
                  helper.make_node("Mul", ["sact", "su"], ["sa"]),
                  helper.make_node("MatMul", ["sa", "Ws_d"], ["shared"]),
                  helper.make_node("Add", ["experts_out", "shared"], ["out"])]
    return helper.make_graph(nodes, "moe_layer", inputs,
                             [helper.make_tensor_value_info("out", t, ["M", k])],
                             initializer=inits)


def layer_model(graph):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 29)])
    model.ir_version = 8
    return model


def quantize_layer(model, bits=4, block_size=32, symmetric=True):
    """The model with its expert weights kept quantized: each becomes DequantizeLinear of
    integers and scales of T (and zero points when not symmetric), per output column
    (block_size 0) or in blocks of block_size rows of K."""
    graph = model.graph
    keep, dequantize = [], []
    for init in graph.initializer:
        if init.name not in EXPERT_WEIGHTS:
            keep.append(init)
            continue
        w = qm.read_float_tensor(init)
        q, scale, zero_point, _, axis, q_type = qm.quantize(
            w, init.data_type, bits, symmetric, min(block_size, w.shape[-2]))
        name = init.name
        keep += [qm.raw_tensor(name + "_q", q_type, w.shape, qm.pack_integers(q, q_type)),
                 qm.raw_tensor(name + "_scale", init.data_type, scale.shape,
                               qm.value_bytes(scale, init.data_type))]
        inputs = [name + "_q", name + "_scale"]
        if zero_point is not None:
            keep.append(qm.raw_tensor(name + "_zp", q_type, zero_point.shape,
                                      qm.pack_integers(zero_point, q_type)))
            inputs.append(name + "_zp")
        attrs = {"axis": axis}
        if block_size > 0:
            attrs["block_size"] = min(block_size, w.shape[-2])
        dequantize.append(helper.make_node("DequantizeLinear", inputs, [name],
                                           name=name + "_dequantize", **attrs))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep)
    del out.graph.node[:]
    out.graph.node.extend(dequantize + list(graph.node))
    return out


# ------------------------------------------------------------------ sharded by expert

# The routed experts' weights, as the unquantized graph names them.
ROUTED_EXPERTS = ("W_gu", "W_g", "W_u", "W_d")
# Where a router's graph says its experts' data is: nowhere it reads.
ON_SHARDS = "experts_on_shards"


def _whole_weights(graph):
    """The float64 arrays of an unquantized layer graph's initializers, by name, with a fused
    W_gu split into W_g and W_u (what layer_graph's `weights` takes)."""
    w = {init.name: qm.read_float_tensor(init) for init in graph.initializer
         if init.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)}
    if "W_gu" in w:
        i = w["W_gu"].shape[-1] // 2
        w["W_g"], w["W_u"] = w["W_gu"][..., :i], w["W_gu"][..., i:]
        del w["W_gu"]
    return w


def _stub(init):
    """An initializer's name, type and shape, its data on the shards."""
    t = TensorProto()
    t.name, t.data_type = init.name, init.data_type
    t.dims.extend(init.dims)
    t.data_location = TensorProto.EXTERNAL
    entry = t.external_data.add()
    entry.key, entry.value = "location", ON_SHARDS
    return t


def expert_ranges(g, shards):
    if not 1 <= shards <= g:
        raise SystemExit(f"--shards {shards}: expected 1 to G={g}")
    return [(j * g // shards, (j + 1) * g // shards) for j in range(shards)]


def shard_models(whole, shards, bits=0, block_size=32, symmetric=True):
    """(router model, [(first, last, shard model)]) of the unquantized layer model `whole`:
    the shards in the caller-routed form (ids INT64), without the shared expert; the router
    the whole graph (quantized as the layer would be) with its routed experts' weights as
    stubs."""
    graph = whole.graph
    w = _whole_weights(graph)
    g, k, i = w["W_g"].shape
    s = next(d.type.tensor_type.shape.dim[1].dim_value for d in graph.input if d.name == "w") \
        if any(d.name == "w" for d in graph.input) else \
        int(next(numpy_helper.to_array(t) for t in graph.initializer if t.name == "k_top")[0])
    t = graph.input[0].type.tensor_type.elem_type
    dtype = {v[1]: name for name, v in TYPES.items()}[t]
    fused = any(init.name == "W_gu" for init in graph.initializer)
    gelu = any(n.op_type == "Gelu" for n in graph.node)
    out = []
    for first, last in expert_ranges(g, shards):
        part = {name: w[name][first:last] for name in ("W_g", "W_u", "W_d")}
        model = layer_model(layer_graph(k, i, last - first, s, dtype,
                                        "fused" if fused else "separate",
                                        "gelu" if gelu else "silu", "given", weights=part))
        if bits:
            model = quantize_layer(model, bits, block_size, symmetric)
        out.append((first, last, model))
    router = quantize_layer(whole, bits, block_size, symmetric) if bits else whole
    routed = set(ROUTED_EXPERTS) | {f"{n}{x}" for n in ROUTED_EXPERTS
                                    for x in ("_q", "_scale", "_zp")}
    inits = [_stub(init) if init.name in routed else init for init in router.graph.initializer]
    stubbed = onnx.ModelProto()
    stubbed.CopyFrom(router)
    del stubbed.graph.initializer[:]
    stubbed.graph.initializer.extend(inits)
    return stubbed, out


def _config(name, parameters):
    lines = [f'name: "{name}"', 'backend: "onnxruntime"',
             "dynamic_batching { max_queue_delay_microseconds: 100 }"]
    lines += [f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}'
              for k, v in parameters.items()]
    return "\n".join(lines) + "\n"


def write_sharded(out_dir, name, whole, shards, addresses, bits=0, block_size=32,
                  symmetric=True):
    """Writes out_dir/router/<name>/ and out_dir/shard<j>/<name>/: the router and the shards'
    model repositories. `addresses`: one entry per shard, its replicas joined by '|'."""
    if len(addresses) != shards:
        raise SystemExit(f"--shard_addresses: {len(addresses)} entries for {shards} shards")
    router, parts = shard_models(whole, shards, bits, block_size, symmetric)
    for j, (first, last, model) in enumerate(parts):
        folder = os.path.join(out_dir, f"shard{j}", name)
        os.makedirs(os.path.join(folder, "1"), exist_ok=True)
        path = os.path.join(folder, "1", "model.onnx")
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="model.onnx.weights", size_threshold=1024)
        with open(os.path.join(folder, "config.pbtxt"), "w") as f:
            f.write(_config(name, {"expert_range": f"{first}:{last}"}))
    shards_text = ";".join(f"{first}:{last}={a}" for (first, last, _), a in zip(parts, addresses))
    folder = os.path.join(out_dir, "router", name)
    os.makedirs(os.path.join(folder, "1"), exist_ok=True)
    onnx.save_model(router, os.path.join(folder, "1", "model.onnx"))  # stubs stay stubs
    with open(os.path.join(folder, "config.pbtxt"), "w") as f:
        f.write(_config(name, {"shards": shards_text}))
    return shards_text


# ------------------------------------------------------------------ Hugging Face checkpoints

# safetensors element types gemmserve reads, as numpy types (BF16 as its bits).
_SAFETENSORS_TYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64}
# The largest JSON header read (the format's own limit is 100 MB).
_MAX_HEADER_BYTES = 100 << 20


class SafetensorsFile:
    """One .safetensors file by the format's spec: an 8-byte little-endian header length N, N
    bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}} (and "__metadata__"),
    then the raw little-endian data, offsets counted from its start. Tensors are read one at
    a time (memory-mapped), so a layer of a large checkpoint costs only that layer."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ValueError(f"{path}: shorter than a safetensors header")
            n = int.from_bytes(raw, "little")
            if n > _MAX_HEADER_BYTES:
                raise ValueError(f"{path}: header of {n} bytes (over {_MAX_HEADER_BYTES})")
            header = f.read(n)
        if len(header) != n:
            raise ValueError(f"{path}: header cut short")
        self.data_start = 8 + n
        self.size = os.path.getsize(path)
        self.entries = {k: v for k, v in json.loads(header).items() if k != "__metadata__"}

    def names(self):
        return list(self.entries)

    def array(self, name):
        """The tensor as float32 (BF16 widened exactly), checked against the file."""
        e = self.entries[name]
        dtype = _SAFETENSORS_TYPES.get(e["dtype"])
        if dtype is None:
            raise ValueError(f"{self.path}: '{name}' is {e['dtype']}; F32, F16, BF16 or F64 read")
        shape = tuple(int(d) for d in e["shape"])
        begin, end = (int(v) for v in e["data_offsets"])
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * np.dtype(dtype).itemsize or begin < 0 or \
                self.data_start + end > self.size:
            raise ValueError(f"{self.path}: '{name}' {shape} {e['dtype']} does not fit its "
                             f"offsets [{begin}, {end}) in a file of {self.size} bytes")
        values = np.memmap(self.path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r",
                           offset=self.data_start + begin, shape=shape)
        if e["dtype"] == "BF16":
            return (values.astype(np.uint32) << 16).view(np.float32)
        return np.asarray(values, np.float32)


def open_checkpoint(path):
    """{tensor name: SafetensorsFile} of a .safetensors file or of every one in a folder."""
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
    if not files:
        raise ValueError(f"{path}: no .safetensors file")
    where = {}
    for f in files:
        st = SafetensorsFile(f)
        for name in st.names():
            where[name] = st
    return where


# Per family: the experts' prefix, the gate (Linear [out, in]) names of an expert, the
# router's, the shared expert's (or None), the routing.
HF_FAMILIES = {
    "olmoe": dict(block="mlp", experts="mlp.experts.{e}.{p}.weight",
                  projections=("gate_proj", "up_proj", "down_proj"), router="mlp.gate.weight",
                  shared="mlp.shared_experts.{p}.weight", routing="softmax_topk"),
    "mixtral": dict(block="block_sparse_moe", experts="block_sparse_moe.experts.{e}.{p}.weight",
                    projections=("w1", "w3", "w2"), router="block_sparse_moe.gate.weight",
                    shared=None, routing="topk_softmax"),
}


def hf_layer_weights(checkpoint, layer):
    """One layer's experts from a Hugging Face checkpoint, as layer_graph's `weights`, with
    the family ("olmoe" for OLMoE/Qwen-MoE/DeepSeek names, "mixtral") and G. Linear weights
    are stored [out, in]; they are transposed to [in, out]."""
    where = open_checkpoint(checkpoint)
    for family, f in HF_FAMILIES.items():
        prefix = next((n[:n.index(f["router"])] for n in where
                       if n.endswith(f"layers.{layer}.{f['router']}")), None)
        if prefix is not None:
            break
    else:
        raise ValueError(f"{checkpoint}: no layer {layer} router "
                         "(mlp.gate.weight or block_sparse_moe.gate.weight)")
    if any(n.startswith(prefix + "mlp.shared_expert_gate") for n in where):
        raise ValueError("a gated shared expert (Qwen2-MoE's shared_expert_gate) is not one of "
                         "the layer forms (docs/moe_layer.md)")

    def read(name):
        if name not in where:
            raise ValueError(f"{checkpoint}: no tensor '{name}'")
        return where[name].array(name)

    router = read(prefix + f["router"])  # [G, K]
    g = router.shape[0]
    gate, up, down = ([read(prefix + f["experts"].format(e=e, p=p)).T for e in range(g)]
                      for p in f["projections"])
    weights = {"W_r": router.T, "W_g": np.stack(gate), "W_u": np.stack(up),
               "W_d": np.stack(down)}
    if f["shared"] and prefix + f["shared"].format(p="gate_proj") in where:
        for key, p in (("Ws_g", "gate_proj"), ("Ws_u", "up_proj"), ("Ws_d", "down_proj")):
            weights[key] = read(prefix + f["shared"].format(p=p)).T
    return weights, family, g


def hf_moe_layers(checkpoint):
    """The indices of the checkpoint's layers that hold a mixture-of-experts router, in order
    (a dense layer, such as DeepSeek's first, has none)."""
    pattern = re.compile(r"(?:^|\.)layers\.(\d+)\.(?:" +
                         "|".join(re.escape(f["router"]) for f in HF_FAMILIES.values()) + r")$")
    found = {int(m.group(1)) for n in open_checkpoint(checkpoint) for m in [pattern.search(n)]
             if m}
    return sorted(found)


def hf_config(checkpoint):
    """config.json beside the checkpoint, or {}."""
    folder = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
    path = os.path.join(folder, "config.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


# ------------------------------------------------------------------ float64 reference

def _topk(x, k):
    # ONNX TopK (largest, sorted): ties resolve to the lower index first.
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, order, axis=-1), order.astype(np.int64)


def _softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _gelu(x):
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))


def _grouped_matmul(x, w, ids):
    # output[m, s] = x[m] @ w[ids[m, s]]; ids out of range are an error, never read.
    if ids.size and (ids.min() < 0 or ids.max() >= w.shape[0]):
        raise ValueError("group index out of range")
    return np.einsum("mk,mskn->msn", x, w[ids])


def _integers(t):
    """An INT8/UINT8/INT4/UINT4 initializer as int64 (4-bit: two per byte, low nibble first)."""
    raw = np.frombuffer(t.raw_data, np.uint8)
    count = int(np.prod(t.dims)) if len(t.dims) else 1
    if t.data_type in (TensorProto.INT8, TensorProto.UINT8):
        values = raw.view(np.int8 if t.data_type == TensorProto.INT8 else np.uint8)
        return values.astype(np.int64).reshape(tuple(t.dims))
    nibbles = np.stack([raw & 15, raw >> 4], axis=-1).reshape(-1)[:count].astype(np.int64)
    if t.data_type == qm.INT4:
        nibbles = np.where(nibbles > 7, nibbles - 16, nibbles)
    return nibbles.reshape(tuple(t.dims))


def _initializer(t):
    if t.data_type in (TensorProto.INT8, TensorProto.UINT8, qm.INT4, qm.UINT4):
        return _integers(t)
    if t.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16):
        return qm.read_float_tensor(t)
    return numpy_helper.to_array(t)


def _dequantize(ins, attrs):
    x, scale = ins[0].astype(np.float64), ins[1]
    zero = ins[2] if len(ins) > 2 else np.zeros_like(scale)
    axis = attrs.get("axis", 1) % x.ndim
    block = attrs.get("block_size", 0)
    if block:
        scale = np.repeat(scale, block, axis=axis)[tuple(
            slice(0, n) for n in x.shape)]
        zero = np.repeat(zero, block, axis=axis)[tuple(slice(0, n) for n in x.shape)]
    elif scale.ndim == 1:
        shape = [1] * x.ndim
        shape[axis] = scale.shape[0]
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return (x - zero) * scale


def _int8_activations(x, weights):
    """x [M, K] times one quantized weight matrix as accuracy_level 4 computes it
    (quantize_model.int8_activation_matmul); `weights` (q, scale, zero point, block) as
    DequantizeLinear reads them, for one matrix [K, N]."""
    q, scale, zero, block = weights
    if block == 0:  # per output column: one scale per column
        scale = scale.reshape(-1)
        zero = None if zero is None else zero.reshape(-1)
    return qm.int8_activation_matmul(x, q, scale.astype(np.float64), zero, block)


def _level4(op, ins, weights):
    """MatMul or GroupedMatMul of activations ins[0] and dequantized weights, on 8-bit
    activations: `weights` the DequantizeLinear's (q, scale, zero point, block)."""
    if op == "MatMul":
        return _int8_activations(ins[0], weights)
    ids = ins[2].astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= ins[1].shape[0]):
        raise ValueError("group index out of range")
    q, scale, zero, block = weights

    def of(values, e):  # an expert's scales or zero points; per column, maybe shared by all
        return None if values is None else (values if values.ndim == 1 else values[e])
    out = np.zeros(ids.shape + (ins[1].shape[-1],))
    for m in range(ids.shape[0]):
        for j, e in enumerate(ids[m]):
            out[m, j] = _int8_activations(ins[0][m:m + 1],
                                          (q[e], of(scale, e), of(zero, e), block))[0]
    return out


def _run_node(node, v, quantized=None):
    ins = [v[name] for name in node.input if name]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    op = node.op_type
    if op == "DequantizeLinear":
        return [_dequantize(ins, attrs)]
    if op in ("MatMul", "GroupedMatMul") and quantized and node.input[1] in quantized:
        return [_level4(op, ins, quantized[node.input[1]])]
    if op == "MatMul":
        return [ins[0] @ ins[1]]
    if op == "GroupedMatMul":
        return [_grouped_matmul(ins[0], ins[1], ins[2].astype(np.int64))]
    if op == "Split":
        return np.split(ins[0], attrs.get("num_outputs", len(node.output)), axis=attrs["axis"])
    if op in ("Mul", "Div", "Add"):
        return [{"Mul": np.multiply, "Div": np.divide, "Add": np.add}[op](ins[0], ins[1])]
    if op == "Sigmoid":
        return [1.0 / (1.0 + np.exp(-ins[0]))]
    if op == "Gelu":
        return [_gelu(ins[0])]
    if op == "Reshape":
        return [ins[0].reshape(ins[1].astype(np.int64))]
    if op == "Unsqueeze":
        return [np.expand_dims(ins[0], tuple(int(a) for a in ins[1]))]
    if op == "ReduceSum":
        return [np.sum(ins[0], axis=tuple(int(a) for a in ins[1]),
                       keepdims=bool(attrs.get("keepdims", 1)))]
    if op == "Softmax":
        return [_softmax(ins[0], attrs.get("axis", -1))]
    if op == "TopK":
        return list(_topk(ins[0], int(ins[1][0])))
    raise ValueError(f"operator {op} is not one of a layer's")


def evaluate(model, feeds, accuracy_level=0, values=None):
    """The graph's outputs in float64 (indices as int64), from `feeds` by input name. With
    accuracy_level 4, a MatMul or GroupedMatMul of weights that a DequantizeLinear gives
    computes as gemmserve's level 4 does, on 8-bit activations quantized per block
    (quantize_model.int8_activation_matmul), each term in float64. `values`: a dict that
    gets every value the graph computed, by name."""
    graph = model.graph
    v = {init.name: _initializer(init) for init in graph.initializer}
    quantized = {}
    if accuracy_level == 4:
        for node in graph.node:
            if node.op_type == "DequantizeLinear":
                attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
                ins = [v[name] for name in node.input if name]
                quantized[node.output[0]] = (ins[0], np.asarray(ins[1], np.float64),
                                             ins[2] if len(ins) > 2 else None,
                                             attrs.get("block_size", 0))
    for name, value in feeds.items():
        value = np.asarray(value)
        v[name] = value.astype(np.float64) if value.dtype.kind == "f" else value
    for node in graph.node:
        for name, value in zip(node.output, _run_node(node, v, quantized)):
            v[name] = value
    if values is not None:
        values.update(v)
    return {out.name: v[out.name] for out in graph.output}


def checkpoint_graph(args):
    """The graph of layer --layer of the Hugging Face checkpoint --checkpoint: K, I and G from
    its weights, S and the renormalisation from config.json (num_experts_per_tok,
    norm_topk_prob) unless --s / --normalise say, the routing from the family's names."""
    weights, family, g = hf_layer_weights(args.checkpoint, args.layer)
    config = hf_config(args.checkpoint)
    s = args.s or config.get("num_experts_per_tok")
    if not s:
        raise SystemExit("--s: the checkpoint's config.json has no num_experts_per_tok")
    routing = args.routing or HF_FAMILIES[family]["routing"]
    normalise = args.normalise or bool(config.get("norm_topk_prob", False))
    _, k, i = weights["W_g"].shape
    return layer_graph(k, i, g, s, args.dtype, args.gate_up, args.activation, routing,
                       normalise and routing == "softmax_topk", "Ws_g" in weights,
                       weights=weights)


def write_layer(args, graph, out, name):
    """One layer as the command writes it: model.onnx at `out`, or sharded into `out`."""
    model = layer_model(graph)
    if args.shards:
        return write_sharded(out, name, model, args.shards,
                             args.shard_addresses.split(",") if args.shard_addresses else [],
                             args.bits, args.block_size, not args.asymmetric)
    if args.bits:
        model = quantize_layer(model, args.bits, args.block_size, not args.asymmetric)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    # Weights beside the graph (ONNX external data): a real layer is over protobuf's 2 GB.
    onnx.save_model(model, out, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=os.path.basename(out) + ".weights", size_threshold=1024)
    return out


def write_all_layers(args):
    """--all-layers: each MoE layer of --checkpoint as the model NAME_l<index> of the model
    repository --out (or, with --shards, of --out's router/ and shard<j>/), one at a time."""
    if not args.checkpoint:
        raise SystemExit("--all-layers needs --checkpoint")
    layers = hf_moe_layers(args.checkpoint)
    if not layers:
        raise SystemExit(f"{args.checkpoint}: no mixture-of-experts layer")
    for index in layers:
        args.layer = index
        name = f"{args.name}_l{index}"
        out = args.out if args.shards else os.path.join(args.out, name, "1", "model.onnx")
        write_layer(args, checkpoint_graph(args), out, name)
    print(f"{args.out}: {len(layers)} layers ({', '.join(map(str, layers))})")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True,
                        help="model.onnx to write (with --shards: a directory)")
    parser.add_argument("--shards", type=int, default=0,
                        help="split the experts into N equal ranges: a router and N shards")
    parser.add_argument("--shard_addresses", default="",
                        help="with --shards: one gRPC address per shard, comma-separated, "
                        "'|' between a shard's replicas")
    parser.add_argument("--name", default="moe_layer", help="with --shards or --all-layers: "
                        "the model's name (with --all-layers, each layer's is NAME_l<index>)")
    parser.add_argument("--all-layers", dest="all_layers", action="store_true",
                        help="with --checkpoint: every mixture-of-experts layer, one model each, "
                        "into the model repository --out (with --shards, into its router/ and "
                        "shard<j>/)")
    for name, default in (("k", 64), ("i", 32), ("g", 8), ("s", None), ("seed", 1)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--checkpoint", help="a Hugging Face checkpoint: a .safetensors file "
                        "or a folder of them (with config.json); --k/--i/--g come from it")
    parser.add_argument("--layer", type=int, default=0, help="with --checkpoint: which layer")
    parser.add_argument("--dtype", choices=sorted(TYPES), default="fp32")
    parser.add_argument("--bits", type=int, choices=[0, 4, 8], default=0,
                        help="keep the expert weights quantized (DequantizeLinear); 0: no")
    parser.add_argument("--block_size", type=int, default=32,
                        help="with --bits: rows of K per scale (0: one scale per column)")
    parser.add_argument("--asymmetric", action="store_true",
                        help="with --bits: UINT8/UINT4 with zero points")
    parser.add_argument("--gate_up", choices=["fused", "separate"], default="fused")
    parser.add_argument("--activation", choices=["silu", "gelu"], default="silu")
    parser.add_argument("--routing", choices=["given", "softmax_topk", "topk_softmax"],
                        help="default: softmax_topk, or the checkpoint family's")
    parser.add_argument("--normalise", action="store_true")
    parser.add_argument("--shared_expert", action="store_true")
    args = parser.parse_args()
    if args.all_layers:
        return write_all_layers(args)
    if args.checkpoint:
        graph = checkpoint_graph(args)
    else:
        graph = layer_graph(args.k, args.i, args.g, args.s or 2, args.dtype, args.gate_up,
                            args.activation, args.routing or "softmax_topk", args.normalise,
                            args.shared_expert, args.seed)
    written = write_layer(args, graph, args.out, args.name)
    print(f"{args.out}: router (shards {written}) and {args.shards} shards" if args.shards
          else written)

if __name__ == "__main__":
    main()
