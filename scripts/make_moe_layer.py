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

Python: `layer_graph(...)` returns the onnx.GraphProto; `evaluate(model, feeds)` the float64
outputs of any graph of the operators above.
"""
import argparse
import os
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
                index_type=TensorProto.INT64):
    """The layer as a graph: inputs x [M, K] (and ids [M, S], w [M, S] when routing is
    "given"), output `out` [M, K]."""
    rng = np.random.default_rng(seed)
    t = TYPES[dtype][1] if isinstance(dtype, str) else _ONNX[np.dtype(dtype)]
    scale = 1.0 / np.sqrt(k)
    nodes, inits = [], []
    inputs = [helper.make_tensor_value_info("x", t, ["M", k])]
    if routing == "given":
        inputs += [helper.make_tensor_value_info("ids", index_type, ["M", s]),
                   helper.make_tensor_value_info("w", t, ["M", s])]
    else:
        inits.append(_values("W_r", rng.standard_normal((k, g)) * scale, t))
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
        inits.append(_experts(rng, "W_gu", g, k, 2 * i, t, scale))
        nodes.append(helper.make_node("GroupedMatMul", ["x", "W_gu", "ids"], ["gu"]))
        nodes.append(helper.make_node("Split", ["gu"], ["g", "u"], axis=-1, num_outputs=2))
    else:
        inits += [_experts(rng, "W_g", g, k, i, t, scale),
                  _experts(rng, "W_u", g, k, i, t, scale)]
        nodes.append(helper.make_node("GroupedMatMul", ["x", "W_g", "ids"], ["g"]))
        nodes.append(helper.make_node("GroupedMatMul", ["x", "W_u", "ids"], ["u"]))
    if activation == "silu":
        nodes.append(helper.make_node("Sigmoid", ["g"], ["sig"]))
        nodes.append(helper.make_node("Mul", ["g", "sig"], ["act"]))
    else:
        nodes.append(helper.make_node("Gelu", ["g"], ["act"]))
    nodes.append(helper.make_node("Mul", ["act", "u"], ["a"]))
    inits += [_experts(rng, "W_d", g, i, k, t, 1.0 / np.sqrt(i)),
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
        for name, shape in (("Ws_g", (k, i)), ("Ws_u", (k, i)), ("Ws_d", (i, k))):
            inits.append(_values(name, rng.standard_normal(shape) / np.sqrt(shape[0]), t))
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


def _run_node(node, v):
    ins = [v[name] for name in node.input if name]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    op = node.op_type
    if op == "DequantizeLinear":
        return [_dequantize(ins, attrs)]
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


def evaluate(model, feeds):
    """The graph's outputs in float64 (indices as int64), from `feeds` by input name."""
    graph = model.graph
    v = {init.name: _initializer(init) for init in graph.initializer}
    for name, value in feeds.items():
        value = np.asarray(value)
        v[name] = value.astype(np.float64) if value.dtype.kind == "f" else value
    for node in graph.node:
        for name, value in zip(node.output, _run_node(node, v)):
            v[name] = value
    return {out.name: v[out.name] for out in graph.output}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="model.onnx to write")
    for name, default in (("k", 64), ("i", 32), ("g", 8), ("s", 2), ("seed", 1)):
        parser.add_argument(f"--{name}", type=int, default=default)
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
                        default="softmax_topk")
    parser.add_argument("--normalise", action="store_true")
    parser.add_argument("--shared_expert", action="store_true")
    args = parser.parse_args()
    graph = layer_graph(args.k, args.i, args.g, args.s, args.dtype, args.gate_up,
                        args.activation, args.routing, args.normalise, args.shared_expert,
                        args.seed)
    model = layer_model(graph)
    if args.bits:
        model = quantize_layer(model, args.bits, args.block_size, not args.asymmetric)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    onnx.save(model, args.out)
    print(args.out)


if __name__ == "__main__":
    main()
