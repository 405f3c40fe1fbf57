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
Weights are seeded random values of FP32 or FP16 (BF16 later, with the server's loader).

  /usr/bin/python3 scripts/make_moe_layer.py --out repo/moe_layer/1/model.onnx \\
      --k 64 --i 32 --g 8 --s 2 --routing softmax_topk --gate_up fused

Python: `layer_graph(...)` returns the onnx.GraphProto; `evaluate(model, feeds)` the float64
outputs of any graph of the operators above.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}


def _const(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _experts(rng, prefix, g, k, n, dtype, scale):
    return numpy_helper.from_array((rng.standard_normal((g, k, n)) * scale).astype(dtype), prefix)


def layer_graph(k, i, g, s, dtype=np.float32, gate_up="fused", activation="silu",
                routing="softmax_topk", normalise=False, shared_expert=False, seed=1,
                index_type=TensorProto.INT64):
    """The layer as a graph: inputs x [M, K] (and ids [M, S], w [M, S] when routing is
    "given"), output `out` [M, K]."""
    rng = np.random.default_rng(seed)
    t = _ONNX[np.dtype(dtype)]
    scale = 1.0 / np.sqrt(k)
    nodes, inits = [], []
    inputs = [helper.make_tensor_value_info("x", t, ["M", k])]
    if routing == "given":
        inputs += [helper.make_tensor_value_info("ids", index_type, ["M", s]),
                   helper.make_tensor_value_info("w", t, ["M", s])]
    else:
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((k, g)) * scale).astype(dtype), "W_r"))
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
        inits.append(_experts(rng, "W_gu", g, k, 2 * i, dtype, scale))
        nodes.append(helper.make_node("GroupedMatMul", ["x", "W_gu", "ids"], ["gu"]))
        nodes.append(helper.make_node("Split", ["gu"], ["g", "u"], axis=-1, num_outputs=2))
    else:
        inits += [_experts(rng, "W_g", g, k, i, dtype, scale),
                  _experts(rng, "W_u", g, k, i, dtype, scale)]
        nodes.append(helper.make_node("GroupedMatMul", ["x", "W_g", "ids"], ["g"]))
        nodes.append(helper.make_node("GroupedMatMul", ["x", "W_u", "ids"], ["u"]))
    if activation == "silu":
        nodes.append(helper.make_node("Sigmoid", ["g"], ["sig"]))
        nodes.append(helper.make_node("Mul", ["g", "sig"], ["act"]))
    else:
        nodes.append(helper.make_node("Gelu", ["g"], ["act"]))
    nodes.append(helper.make_node("Mul", ["act", "u"], ["a"]))
    inits += [_experts(rng, "W_d", g, i, k, dtype, 1.0 / np.sqrt(i)),
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
            inits.append(numpy_helper.from_array(
                (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(dtype), name))
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


def _run_node(node, v):
    ins = [v[name] for name in node.input]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    op = node.op_type
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
    v = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    v = {name: (a.astype(np.float64) if a.dtype.kind == "f" else a) for name, a in v.items()}
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
    parser.add_argument("--dtype", choices=["fp32", "fp16"], default="fp32")
    parser.add_argument("--gate_up", choices=["fused", "separate"], default="fused")
    parser.add_argument("--activation", choices=["silu", "gelu"], default="silu")
    parser.add_argument("--routing", choices=["given", "softmax_topk", "topk_softmax"],
                        default="softmax_topk")
    parser.add_argument("--normalise", action="store_true")
    parser.add_argument("--shared_expert", action="store_true")
    args = parser.parse_args()
    graph = layer_graph(args.k, args.i, args.g, args.s,
                        np.float16 if args.dtype == "fp16" else np.float32, args.gate_up,
                        args.activation, args.routing, args.normalise, args.shared_expert,
                        args.seed)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    onnx.save(layer_model(graph), args.out)
    print(args.out)


if __name__ == "__main__":
    main()
