"""llama.cpp's own GGUF writer, quantizer and dequantizer (ggml's libggml-base, the
prebuilt library bench/ggml/install.sh fetches from npm), through ctypes: a GGUF file
written by something other than gemmserve's converter, and the weights as llama.cpp
itself reads them back.

    lib = Ggml.load(build_dir)                  # None, with Ggml.why, where npm cannot
    data = lib.quantize(Ggml.Q4_0, w)          # w float32 [rows, K], K a multiple of 32
    lib.write_gguf(path, {"blk.0.ffn_up_exps.weight": (Ggml.Q4_0, (K, N, G), data)},
                   {"general.architecture": "olmoe"})
    w_as_llama_reads_it = lib.dequantize(Ggml.Q4_0, data, K * N * G)
"""
import ctypes
import os
import subprocess

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p),
                ("no_alloc", ctypes.c_bool)]


class Ggml:
    """libggml-base.so, loaded once."""
    F32, Q4_0, Q8_0 = 0, 2, 8
    _BLOCK_BYTES = {Q4_0: 18, Q8_0: 34}  # per 32 values: an FP16 scale and the integers
    why = ""

    @classmethod
    def load(cls, build_dir):
        """The library installed under `build_dir`/ggml (once per lock file), or None with
        `why` set when it cannot be installed (no npm, no registry)."""
        run = subprocess.run([os.path.join(_ROOT, "bench", "ggml", "install.sh"),
                              os.path.join(build_dir, "ggml")], capture_output=True, text=True)
        if run.returncode != 0:
            cls.why = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "failed"
            return None
        return cls(os.path.join(run.stdout.strip(), "libggml-base.so"))

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        p, i64, sz = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t
        for name, res, args in (
                ("ggml_quantize_chunk", sz, [ctypes.c_int, p, p, i64, i64, i64, p]),
                ("dequantize_row_q4_0", None, [p, p, i64]),
                ("dequantize_row_q8_0", None, [p, p, i64]),
                ("ggml_init", p, [_InitParams]), ("ggml_free", None, [p]),
                ("ggml_new_tensor", p, [p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(i64)]),
                ("ggml_set_name", p, [p, ctypes.c_char_p]), ("ggml_get_data", p, [p]),
                ("ggml_nbytes", sz, [p]), ("gguf_init_empty", p, []), ("gguf_free", None, [p]),
                ("gguf_set_val_str", None, [p, ctypes.c_char_p, ctypes.c_char_p]),
                ("gguf_set_val_u32", None, [p, ctypes.c_char_p, ctypes.c_uint32]),
                ("gguf_add_tensor", None, [p, p]),
                ("gguf_write_to_file", ctypes.c_bool, [p, ctypes.c_char_p, ctypes.c_bool])):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        self.lib = lib

    def quantize(self, ggml_type, rows):
        """Rows of float32 [rows, n] (n a multiple of 32) in `ggml_type`, as llama.cpp
        quantizes them (ggml_quantize_chunk)."""
        rows = np.ascontiguousarray(rows, np.float32)
        count, n = rows.shape
        out = ctypes.create_string_buffer(count * n // 32 * self._BLOCK_BYTES[ggml_type])
        size = self.lib.ggml_quantize_chunk(ggml_type, rows.ctypes.data, out, 0, count, n, None)
        if size != len(out.raw):
            raise AssertionError(f"ggml_quantize_chunk wrote {size} bytes, not {len(out.raw)}")
        return out.raw

    def dequantize(self, ggml_type, data, count):
        """`count` values of `data` as float32, as llama.cpp dequantizes them."""
        out = np.zeros(count, np.float32)
        buffer = ctypes.create_string_buffer(data, len(data))
        fn = {self.Q4_0: self.lib.dequantize_row_q4_0,
              self.Q8_0: self.lib.dequantize_row_q8_0}[ggml_type]
        fn(buffer, out.ctypes.data, count)
        return out

    def write_gguf(self, path, tensors, metadata):
        """A GGUF file by ggml's own writer: `tensors` {name: (type, dims, data)} (dims
        fastest first, as GGUF lists them), `metadata` {key: str or int (UINT32)}."""
        total = sum(len(data) for _, _, data in tensors.values())
        ctx = self.lib.ggml_init(_InitParams(total + 1024 * (len(tensors) + 1), None, False))
        gguf = self.lib.gguf_init_empty()
        try:
            for key, value in metadata.items():
                if isinstance(value, str):
                    self.lib.gguf_set_val_str(gguf, key.encode(), value.encode())
                else:
                    self.lib.gguf_set_val_u32(gguf, key.encode(), value)
            for name, (ggml_type, dims, data) in tensors.items():
                ne = (ctypes.c_int64 * len(dims))(*dims)
                t = self.lib.ggml_new_tensor(ctx, ggml_type, len(dims), ne)
                self.lib.ggml_set_name(t, name.encode())
                if self.lib.ggml_nbytes(t) != len(data):
                    raise AssertionError(f"{name}: {len(data)} bytes for "
                                         f"{self.lib.ggml_nbytes(t)}")
                ctypes.memmove(self.lib.ggml_get_data(t), data, len(data))
                self.lib.gguf_add_tensor(gguf, t)
            if not self.lib.gguf_write_to_file(gguf, path.encode(), False):
                raise AssertionError(f"gguf_write_to_file({path}) failed")
        finally:
            self.lib.gguf_free(gguf)
            self.lib.ggml_free(ctx)
