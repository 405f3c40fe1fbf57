"""Resident GroupedMatMul weights packed once at load (issue 15): FP32 into
the panels of BLIS's micro-kernel, BF16 into pair panels for the vdpbf16ps
kernel (where it is measured fast, or --bf16_panels=on; run here both on and
off), FP16 into panels of halves (widened in registers); FP64 stays
row-major. Through the real server and its model repository, for every
datatype: answers equal the exact reference within the rigorous bound, and
the built-in operator's answer on the same weights bit for bit where the sums
are exact (small integers), over rows per expert that take each path
(streaming decode, the panel path, blocks of 512 rows), K across the kernels'
K blocks and odd (16-bit pairs), N across panel edges, and routing that leaves
experts unused or sends most tokens to one."""
import shutil
import subprocess
import tempfile
import unittest

import numpy as np
from onnx import TensorProto

from gemmserve_client import decode_outputs, make_infer_request, pb2
from gemmserve_testing.base import GemmServeTestCase
from gemmserve_testing.cpu import avx512_build, kernel_flags
from gemmserve_testing.onnx_models import batching_config, grouped_graph, matmul_graph, write_model
from gemmserve_testing.references import (assert_grouped_matmul_result, assert_matmul_result,
                                          random_wire, small_int_wire)
from gemmserve_testing.server import server_binary

K, N, G, S = 777, 100, 6, 2
DATATYPES = ("FP32", "FP64", "BF16", "FP16")
_ONNX = {"FP32": TensorProto.FLOAT, "FP64": TensorProto.DOUBLE, "BF16": TensorProto.BFLOAT16,
         "FP16": TensorProto.FLOAT16}
RNG = np.random.default_rng(15)
# Per datatype: real-valued weights and bias, and small-integer ones.
WEIGHTS = {}
_REPO = tempfile.mkdtemp(prefix="gemmserve-packed-")
for _dt in DATATYPES:
    for _kind, _make in (("real", random_wire), ("int", small_int_wire)):
        _w = _make(RNG, _dt, (G, K, N))
        _b = _make(RNG, _dt, (G, N))
        _name = f"moe_{_dt.lower()}_{_kind}"
        WEIGHTS[_name] = (_w, _b)
        write_model(_REPO, _name, grouped_graph(_name, _w, S, bias=_b, onnx_type=_ONNX[_dt]),
                    config=batching_config(100))
        # A resident MatMul's B [K, N] is packed the same way (one group).
        _bm = _make(RNG, _dt, (K, N))
        _name = f"lin_{_dt.lower()}_{_kind}"
        WEIGHTS[_name] = (_bm, None)
        write_model(_REPO, _name, matmul_graph(_name, _bm, onnx_type=_ONNX[_dt]),
                    config=batching_config(100))


# Three columns: panels of 32 would hold ten times the weights, so they stay row-major.
NARROW_W = random_wire(RNG, "FP32", (G, K, 3))
write_model(_REPO, "moe_narrow", grouped_graph("moe_narrow", NARROW_W, S))


def tearDownModule():
    shutil.rmtree(_REPO, ignore_errors=True)


