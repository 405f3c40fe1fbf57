#!/usr/bin/python3
"""scripts/gguf_to_onnx.py: GGUF files written here by the spec (llama.cpp's docs/gguf.md,
with its own small writer) convert to models whose dequantized weights are, bit for bit,
the GGUF blocks dequantized independently (block by block with struct, in float64) and
transposed to [G, K, N]; the model's GroupedMatMul, run by make_moe_layer's float64 graph
interpreter, is x @ W[idx]; config.pbtxt has accuracy_level when asked; and truncated or
corrupt files, another type, another shape and a missing name are refused with exit
status 1 and a one-line message naming the problem, never a traceback."""
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_to_onnx as g2o  # noqa: E402
import make_moe_layer  # noqa: E402

SCRIPT = os.path.join(HERE, "gguf_to_onnx.py")
K, N, G = 64, 24, 4
Q8_NAME, Q4_NAME, F32_NAME = "blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight", \
    "blk.0.attn_norm.weight"
T_F32, T_Q4_0, T_Q8_0 = 0, 2, 8

# ------------------------------------------------------------------ a GGUF writer, by the spec


def _string(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q",
           11: "<q", 12: "<d"}


def _value(vtype, value):
    if vtype == 8:
        return _string(value)
    if vtype == 9:
        elem_type, items = value
        out = struct.pack("<IQ", elem_type, len(items))
        return out + b"".join(_value(elem_type, v) for v in items)
    return struct.pack(_SCALAR[vtype], value)


