#!/usr/bin/python3
"""Quantizes the weights of a one-node MatMul or GroupedMatMul ONNX model.

    scripts/quantize_model.py IN/model.onnx OUT/1/model.onnx --bits 4 --block_size 32
    scripts/quantize_model.py IN/model.onnx OUT/1/model.onnx --bits 8 --asymmetric

Writes `DequantizeLinear -> MatMul` (or `-> GroupedMatMul`), the form gemmserve
serves with the weights kept quantized (docs/quantized-models.md):

  --bits 8 | 4         INT8/INT4 (symmetric) or UINT8/UINT4 (--asymmetric, with
                       a zero point); 4-bit values packed two per byte, low
                       nibble first, as ONNX stores INT4/UINT4
  --block_size B       scales per B rows of K (ONNX blocked quantization,
                       scale [G, ceil(K/B), N]); 0: one scale per output
                       column (axis N, scale [N])
  --accuracy_level 4   also writes config.pbtxt (in OUT's model folder) with
                       ONNX Runtime's accuracy_level 4: the server runs the
                       weights on 8-bit activations (integer dot products)

The scales have the weights' type (FP32, FP16 or BF16): DequantizeLinear's
output is the op's value type. Then prints the error of the quantized model
against the original on random inputs, both computed in float64. Debian's
ONNX 1.12 Python package predates INT4, so 4-bit tensors are written as raw
bytes with their ONNX type number (UINT4 21, INT4 22). Uses python3-onnx and
python3-numpy.
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

UINT4, INT4 = 21, 22
FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)


def bf16_bits(values):
    """Float values to BF16 bits, round to nearest even."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def to_value_type(values, onnx_type):
    """float64 values rounded to the ONNX float type, back as float64."""
    if onnx_type == TensorProto.FLOAT:
        return np.asarray(values, np.float32).astype(np.float64)
    if onnx_type == TensorProto.FLOAT16:
        return np.asarray(values, np.float16).astype(np.float64)
    bits = bf16_bits(np.asarray(values, np.float64).astype(np.float32))
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def value_bytes(values, onnx_type):
    if onnx_type == TensorProto.FLOAT:
        return np.asarray(values, np.float32).tobytes()
    if onnx_type == TensorProto.FLOAT16:
        return np.asarray(values, np.float16).tobytes()
    return bf16_bits(np.asarray(values, np.float32)).tobytes()


def read_float_tensor(tensor):
    """An FP32/FP16/BF16 initializer as float64."""
    if tensor.data_type == TensorProto.BFLOAT16:
        raw = np.frombuffer(tensor.raw_data, np.uint16) if tensor.raw_data else \
            np.array(tensor.int32_data, np.uint16)
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64).reshape(
            tuple(tensor.dims))
    return numpy_helper.to_array(tensor).astype(np.float64)


def pack_integers(q, onnx_type):
    """Integers to the bytes ONNX stores: one per byte, or two per byte low nibble first."""
    flat = np.asarray(q)
    if flat.dtype.kind not in "iu":  # integers stay as they are (no int64 copy of int8)
        flat = flat.astype(np.int64)
    flat = flat.reshape(-1)
    if onnx_type in (TensorProto.INT8, TensorProto.UINT8):
        return flat.astype(np.int8 if onnx_type == TensorProto.INT8 else np.uint8).tobytes()
    nibbles = (flat & 15).astype(np.uint8)
    if nibbles.size % 2:
        nibbles = np.append(nibbles, np.uint8(0))
    return (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8).tobytes()


def raw_tensor(name, onnx_type, dims, raw):
    t = TensorProto()
    t.name = name
    t.data_type = onnx_type
    t.dims.extend(int(d) for d in dims)
    t.raw_data = raw
    return t


