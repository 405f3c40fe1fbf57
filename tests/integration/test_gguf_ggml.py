"""GGUF experts from llama.cpp's own tools (issue 54): a file written by ggml's GGUF writer
with weights quantized by ggml's quantizer (libggml-base from npm, gemmserve_testing.ggml),
converted by scripts/gguf_to_onnx.py and served. At accuracy_level 0 each answer is x @ W
with W as llama.cpp's own dequantize_row_* reads it back; at level 4 it is the level-4
arithmetic (activations quantized per block of 32, integer sums, the blocks' FP16 scales)
evaluated in float64 from the blocks' bytes as the GGUF spec lays them out, token by token,
and not the level-0 answer."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from gemmserve_client import decode_outputs, make_infer_request
from gemmserve_testing.base import open_channel
from gemmserve_testing.ggml import Ggml
from gemmserve_testing.references import assert_grouped_matmul_result
from gemmserve_testing.server import ServerProcess, server_binary
from gemmserve_client import pb2_grpc

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_ROOT, "scripts"))
import quantize_model  # noqa: E402

G, N, K, S = 6, 40, 96, 2  # K: three blocks of 32
TENSORS = {"blk.0.ffn_up_exps.weight": Ggml.Q4_0, "blk.0.ffn_down_exps.weight": Ggml.Q8_0}


def blocks(ggml_type, data):
    """(integers [blocks, 32], FP16 scales [blocks]) of Q4_0 or Q8_0 bytes, by the layout of
    the GGUF spec (ggml-common.h): an FP16 d, then 16 bytes of nibbles (value j in the low
    nibble of byte j, value j + 16 in its high one, each minus 8) or 32 int8."""
    raw = np.frombuffer(data, np.uint8)
    size = 18 if ggml_type == Ggml.Q4_0 else 34
    raw = raw.reshape(-1, size)
    d = raw[:, :2].copy().view(np.float16).reshape(-1)
    if ggml_type == Ggml.Q8_0:
        return raw[:, 2:].view(np.int8).astype(np.int64), d
    qs = raw[:, 2:].astype(np.int64)
    return np.concatenate([(qs & 15) - 8, (qs >> 4) - 8], axis=1), d


class GgufFromLlamaCppTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ggml = Ggml.load(os.path.dirname(os.path.dirname(server_binary())))
        if cls.ggml is None:
            why = f"llama.cpp's libggml-base is not installed: {Ggml.why}"
            # In CI a suite that cannot run fails, unless its variable says to skip it.
            if os.environ.get("CI") == "true" and os.environ.get("GEMMSERVE_SKIP_GGML") != "1":
                raise AssertionError(f"{why} (GEMMSERVE_SKIP_GGML=1 skips this suite)")
            raise unittest.SkipTest(why)
        cls.repo = tempfile.mkdtemp(prefix="gemmserve-gguf-ggml-")
        cls.addClassCleanup(shutil.rmtree, cls.repo, True)
        rng = np.random.default_rng(541)
        cls.data = {}
        for name, ggml_type in TENSORS.items():
            rows = rng.standard_normal((G * N, K)).astype(np.float32)
            cls.data[name] = cls.ggml.quantize(ggml_type, rows)
        path = os.path.join(cls.repo, "experts.gguf")
        cls.ggml.write_gguf(
            path, {name: (TENSORS[name], (K, N, G), data) for name, data in cls.data.items()},
            {"general.architecture": "olmoe", "olmoe.expert_count": G,
             "olmoe.expert_used_count": S})
        for name in TENSORS:
            for level in ("0", "4"):
                subprocess.run([sys.executable, os.path.join(_ROOT, "scripts", "gguf_to_onnx.py"),
                                path, "--tensor", name, "--out", cls.repo, "--top_k", str(S),
                                "--accuracy_level", level, "--model_name", cls.model(name, level)],
                               check=True, stdout=subprocess.DEVNULL)
        os.remove(path)
        cls.server = ServerProcess(f"--model_repository={cls.repo}").start()
        cls.addClassCleanup(cls.server.stop)
        cls.channel = open_channel(cls.server.address)
        cls.addClassCleanup(cls.channel.close)
        cls.stub = pb2_grpc.GRPCInferenceServiceStub(cls.channel)

    @staticmethod
    def model(tensor, level):
        return f"{tensor.split('.')[2]}_a{level}"

    def infer(self, model, x, idx):
        return decode_outputs(self.stub.ModelInfer(make_infer_request(
            model, [("X", x), ("indices", idx)]), timeout=60))["Y"]

    def test_level_0_serves_the_weights_llama_cpp_reads_back(self):
        rng = np.random.default_rng(542)
        for name, ggml_type in TENSORS.items():
            with self.subTest(name):
                w = self.ggml.dequantize(ggml_type, self.data[name], G * N * K)
                w = w.reshape(G, N, K).transpose(0, 2, 1)  # [G, K, N]
                x = rng.standard_normal((7, K)).astype(np.float32)
                idx = np.stack([rng.permutation(G)[:S] for _ in range(7)]).astype(np.int64)
                got = self.infer(self.model(name, "0"), x, idx)
                assert_grouped_matmul_result(got, x, w, idx, None, "FP32", name)

    def test_level_4_is_the_8_bit_arithmetic_on_the_blocks_llama_cpp_wrote(self):
        rng = np.random.default_rng(543)
        for name, ggml_type in TENSORS.items():
            with self.subTest(name):
                q, d = blocks(ggml_type, self.data[name])
                # The layout read right: d * q is what llama.cpp dequantizes, exactly.
                llama = self.ggml.dequantize(ggml_type, self.data[name], G * N * K)
                np.testing.assert_array_equal((d.astype(np.float32)[:, None] * q).reshape(-1),
                                              llama)
                q = q.reshape(G, N, K).transpose(0, 2, 1)  # [G, K, N]
                scale = d.astype(np.float64).reshape(G, N, K // 32).transpose(0, 2, 1)
                x = rng.standard_normal((7, K)).astype(np.float32)
                idx = np.stack([rng.permutation(G)[:S] for _ in range(7)]).astype(np.int64)
                got = self.infer(self.model(name, "4"), x, idx)
                exact = self.infer(self.model(name, "0"), x, idx)
                for t in range(7):
                    for j, e in enumerate(idx[t]):
                        want = quantize_model.int8_activation_matmul(
                            x[t:t + 1], q[e], scale[e], None, 32)[0]
                        # FP32's roundings of a sum of three blocks: 1e-5 of the largest.
                        bound = 1e-5 * np.abs(want).max()
                        np.testing.assert_allclose(got[t, j], want, rtol=0, atol=bound,
                                                   err_msg=f"token {t}, expert {e}")
                        # Level 4 was used: level 0's answer is outside that bound.
                        self.assertGreater(np.abs(exact[t, j] - want).max(), 10 * bound,
                                           f"token {t}, expert {e}")


if __name__ == "__main__":
    unittest.main()