def gguf_bytes(kvs, tensors, alignment=32, version=3, magic=b"GGUF"):
    """kvs: (key, value type, value), an array's value (element type, items); tensors: dicts
    of name, dims (ne[0] first), type, data, and optionally offset (else the next aligned
    place). Returns the file's bytes."""
    out = bytearray(magic + struct.pack("<IQQ", version, len(tensors), len(kvs)))
    for key, vtype, value in kvs:
        out += _string(key) + struct.pack("<I", vtype) + _value(vtype, value)
    offset, placed = 0, []
    for t in tensors:
        placed.append(offset)
        offset += -(-len(t["data"]) // alignment) * alignment
    for t, where in zip(tensors, placed):
        out += _string(t["name"]) + struct.pack("<I", len(t["dims"]))
        out += b"".join(struct.pack("<Q", d) for d in t["dims"])
        out += struct.pack("<IQ", t["type"], t.get("offset", where))
    out += bytes(-len(out) % alignment)  # the data section starts aligned
    data = bytearray(offset)
    for t, where in zip(tensors, placed):
        data[where:where + len(t["data"])] = t["data"]
    return bytes(out) + bytes(data)


def random_scales(rng, count):
    """FP16 scales with the awkward ones among them: 0, negative, subnormal, the largest."""
    d = (rng.standard_normal(count) * 0.01).astype(np.float16)
    special = np.array([0.0, -0.0, 2.0 ** -24, -(2.0 ** -20), 65504.0, -65504.0, 6.1e-5],
                       np.float16)
    d[:len(special)] = special
    return d


def q8_0_blocks(rng, count):
    d = random_scales(rng, count)
    q = rng.integers(-128, 128, (count, 32)).astype(np.int8)
    q[0, :2] = (-128, 127)
    return b"".join(d[i].tobytes() + q[i].tobytes() for i in range(count))


def q4_0_blocks(rng, count):
    d = random_scales(rng, count)
    qs = rng.integers(0, 256, (count, 16)).astype(np.uint8)
    qs[0, :2] = (0x0F, 0xF0)
    return b"".join(d[i].tobytes() + qs[i].tobytes() for i in range(count))


def dequantize_gguf(data, ggml_type, dims):
    """llama.cpp's dequantization, block by block with struct, in float64: [G, N, K]."""
    k, n, g = dims
    w = np.zeros(g * n * k)
    size = 34 if ggml_type == T_Q8_0 else 18
    for b in range(g * n * k // 32):
        block = data[b * size:(b + 1) * size]
        (d,) = struct.unpack("<e", block[:2])
        if ggml_type == T_Q8_0:
            values = [d * q for q in struct.unpack("<32b", block[2:])]
        else:
            values = [0.0] * 32
            for i, byte in enumerate(block[2:]):
                values[i] = d * ((byte & 15) - 8)
                values[i + 16] = d * ((byte >> 4) - 8)
        w[b * 32:(b + 1) * 32] = values
    return w.reshape(g, n, k)


def sample_file(rng):
    """(bytes, {name: (type, data, dims)}): two expert tensors and an F32 one, with metadata."""
    q8 = q8_0_blocks(rng, G * N * K // 32)
    q4 = q4_0_blocks(rng, G * N * K // 32)
    f32 = rng.standard_normal(K).astype(np.float32).tobytes()
    kvs = [("general.architecture", 8, "olmoe"),
           ("general.alignment", 4, 32),
           ("olmoe.expert_count", 4, G),
           ("olmoe.expert_used_count", 4, 2),
           ("tokenizer.ggml.tokens", 9, (8, ["<s>", "</s>", "héllo", ""])),
           ("tokenizer.ggml.scores", 9, (6, [0.0, -1.5, 2.25])),
           ("general.quantized", 7, 1),
           ("general.size", 10, 123456789012)]
    tensors = [dict(name=F32_NAME, dims=[K], type=T_F32, data=f32),
               dict(name=Q8_NAME, dims=[K, N, G], type=T_Q8_0, data=q8),
               dict(name=Q4_NAME, dims=[K, N, G], type=T_Q4_0, data=q4)]
    return gguf_bytes(kvs, tensors), {Q8_NAME: (T_Q8_0, q8, (K, N, G)),
                                      Q4_NAME: (T_Q4_0, q4, (K, N, G))}, kvs, tensors


# ------------------------------------------------------------------ reading the model back


def model_weights(model):
    """The weights [G, K, N] the model's DequantizeLinear writes, in float64, decoded here
    from its initializers (INT4: two per byte, low nibble first, sign-extended)."""
    inits = {t.name: t for t in model.graph.initializer}
    dq = model.graph.node[0]
    q_t, s_t = inits[dq.input[0]], inits[dq.input[1]]
    raw = np.frombuffer(q_t.raw_data, np.uint8)
    if q_t.data_type == TensorProto.INT8:
        q = raw.view(np.int8).astype(np.int64)
    else:
        nib = np.empty(raw.size * 2, np.int64)
        nib[0::2], nib[1::2] = raw & 15, raw >> 4
        q = np.where(nib >= 8, nib - 16, nib)
    q = q.reshape(tuple(q_t.dims))
    scale = numpy_helper.to_array(s_t).astype(np.float64)
    return q * np.repeat(scale, 32, axis=1), q_t, s_t, dq


class GGUFToONNXTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.rng = np.random.default_rng(42)
        self.data, self.expect, self.kvs, self.tensors = sample_file(self.rng)
        self.path = self.write("model.gguf", self.data)

    def write(self, name, data):
        path = os.path.join(self.tmp.name, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                              timeout=120)

    def test_the_file_is_read_by_the_spec(self):
        with g2o.GGUFFile(self.path) as f:
            self.assertEqual(f.version, 3)
            self.assertEqual(f.alignment, 32)
            self.assertEqual(f.metadata["general.architecture"], "olmoe")
            self.assertEqual(f.metadata["tokenizer.ggml.tokens"], ["<s>", "</s>", "héllo", ""])
            np.testing.assert_array_equal(f.metadata["tokenizer.ggml.scores"], [0, -1.5, 2.25])
            self.assertIs(f.metadata["general.quantized"], True)
            self.assertEqual(f.metadata["general.size"], 123456789012)
            self.assertEqual(sorted(f.tensors), sorted([F32_NAME, Q8_NAME, Q4_NAME]))
            self.assertEqual(f.tensors[Q4_NAME].dims, [K, N, G])
            self.assertEqual(f.data_start % 32, 0)
        v2 = self.write("v2.gguf", gguf_bytes(self.kvs, self.tensors, version=2))
        with g2o.GGUFFile(v2) as f:
            self.assertEqual((f.version, f.tensors[Q8_NAME].dims), (2, [K, N, G]))

    def test_weights_are_llama_cpp_s_bit_for_bit(self):
        out = os.path.join(self.tmp.name, "repo")
        r = self.run_script(self.path, "--tensor", Q8_NAME, "--tensor", Q4_NAME, "--out", out,
                            "--top_k", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        for name, kind, q_type in ((Q8_NAME, "blk_0_ffn_up_exps", TensorProto.INT8),
                                   (Q4_NAME, "blk_0_ffn_down_exps", g2o.qm.INT4)):
            with self.subTest(tensor=name):
                ggml_type, data, dims = self.expect[name]
                want = dequantize_gguf(data, ggml_type, dims).transpose(0, 2, 1)  # [G, K, N]
                model_dir = os.path.join(out, kind)
                self.assertFalse(os.path.exists(os.path.join(model_dir, "config.pbtxt")))
                model = onnx.load(os.path.join(model_dir, "1", "model.onnx"))
                self.assertTrue(os.path.exists(os.path.join(model_dir, "1", "weights.bin")))
                got, q_t, s_t, dq = model_weights(model)
                self.assertEqual(got.shape, (G, K, N))
                self.assertEqual(got.tobytes(), want.tobytes())  # bit for bit, signs of 0
                self.assertEqual(q_t.data_type, q_type)
                self.assertEqual(list(q_t.dims), [G, K, N])
                self.assertEqual(s_t.data_type, TensorProto.FLOAT)
                self.assertEqual(list(s_t.dims), [G, K // 32, N])
                self.assertEqual(len(dq.input), 2)  # symmetric: no zero point
                attrs = {a.name: onnx.helper.get_attribute_value(a) for a in dq.attribute}
                self.assertEqual(attrs, {"axis": 1, "block_size": 32})
                self.assertEqual([n.op_type for n in model.graph.node],
                                 ["DequantizeLinear", "GroupedMatMul"])
                shapes = {v.name: (v.type.tensor_type.elem_type,
                                   [d.dim_value or d.dim_param
                                    for d in v.type.tensor_type.shape.dim])
                          for v in list(model.graph.input) + list(model.graph.output)}
                self.assertEqual(shapes, {"X": (TensorProto.FLOAT, ["M", K]),
                                          "indices": (TensorProto.INT64, ["M", 2]),
                                          "Y": (TensorProto.FLOAT, ["M", 2, N])})
                # The model's GroupedMatMul (make_moe_layer's float64 graph interpreter)
                # against x @ W[idx] computed directly from the GGUF dequantization.
                x = self.rng.standard_normal((5, K))
                idx = self.rng.integers(0, G, (5, 2))
                y = make_moe_layer.evaluate(model, {"X": x, "indices": idx})["Y"]
                direct = np.array([[x[m] @ want[idx[m, s]] for s in range(2)]
                                   for m in range(5)])
                self.assertEqual(y.shape, (5, 2, N))
                np.testing.assert_allclose(y, direct, rtol=1e-12, atol=1e-300)

    def test_accuracy_level_and_model_name(self):
        out = os.path.join(self.tmp.name, "repo")
        r = self.run_script(self.path, "--tensor", Q4_NAME, "--out", out, "--model_name",
                            "olmoe_down", "--accuracy_level", "4")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "olmoe_down", "config.pbtxt")) as f:
            self.assertEqual(f.read(), g2o.qm.accuracy_level_config("4"))
        model = onnx.load(os.path.join(out, "olmoe_down", "1", "model.onnx"))
        self.assertEqual(model.graph.input[1].type.tensor_type.shape.dim[1].dim_value, 8)
        self.assertEqual({p.key: p.value for p in model.metadata_props},
                         {"gguf_tensor": Q4_NAME, "gguf_type": "Q4_0"})

    def refused(self, data, tensor, *words):
        path = self.write("bad.gguf", data)
        r = self.run_script(path, "--tensor", tensor, "--out",
                            os.path.join(self.tmp.name, "bad_repo"))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        for word in words:
            self.assertIn(word, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "bad_repo")))
        return r.stderr

    def variant(self, **changes):
        """The sample file with one tensor's fields changed (tensor=NAME selects it)."""
        name = changes.pop("tensor", Q8_NAME)
        tensors = [dict(t, **changes) if t["name"] == name else t for t in self.tensors]
        return gguf_bytes(self.kvs, tensors)

    def test_bad_files_are_refused_by_name(self):
        self.refused(self.data[:len(self.data) - 100], Q4_NAME, "runs past the end", Q4_NAME)
        self.refused(self.data[:200], Q8_NAME, "truncated")
        self.refused(self.data[:10], Q8_NAME, "truncated", "header")
        self.refused(b"", Q8_NAME, "truncated")
        self.refused(b"GGML" + self.data[4:], Q8_NAME, "not a GGUF file", "magic")
        self.refused(self.variant(offset=1 << 40), Q8_NAME, "offset", "past the end")
        self.refused(self.variant(offset=33), Q8_NAME, "offset", "multiple of the alignment")
        self.refused(self.variant(type=99), Q8_NAME, "unknown ggml type 99")
        self.refused(self.variant(type=12), Q8_NAME, "Q4_K", "only Q4_0 and Q8_0")
        self.refused(self.data, "blk.7.ffn_up_exps.weight", "no tensor",
                     "blk.7.ffn_up_exps.weight")
        self.refused(self.data, F32_NAME, "F32, not quantized")
        self.refused(self.variant(dims=[K, N * G]), Q8_NAME, "2 dimensions")
        self.refused(self.variant(dims=[48, N, G]), Q8_NAME, "48 is not a multiple of 32")
        self.refused(self.variant(dims=[K, N, G, 1, 1]), Q8_NAME, "5 dimensions")
        self.refused(self.data[:8] + struct.pack("<Q", 1 << 62) + self.data[16:], Q8_NAME,
                     "tensor count")
        self.refused(self.data[:4] + struct.pack("<I", 1) + self.data[8:], Q8_NAME, "version 1")
        self.refused(self.data[:4] + struct.pack(">I", 3) + self.data[8:], Q8_NAME, "big-endian")
        d = bytearray(self.data)
        d[24:32] = struct.pack("<Q", 1 << 50)  # the first key's length
        self.refused(bytes(d), Q8_NAME, "metadata key #0", "bytes long")
        d[24:32] = struct.pack("<Q", 60000)
        self.refused(bytes(d), Q8_NAME, "truncated", "metadata key #0")
        q8 = bytearray(self.expect[Q8_NAME][1])
        q8[34 * 5:34 * 5 + 2] = np.float16(np.inf).tobytes()  # a d in expert 0
        self.refused(self.variant(data=bytes(q8)), Q8_NAME, "expert 0", "not finite")
        bad_alignment = [(k, t, 48 if k == "general.alignment" else v) for k, t, v in self.kvs]
        self.refused(gguf_bytes(bad_alignment, self.tensors), Q8_NAME, "general.alignment",
                     "power of two")

    def test_every_truncation_and_corruption_of_the_header_is_refused_cleanly(self):
        """Every cut of the header, metadata and infos, and every byte of them set to 0xFF
        or 0x7F: GGUFError or a file that reads, never another exception. In process."""
        with g2o.GGUFFile(self.path) as f:
            end = f.data_start
        for cut in range(end + 1):
            path = self.write("cut.gguf", self.data[:cut])
            with self.subTest(cut=cut), self.assertRaises(g2o.GGUFError):
                with g2o.GGUFFile(path) as f:
                    f.tensor(Q8_NAME)
        for pos in range(end):
            for byte in (0xFF, 0x7F):
                d = bytearray(self.data)
                d[pos] = byte
                path = self.write("flip.gguf", bytes(d))
                with self.subTest(pos=pos, byte=byte):
                    try:
                        with g2o.GGUFFile(path) as f:
                            for name in (Q8_NAME, Q4_NAME):
                                if name in f.tensors:
                                    _, _, experts = f.expert_weights(name)
                                    for _ in experts:
                                        pass
                    except g2o.GGUFError:
                        pass


if __name__ == "__main__":
    unittest.main()
