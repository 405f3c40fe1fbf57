#!/usr/bin/python3
"""Converts llama.cpp's Q4_0 and Q8_0 expert tensors from a GGUF file into gemmserve
models: DequantizeLinear of the file's own integers and scales feeding GroupedMatMul
(docs/quantized-models.md), the weights exactly as llama.cpp dequantizes them.

    scripts/gguf_to_onnx.py model.gguf --tensor blk.0.ffn_up_exps.weight \\
        --tensor blk.0.ffn_down_exps.weight --out repo [--top_k 8] [--accuracy_level 4]

Each --tensor, a 3-D expert tensor `blk.N.ffn_{gate,up,down}_exps.weight` with
ggml dims ne = [K, N, G] (G experts of N rows of K, rows along K), becomes one model
REPO/NAME/1/model.onnx (weights.bin beside it): inputs X [M, K] FP32 and indices
[M, S] INT64 (S = --top_k), output Y [M, S, N], the weights [G, K, N] in blocks of 32
along K (DequantizeLinear axis 1, block_size 32, scale [G, K/32, N] FP32, no zero point):

  Q8_0  block: fp16 d, 32 int8 q; w = d * q          -> INT8, scale d
  Q4_0  block: fp16 d, 16 bytes, byte i holding weight i in its low nibble and
        weight i + 16 in its high one; w = d * (nibble - 8)
                                                     -> INT4 (nibble - 8), scale d

No requantization: the integers are the file's, and d is widened from FP16 to FP32,
which is exact (every FP16 value is an FP32 value). Each product q * d then has at most
11 + 8 significant bits, so DequantizeLinear's FP32 output is exactly llama.cpp's
dequantized weight. NAME is --model_name (one --tensor only) or the tensor's name
without ".weight", dots made underscores. --accuracy_level 4 also writes config.pbtxt
with that setting (8-bit activations, as llama.cpp's Q8_0 activations).

The file is read by the GGUF spec (llama.cpp's docs/gguf.md, versions 2 and 3) with
struct and numpy, memory-mapped. Every count, length, dimension and offset is checked
against the file's size before anything is allocated by it; a truncated or corrupt
file, a missing tensor, or a tensor of another type or shape is refused with a one-line
message and exit status 1. A tensor is converted in memory: its integers about three
times over (K * N * G bytes for Q8_0, half that for Q4_0) at the peak.
Uses python3-numpy and python3-onnx.
"""
import argparse
import mmap
import os
import re
import struct
import sys

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quantize_model as qm  # noqa: E402

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
# The spec's bound on a key (and what is accepted as a tensor's name).
MAX_NAME_BYTES = 65535
# The whole-file header: magic, version, tensor count, metadata count.
HEADER_BYTES = 4 + 4 + 8 + 8
# The fewest bytes one metadata pair and one tensor info take (empty key or name).
MIN_KV_BYTES = 8 + 4 + 1
MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8

# GGUF metadata value types: struct format of the scalars.
STRING, ARRAY = 8, 9
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B",
           10: "<Q", 11: "<q", 12: "<d"}
INTEGER_TYPES = (0, 1, 2, 3, 4, 5, 10, 11)

# ggml tensor types by number (ggml.h), for naming what is refused.
GGML_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0",
              9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K",
              15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S",
              20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16",
              26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0",
              35: "TQ2_0", 39: "MXFP4"}
F32, F16, Q4_0, Q8_0, BF16 = 0, 1, 2, 8, 30
NOT_QUANTIZED = (F32, F16, BF16)
QK = 32  # weights per Q4_0 / Q8_0 block
# The blocks, as numpy reads them from the file (packed, little-endian).
BLOCKS = {Q8_0: np.dtype([("d", "<f2"), ("q", "i1", (QK,))]),
          Q4_0: np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])}
MODEL_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$")  # as the server accepts


class GGUFError(ValueError):
    """A file or a tensor that cannot be converted; the message names the problem."""


def type_name(ggml_type):
    return GGML_TYPES.get(ggml_type, f"type {ggml_type}")


class TensorInfo:
    def __init__(self, name, dims, ggml_type, offset):
        self.name, self.dims, self.ggml_type, self.offset = name, dims, ggml_type, offset