def routing(m, kind, rng):
    if kind == "skewed":  # most tokens to expert 0, expert G-1 never
        idx = rng.integers(1, G - 1, (m, S))
        idx[: (3 * m) // 4, 0] = 0
        return idx.astype(np.int64)
    return np.stack([rng.permutation(G)[:S] for _ in range(m)]).astype(np.int64).reshape(m, S)


class PackedResidentTest(GemmServeTestCase):
    # BF16 on pair panels whatever vdpbf16ps's speed here, so they are tested on every CPU.
    server_flags = (f"--model_repository={_REPO}", "--bf16_panels=on")
    datatypes = DATATYPES

    def resident(self, name, x, idx, datatype):
        return decode_outputs(self.infer(make_infer_request(
            name, [("tokens", x, datatype), ("routing", idx)])))["expert_out"]

    def built_in(self, w, b, x, idx, datatype):
        return decode_outputs(self.infer(make_infer_request(
            "grouped_matmul", [("input", x, datatype), ("weights", w, datatype),
                               ("group_indices", idx), ("bias", b, datatype)])))["output"]

    def test_answers_equal_the_reference_on_every_path_and_datatype(self):
        rng = np.random.default_rng(150)
        for datatype in self.datatypes:
            name = f"moe_{datatype.lower()}_real"
            w, b = WEIGHTS[name]
            for m, kind in ((1, "uniform"), (7, "uniform"), (16, "uniform"), (17, "skewed"),
                            (64, "uniform"), (300, "skewed"), (1600, "skewed")):
                with self.subTest(datatype=datatype, m=m, routing=kind):
                    x = random_wire(rng, datatype, (m, K))
                    idx = routing(m, kind, rng)
                    got = self.resident(name, x, idx, datatype)
                    assert_grouped_matmul_result(got, x, w, idx, b, datatype,
                                                 f"resident {name} M={m}")

    def linear(self, name, x, datatype):
        return decode_outputs(self.infer(make_infer_request(
            name, [("hidden", x, datatype)])))["projected"]

    def test_resident_matmul_answers_equal_the_reference_and_the_built_in_operator(self):
        rng = np.random.default_rng(153)
        for datatype in self.datatypes:
            for m in (1, 7, 16, 17, 64, 300, 1100):
                with self.subTest(datatype=datatype, m=m):
                    b, _ = WEIGHTS[f"lin_{datatype.lower()}_real"]
                    x = random_wire(rng, datatype, (m, K))
                    assert_matmul_result(self.linear(f"lin_{datatype.lower()}_real", x, datatype),
                                         x, b, datatype, f"resident MatMul {datatype} M={m}")
                    b, _ = WEIGHTS[f"lin_{datatype.lower()}_int"]
                    x = small_int_wire(rng, datatype, (m, K), bound=4)
                    resident = self.linear(f"lin_{datatype.lower()}_int", x, datatype)
                    built_in = decode_outputs(self.infer(make_infer_request(
                        "matmul", [("A", x, datatype), ("B", b, datatype)])))["Y"]
                    self.assertEqual(resident.shape, (m, N))
                    self.assertEqual(resident.tobytes(), built_in.tobytes(),
                                     f"lin {datatype} M={m}: resident and built-in differ")

    def test_answers_equal_the_built_in_operator_bit_for_bit_where_sums_are_exact(self):
        rng = np.random.default_rng(151)
        for datatype in self.datatypes:
            name = f"moe_{datatype.lower()}_int"
            w, b = WEIGHTS[name]
            for m, kind in ((1, "uniform"), (5, "skewed"), (16, "uniform"), (33, "skewed"),
                            (200, "uniform"), (1100, "skewed")):
                with self.subTest(datatype=datatype, m=m, routing=kind):
                    x = small_int_wire(rng, datatype, (m, K), bound=4)
                    idx = routing(m, kind, rng)
                    resident = self.resident(name, x, idx, datatype)
                    built_in = self.built_in(w, b, x, idx, datatype)
                    self.assertEqual(resident.shape, (m, S, N))
                    self.assertEqual(resident.tobytes(), built_in.tobytes(),
                                     f"{name} M={m}: resident and built-in differ")


    def test_the_bf16_layout_is_the_one_asked_for(self):
        on = "--bf16_panels=on" in self.server_flags
        want = "panels" if on and avx512_build(kernel_flags()) else "row_major"
        for name in ("moe_bf16_real", "lin_bf16_real"):
            config = self.stub.ModelConfig(pb2.ModelConfigRequest(name=name), timeout=10).config
            self.assertEqual(config.parameters["weights_layout"].string_value, want, name)


class Bf16RowMajorResidentTest(PackedResidentTest):
    """BF16 experts kept row-major (--bf16_panels=off, as auto chooses where
    vdpbf16ps is slow): the same answers, on BLIS with widened values."""
    server_flags = (f"--model_repository={_REPO}", "--bf16_panels=off")
    datatypes = ("BF16",)


class PackedLayoutTest(GemmServeTestCase):
    server_flags = (f"--model_repository={_REPO}",)

    def test_model_config_says_how_the_weights_are_held_and_what_they_cost(self):
        sizes = {"FP32": 4, "FP64": 8, "BF16": 2, "FP16": 2}
        # FP64 stays row-major (PackedWeights::PackedAtLoad: its panels lost at serving
        # sizes); BF16 goes on panels only where the start-up probe found vdpbf16ps fast,
        # as the server's log says.
        log = self.server.stderr_text(limit=1 << 24)
        self.assertRegex(log, r"BF16 weights (pair panels|row-major) \(auto: vdpbf16ps does "
                              r"[0-9.]+x FP32 FMA's flops here|BF16 weights row-major \(no AVX-512")
        packed = {"FP32"} | ({"FP16"} if avx512_build(kernel_flags()) else set())
        if "BF16 weights pair panels" in log:
            packed.add("BF16")
        for datatype, kind in ((d, k) for d in DATATYPES for k in ("moe", "lin")):
            name = f"{kind}_{datatype.lower()}_real"
            with self.subTest(datatype=datatype, model=name):
                config = self.stub.ModelConfig(pb2.ModelConfigRequest(name=name), timeout=10).config
                params = {k: v.string_value for k, v in config.parameters.items()}
                self.assertEqual(params["weights_layout"],
                                 "panels" if datatype in packed else "row_major")
                dense = (G if kind == "moe" else 1) * K * N * sizes[datatype]
                held = int(params["weights_bytes"])
                # Panels pad N to whole panels (32 columns: 100 -> 128) and 16-bit K to pairs.
                self.assertGreaterEqual(held, dense)
                self.assertLessEqual(held, dense * 1.35 if datatype in packed else dense)
                # What the load measured is logged, not part of the config (it would
                # not load back equal).
                self.assertNotIn("pack_ms", params)

    def test_weights_far_narrower_than_a_panel_stay_row_major_and_answer(self):
        config = self.stub.ModelConfig(pb2.ModelConfigRequest(name="moe_narrow"), timeout=10).config
        params = {k: v.string_value for k, v in config.parameters.items()}
        self.assertEqual(params["weights_layout"], "row_major")
        self.assertEqual(int(params["weights_bytes"]), G * K * 3 * 4)
        rng = np.random.default_rng(152)
        x = random_wire(rng, "FP32", (9, K))
        idx = routing(9, "uniform", rng)
        got = decode_outputs(self.infer(make_infer_request(
            "moe_narrow", [("tokens", x), ("routing", idx)])))["expert_out"]
        assert_grouped_matmul_result(got, x, NARROW_W, idx, None, "FP32", "moe_narrow")


class Bf16PanelsFlagTest(unittest.TestCase):
    def test_an_unknown_value_stops_the_server_with_a_clear_message(self):
        result = subprocess.run([server_binary(), "--bf16_panels=sometimes", "--grpc_port=0",
                                 "--metrics_port=-1", "--host=127.0.0.1"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("--bf16_panels: expected auto, on or off, got 'sometimes'", result.stderr)


if __name__ == "__main__":
    unittest.main()