def quantize(w, value_type, bits, symmetric, block_size):
    """w [.., K, N] float64 -> (q, scale, zero_point or None, dequantized, axis, type).

    Blocks of block_size rows of K per column (block_size 0: all of K and
    every group share one scale per column, ONNX per-axis on N)."""
    k = w.shape[-2]
    if block_size > 0:
        blocks = -(-k // block_size)
        pad = [(0, 0)] * w.ndim
        pad[-2] = (0, blocks * block_size - k)  # the last row again: same range
        view = np.pad(w, pad, mode="edge").reshape(
            w.shape[:-2] + (blocks, block_size, w.shape[-1]))
        hi, lo = view.max(axis=-2), view.min(axis=-2)
        expand = lambda s: np.repeat(s, block_size, axis=-2)[..., :k, :]  # noqa: E731
        axis = w.ndim - 2
    else:
        hi = w.reshape(-1, w.shape[-1]).max(axis=0)
        lo = w.reshape(-1, w.shape[-1]).min(axis=0)
        expand = lambda s: s  # noqa: E731  (broadcasts along the last axis)
        axis = w.ndim - 1
    qmax = (1 << (bits - 1)) - 1 if symmetric else (1 << bits) - 1
    if symmetric:
        onnx_type = TensorProto.INT8 if bits == 8 else INT4
        scale = np.maximum(np.abs(hi), np.abs(lo)) / qmax
        scale = to_value_type(np.where(scale > 0, scale, 1.0), value_type)
        q = np.clip(np.rint(w / expand(scale)), -qmax - 1, qmax)
        zero_point = None
        dequantized = to_value_type(q * expand(scale), value_type)
    else:
        onnx_type = TensorProto.UINT8 if bits == 8 else UINT4
        lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)  # zero exactly representable
        scale = (hi - lo) / qmax
        scale = to_value_type(np.where(scale > 0, scale, 1.0), value_type)
        zero_point = np.clip(np.rint(-lo / scale), 0, qmax)
        q = np.clip(np.rint(w / expand(scale)) + expand(zero_point), 0, qmax)
        dequantized = to_value_type((q - expand(zero_point)) * expand(scale), value_type)
    return q.astype(np.int64), scale, zero_point, dequantized, axis, onnx_type


def dequantize_linear(name, q_type, shape, packed, scale, value_type, zero_point=None, axis=0,
                      block_size=0):
    """Weights `name` kept quantized: the initializers `name`_quantized (q_type, `shape`, the
    bytes `packed` as pack_integers writes them), `name`_scale (value_type) and, given a
    zero point, `name`_zero_point (q_type), and the DequantizeLinear node writing `name`
    (attribute block_size only when above 0)."""
    inits = [raw_tensor(name + "_quantized", q_type, shape, packed),
             raw_tensor(name + "_scale", value_type, scale.shape, value_bytes(scale, value_type))]
    inputs = [name + "_quantized", name + "_scale"]
    if zero_point is not None:
        inits.append(raw_tensor(name + "_zero_point", q_type, zero_point.shape,
                                pack_integers(zero_point, q_type)))
        inputs.append(name + "_zero_point")
    attrs = {"axis": axis}
    if block_size > 0:
        attrs["block_size"] = block_size
    return inits, helper.make_node("DequantizeLinear", inputs, [name], name=name + "_dequantize",
                                   **attrs)


def quantize_model(model, bits=4, symmetric=True, block_size=32):
    """The quantized model and (original, dequantized) weights as float64."""
    graph = model.graph
    if len(graph.node) != 1 or graph.node[0].op_type not in ("MatMul", "GroupedMatMul"):
        raise ValueError("expected a one-node MatMul or GroupedMatMul model")
    node = graph.node[0]
    inits = {t.name: t for t in graph.initializer}
    if node.input[1] not in inits:
        raise ValueError(f"{node.op_type}'s weights '{node.input[1]}' are not an initializer")
    weights = inits[node.input[1]]
    if weights.data_type not in FLOAT_TYPES:
        raise ValueError("weights must be FP32, FP16 or BF16")
    w = read_float_tensor(weights)
    if block_size > w.shape[-2]:
        raise ValueError(f"block_size {block_size} is above K={w.shape[-2]}")
    q, scale, zero_point, dequantized, axis, q_type = quantize(
        w, weights.data_type, bits, symmetric, block_size)
    name = weights.name
    new_inits, dq = dequantize_linear(name, q_type, w.shape, pack_integers(q, q_type), scale,
                                      weights.data_type, zero_point, axis, block_size)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.initializer[:]
    out.graph.initializer.extend([t for t in graph.initializer if t.name != name] + new_inits)
    del out.graph.node[:]
    out.graph.node.extend([dq, node])
    opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] + [21])
    del out.opset_import[:]
    out.opset_import.extend([helper.make_opsetid("", opset)])
    return out, w, dequantized


def report_error(model, w, dequantized, rng, m=8):
    """Relative and largest errors of the outputs on random inputs, in float64."""
    node = model.graph.node[-1]
    x = rng.standard_normal((m, w.shape[-2]))
    if node.op_type == "MatMul":
        y, yq = x @ w, x @ dequantized
    else:
        s = next(i for i in model.graph.input if i.name == node.input[2]) \
            .type.tensor_type.shape.dim[1].dim_value
        idx = rng.integers(0, w.shape[0], size=(m, s))
        y = np.einsum("mk,mskn->msn", x, w[idx])
        yq = np.einsum("mk,mskn->msn", x, dequantized[idx])
    rel = float(np.linalg.norm(yq - y) / max(np.linalg.norm(y), 1e-300))
    return rel, float(np.max(np.abs(yq - y)))