class _Reader:
    """Reads little-endian fields from a buffer, refusing any that runs past its end."""

    def __init__(self, buf, size):
        self.buf, self.size, self.pos = buf, size, 0

    def left(self):
        return self.size - self.pos

    def take(self, n, what):
        if n > self.left():
            raise GGUFError(f"truncated: {what} at byte {self.pos} needs {n} bytes, "
                            f"{self.left()} left")
        start = self.pos
        self.pos += n
        return start

    def unpack(self, fmt, what):
        return struct.unpack_from(fmt, self.buf, self.take(struct.calcsize(fmt), what))[0]

    def u32(self, what):
        return self.unpack("<I", what)

    def u64(self, what):
        return self.unpack("<Q", what)

    def string(self, what, limit=None):
        n = self.u64(f"{what}'s length")
        if limit is not None and n > limit:
            raise GGUFError(f"{what} is {n} bytes long (at most {limit})")
        start = self.take(n, what)
        return bytes(self.buf[start:start + n]).decode("utf-8", "replace")


class GGUFFile:
    """A GGUF file's metadata (`metadata`, {key: value}) and tensor infos (`tensors`,
    {name: TensorInfo}), checked against the file; `expert_weights` reads one tensor."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.size = os.fstat(f.fileno()).st_size
            if self.size < HEADER_BYTES:
                raise GGUFError(f"truncated: {self.size} bytes, shorter than the "
                                f"{HEADER_BYTES}-byte GGUF header")
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self._parse()
        except BaseException:
            self.close()
            raise

    def close(self):
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # an array still views it: it closes when that goes
                pass
            self._map = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _parse(self):
        r = _Reader(self._map, self.size)
        magic = bytes(self._map[:4])
        r.take(4, "magic")
        if magic != GGUF_MAGIC:
            raise GGUFError(f"not a GGUF file: magic {magic!r}, expected {GGUF_MAGIC!r}")
        self.version = r.u32("version")
        if int.from_bytes(self.version.to_bytes(4, "little"), "big") in GGUF_VERSIONS:
            raise GGUFError("a big-endian GGUF file: only little-endian files are read")
        if self.version not in GGUF_VERSIONS:
            raise GGUFError(f"GGUF version {self.version}; versions 2 and 3 are read")
        tensor_count = r.u64("tensor count")
        kv_count = r.u64("metadata count")
        # Bounded by what the rest of the file could hold before anything is read by them.
        if kv_count > r.left() // MIN_KV_BYTES:
            raise GGUFError(f"metadata count {kv_count} does not fit the file's {r.left()} "
                            "remaining bytes")
        if tensor_count > r.left() // MIN_TENSOR_INFO_BYTES:
            raise GGUFError(f"tensor count {tensor_count} does not fit the file's "
                            f"{r.left()} remaining bytes")
        self.metadata = {}
        for i in range(kv_count):
            key = r.string(f"metadata key #{i}", MAX_NAME_BYTES)
            if key in self.metadata:
                raise GGUFError(f"metadata key '{key}' appears twice")
            self.metadata[key] = self._value(r, r.u32(f"type of '{key}'"), key)
        self.alignment = self._alignment()
        if tensor_count > r.left() // MIN_TENSOR_INFO_BYTES:
            raise GGUFError(f"tensor count {tensor_count} does not fit the file's "
                            f"{r.left()} bytes after the metadata")
        self.tensors = {}
        for i in range(tensor_count):
            name = r.string(f"the name of tensor #{i}", MAX_NAME_BYTES)
            if name in self.tensors:
                raise GGUFError(f"tensor '{name}' appears twice")
            n_dims = r.u32(f"the dimension count of tensor '{name}'")
            if n_dims > GGML_MAX_DIMS:
                raise GGUFError(f"tensor '{name}' has {n_dims} dimensions (at most "
                                f"{GGML_MAX_DIMS} in ggml)")
            dims = [r.u64(f"ne[{d}] of tensor '{name}'") for d in range(n_dims)]
            ggml_type = r.u32(f"the type of tensor '{name}'")
            offset = r.u64(f"the offset of tensor '{name}'")
            if offset % self.alignment:
                raise GGUFError(f"the offset {offset} of tensor '{name}' is not a multiple of "
                                f"the alignment {self.alignment}")
            self.tensors[name] = TensorInfo(name, dims, ggml_type, offset)
        self.data_start = -(-r.pos // self.alignment) * self.alignment
        if self.tensors and self.data_start > self.size:
            raise GGUFError(f"truncated: the data section would start at byte "
                            f"{self.data_start}, past the end of the file ({self.size} bytes)")
        self.data_size = max(self.size - self.data_start, 0)
        for t in self.tensors.values():
            if t.offset > self.data_size:
                raise GGUFError(f"the offset {t.offset} of tensor '{t.name}' is past the end "
                                f"of the data section ({self.data_size} bytes)")

    def _value(self, r, value_type, key, in_array=False):
        if value_type in SCALARS:
            value = r.unpack(SCALARS[value_type], f"value of '{key}'")
            return bool(value) if value_type == 7 else value
        if value_type == STRING:
            return r.string(f"value of '{key}'")
        if value_type == ARRAY and not in_array:
            elem_type = r.u32(f"element type of '{key}'")
            count = r.u64(f"element count of '{key}'")
            if elem_type in SCALARS:
                size = struct.calcsize(SCALARS[elem_type])
                if count > r.left() // size:
                    raise GGUFError(f"array '{key}' of {count} elements does not fit the "
                                    f"file's {r.left()} remaining bytes")
                start = r.take(count * size, f"array '{key}'")
                return np.frombuffer(self._map, np.dtype(SCALARS[elem_type]), count,
                                     start).copy()
            if elem_type == STRING:
                if count > r.left() // 8:  # each string has at least its 8-byte length
                    raise GGUFError(f"array '{key}' of {count} strings does not fit the "
                                    f"file's {r.left()} remaining bytes")
                return [r.string(f"element {j} of '{key}'") for j in range(count)]
            if elem_type == ARRAY:
                raise GGUFError(f"'{key}' is an array of arrays, which llama.cpp does not "
                                "read either")
            raise GGUFError(f"array '{key}' has elements of unknown value type {elem_type}")
        raise GGUFError(f"'{key}' has unknown value type {value_type}")

    def _alignment(self):
        if "general.alignment" not in self.metadata:
            return DEFAULT_ALIGNMENT
        value = self.metadata["general.alignment"]
        if isinstance(value, (bool, np.ndarray, list, str, float)) or \
                value <= 0 or value & (value - 1):
            raise GGUFError(f"general.alignment {value!r} is not a power of two")
        return value

    def expert_weights(self, name):
        """Tensor `name` (Q8_0 or Q4_0, ne = [K, N, G]) in the server's layout: its ggml
        type, (K, N, G), and an iterator over the experts giving (q int8 [K, N], d float32
        [K/32, N]), w = d * q for the 32 rows of K of each scale (Q4_0: q = nibble - 8)."""
        t = self.tensor(name)
        k, n, g = t.dims
        blocks_per_row = k // QK
        block = BLOCKS[t.ggml_type]
        expert_bytes = n * blocks_per_row * block.itemsize

        def experts():
            for e in range(g):
                raw = np.frombuffer(self._map, block, n * blocks_per_row,
                                    self.data_start + t.offset + e * expert_bytes)
                raw = raw.reshape(n, blocks_per_row)
                scale = raw["d"].astype(np.float32).T.copy()  # FP16 to FP32: exact
                if t.ggml_type == Q8_0:
                    q = raw["q"]
                else:  # byte i: weight i in the low nibble, weight i + 16 in the high one
                    qs = raw["qs"]
                    q = np.concatenate([qs & 15, qs >> 4], axis=-1).astype(np.int8) - \
                        np.int8(8)
                q = q.reshape(n, k).T.copy()
                del raw
                yield q, scale
        return t.ggml_type, (k, n, g), experts()

    def tensor(self, name):
        """The info of `name`, checked as an expert tensor this script converts."""
        t = self.tensors.get(name)
        if t is None:
            near = sorted(n for n in self.tensors if "_exps" in n)[:6]
            hint = f" (expert tensors: {', '.join(near)}{', ...' if len(near) == 6 else ''})" \
                if near else ""
            raise GGUFError(f"no tensor '{name}' in the file{hint}")
        kind = type_name(t.ggml_type)
        if t.ggml_type in NOT_QUANTIZED:
            raise GGUFError(f"tensor '{name}' is {kind}, not quantized: only Q4_0 and Q8_0 "
                            "tensors are converted (scripts/quantize_model.py quantizes float "
                            "models)")
        if t.ggml_type not in BLOCKS:
            what = kind if t.ggml_type in GGML_TYPES else f"of unknown ggml type {t.ggml_type}"
            raise GGUFError(f"tensor '{name}' is {what}: only Q4_0 and Q8_0 are converted")
        if len(t.dims) != 3:
            raise GGUFError(f"tensor '{name}' has {len(t.dims)} dimensions {t.dims}; an "
                            "expert tensor has 3, ne = [K, N, experts]")
        k, n, g = t.dims
        if min(t.dims) == 0:
            raise GGUFError(f"tensor '{name}' is empty: ne = {t.dims}")
        if k % QK:
            raise GGUFError(f"tensor '{name}': K = ne[0] = {k} is not a multiple of {QK}, "
                            f"the {kind} block")
        nbytes = (k // QK) * BLOCKS[t.ggml_type].itemsize * n * g
        if nbytes > self.data_size - t.offset:
            raise GGUFError(f"tensor '{name}' ({kind}, ne = {t.dims}, {nbytes} bytes at "
                            f"offset {t.offset}) runs past the end of the data section "
                            f"({self.data_size} bytes): the file is truncated or corrupt")
        return t


def default_model_name(tensor_name):
    base = tensor_name[:-len(".weight")] if tensor_name.endswith(".weight") else tensor_name
    name = re.sub(r"[^A-Za-z0-9_-]", "_", base)[:128]
    return name or "experts"


def expert_model(gguf, tensor_name, top_k):
    """The GroupedMatMul model of one expert tensor, and a one-line description."""
    ggml_type, (k, n, g), weights = gguf.expert_weights(tensor_name)
    q_type = TensorProto.INT8 if ggml_type == Q8_0 else qm.INT4
    packed = bytearray()
    scales = np.empty((g, k // QK, n), np.float32)
    for e, (q, scale) in enumerate(weights):
        if not np.all(np.isfinite(scale)):
            raise GGUFError(f"tensor '{tensor_name}': expert {e} has a scale that is not "
                            "finite, which the server refuses")
        packed += qm.pack_integers(q, q_type)
        scales[e] = scale
    inits, dq = qm.dequantize_linear("experts", q_type, (g, k, n), bytes(packed), scales,
                                     TensorProto.FLOAT, axis=1, block_size=QK)
    del packed
    node = helper.make_node("GroupedMatMul", ["X", "experts", "indices"], ["Y"],
                            name="grouped_matmul")
    graph = helper.make_graph(
        [dq, node], default_model_name(tensor_name),
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["M", k]),
         helper.make_tensor_value_info("indices", TensorProto.INT64, ["M", top_k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", top_k, n])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 29)])
    model.ir_version = 8
    model.doc_string = (f"{tensor_name} ({type_name(ggml_type)}) of "
                        f"{os.path.basename(gguf.path)}, by scripts/gguf_to_onnx.py")
    for key, value in (("gguf_tensor", tensor_name), ("gguf_type", type_name(ggml_type))):
        model.metadata_props.add(key=key, value=value)
    kind = "INT8" if ggml_type == Q8_0 else "INT4"
    return model, (f"{type_name(ggml_type)} -> {kind}, blocks of {QK}: {g} experts, "
                   f"K {k}, N {n}, top-{top_k}")


def convert(path, tensor_names, out, model_name=None, accuracy_level=None, top_k=8):
    """Writes one model per tensor into the repository `out`; returns their paths."""
    if model_name and len(tensor_names) != 1:
        raise GGUFError("a model name names one model: give one tensor")
    names = [model_name] if model_name else [default_model_name(t) for t in tensor_names]
    if len(set(names)) != len(names):
        raise GGUFError(f"two tensors would be written as the same model: {names}")
    written = []
    with GGUFFile(path) as gguf:
        for t in tensor_names:  # every tensor checked before anything is written
            gguf.tensor(t)
        for tensor_name, name in zip(tensor_names, names):
            model, what = expert_model(gguf, tensor_name, top_k)
            output = os.path.join(out, name, "1", "model.onnx")
            qm.save_model(model, output, accuracy_level)
            del model
            print(f"{output}: {tensor_name}, {what}")
            written.append(output)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gguf", help="the GGUF file")
    parser.add_argument("--tensor", action="append", required=True,
                        help="an expert tensor to convert, e.g. blk.0.ffn_up_exps.weight "
                             "(repeatable: one model each)")
    parser.add_argument("--out", required=True, help="the model repository to write into")
    parser.add_argument("--model_name", help="the model's name (one --tensor only; default: "
                                             "the tensor's name, dots as underscores)")
    parser.add_argument("--top_k", type=int, default=8,
                        help="S, the experts per row in `indices` [M, S] (default 8)")
    parser.add_argument("--accuracy_level", choices=("0", "4"),
                        help="also write config.pbtxt with this accuracy_level: 4 runs the "
                             "model on 8-bit activations (docs/quantized-models.md)")
    args = parser.parse_args(argv)
    if args.model_name is not None:
        if len(args.tensor) != 1:
            parser.error("--model_name names one model: give one --tensor")
        if not MODEL_NAME.match(args.model_name):
            parser.error(f"--model_name '{args.model_name}': 1 to 128 characters of "
                         "A-Z a-z 0-9 _ . - not starting with '.'")
    if args.top_k < 1:
        parser.error("--top_k must be at least 1")
    try:
        convert(args.gguf, args.tensor, args.out, args.model_name, args.accuracy_level,
                args.top_k)
    except GGUFError as e:
        print(f"gguf_to_onnx: {args.gguf}: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"gguf_to_onnx: {e.filename or args.gguf}: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