def quantize_activations(x, block):
    """Rows of x as gemmserve quantizes them for accuracy_level 4: per block of K, symmetric
    INT8 (round half to even) with scale max|a| / 127; returns (integers, scales [M, blocks])."""
    x = np.asarray(x, np.float32)
    m, k = x.shape
    blocks = -(-k // block)
    q = np.zeros((m, k), np.int64)
    scale = np.zeros((m, blocks), np.float32)
    for b in range(blocks):
        part = x[:, b * block:(b + 1) * block]
        amax = np.abs(part).max(axis=1)
        inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0)
        q[:, b * block:(b + 1) * block] = np.clip(np.rint(part * inv.astype(np.float32)[:, None]),
                                                  -127, 127)
        scale[:, b] = (amax / np.float32(127)).astype(np.float32)
    return q, scale


def int8_activation_matmul(x, q_w, w_scale, w_zero, block_size):
    """x [M, K] times weights [K, N] quantized per column (block_size 0: scale [N]) or in
    blocks of K rows (scale [ceil(K / B), N]), as accuracy_level 4 computes it, in float64:
    sum over blocks of s_a s_w (sum q_a q_w - z_w sum q_a); the activations in blocks of
    block_size, or 32 per column."""
    k = x.shape[1]
    block = block_size if block_size > 0 else 32
    q_a, s_a = quantize_activations(x, block)
    out = np.zeros((x.shape[0], q_w.shape[1]))
    for b in range(-(-k // block)):
        rows = slice(b * block, (b + 1) * block)
        dot = q_a[:, rows] @ q_w[rows]
        s_w = w_scale[b] if block_size > 0 else w_scale
        z = 0 if w_zero is None else (w_zero[b] if block_size > 0 else w_zero)
        out += s_a[:, b:b + 1].astype(np.float64) * s_w * (dot - q_a[:, rows].sum(
            axis=1, keepdims=True) * z)
    return out


def accuracy_level_config(level):
    """config.pbtxt text setting accuracy_level as Triton writes model parameters."""
    return f'parameters {{ key: "accuracy_level" value {{ string_value: "{level}" }} }}\n'


def save_model(model, output, accuracy_level=None):
    """Writes `model` to `output` (a repository's NAME/VERSION/model.onnx) with its
    initializers in weights.bin beside it and, given accuracy_level, config.pbtxt with that
    setting in the model's folder (output's grandparent)."""
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    onnx.save_model(model, output, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    if accuracy_level is not None:
        config = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(output))),
                              "config.pbtxt")
        with open(config, "w") as f:
            f.write(accuracy_level_config(accuracy_level))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="a one-node MatMul or GroupedMatMul model.onnx")
    parser.add_argument("output", help="the model.onnx to write (weights.bin beside it)")
    parser.add_argument("--bits", type=int, choices=(4, 8), default=4)
    parser.add_argument("--asymmetric", action="store_true",
                        help="unsigned integers with a zero point")
    parser.add_argument("--block_size", type=int, default=32,
                        help="rows of K per scale; 0: one scale per output column")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--accuracy_level", choices=("0", "4"),
                        help="also write config.pbtxt in the model's folder (OUT/../..) with "
                             "this accuracy_level: 4 runs the model on 8-bit activations "
                             "(docs/quantized-models.md)")
    args = parser.parse_args()
    if args.block_size < 0:
        parser.error("--block_size must be >= 0")
    model = onnx.load(args.input)
    try:
        quantized, w, dequantized = quantize_model(model, args.bits, not args.asymmetric,
                                                   args.block_size)
    except ValueError as e:
        print(f"quantize_model: {e}", file=sys.stderr)
        return 2
    save_model(quantized, args.output, args.accuracy_level)
    rel, worst = report_error(quantized, w, dequantized, np.random.default_rng(args.seed))
    kind = ("UINT" if args.asymmetric else "INT") + str(args.bits)
    grain = f"blocks of {args.block_size}" if args.block_size else "per column"
    print(f"{args.output}: {kind}, {grain}; output error against the original on random "
          f"inputs: relative {rel:.3e}, largest {worst:.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
