"""RELIABILITY.md, resident-model rows R1-R3, through the real server and its
model repository: a request must match the resident model's own signature
(rank, every fixed dimension, datatype, M agreeing between inputs) before
anything is sized from it, and a resident model answers exactly what the
built-in operator answers when fed the same weights (a differential property
test over random requests, valid and not).

Issue 12, finding 1: a GroupedMatMul model at S = 2 sent group_indices
[4, 8] sized its index buffer from the model and filled it from the request
(a heap overflow; with S = 1 vs 2 the response carried another request's
bytes). Each test checks the next valid requests, resident and built-in."""
import shutil
import tempfile
import unittest

import grpc
import numpy as np
from onnx import TensorProto

from gemmserve_client import decode_outputs, make_infer_request
from gemmserve_testing.base import GemmServeTestCase
from gemmserve_testing.onnx_models import (batching_config, grouped_graph, grouped_reference,
                                           matmul_graph, write_model)

INVALID = grpc.StatusCode.INVALID_ARGUMENT
RNG = np.random.default_rng(12)
K, N, G, S = 16, 8, 5, 2
# Small integers: every sum is exact whatever the order, so the resident and
# the built-in answers must be bit for bit the same.
W = RNG.integers(-4, 5, (G, K, N)).astype(np.float32)
BIAS = RNG.integers(-4, 5, (G, N)).astype(np.float32)
W_S1 = RNG.integers(-4, 5, (3, K, N)).astype(np.float32)
B_LIN = RNG.integers(-4, 5, (K, N)).astype(np.float64)

_REPO = tempfile.mkdtemp(prefix="gemmserve-resident-")
write_model(_REPO, "moe", grouped_graph("moe", W, S, bias=BIAS), config=batching_config(200))
write_model(_REPO, "moe_s1_int32", grouped_graph("moe_s1_int32", W_S1, 1,
                                                 index_type=TensorProto.INT32))
write_model(_REPO, "lin", matmul_graph("lin", B_LIN), config=batching_config(100))


def tearDownModule():
    shutil.rmtree(_REPO, ignore_errors=True)


def moe_request(x, idx, model="moe", x_type=None, idx_type=None):
    x_in = ("tokens", x) if x_type is None else ("tokens", x, x_type)
    idx_in = ("routing", idx) if idx_type is None else ("routing", idx, idx_type)
    return make_infer_request(model, [x_in, idx_in])


class ResidentModelRowsTest(GemmServeTestCase):
    server_flags = (f"--model_repository={_REPO}",)

    def assert_resident_models_still_serve(self):
        x = RNG.integers(-4, 5, (3, K)).astype(np.float32)
        idx = RNG.integers(0, G, (3, S)).astype(np.int64)
        np.testing.assert_array_equal(self.run_moe("moe", x, idx), grouped_reference(x, W, idx, BIAS))
        idx1 = RNG.integers(0, 3, (3, 1)).astype(np.int32)
        np.testing.assert_array_equal(self.run_moe("moe_s1_int32", x, idx1),
                                      grouped_reference(x, W_S1, idx1))
        a = RNG.integers(-4, 5, (2, K)).astype(np.float64)
        y = decode_outputs(self.infer(make_infer_request("lin", [("hidden", a)])))["projected"]
        np.testing.assert_array_equal(y, a @ B_LIN)

    def assert_refused(self, request, *details):
        self.assert_rejected(request, INVALID, details)
        self.assert_resident_models_still_serve()

    # ------------------------------------------------------------------ R1

    def test_r1_group_indices_wider_than_the_model_are_refused_not_read(self):
        x = np.ones((4, K), np.float32)
        for s in (8, 3, 1, 0):
            with self.subTest(s=s):
                self.assert_refused(moe_request(x, np.zeros((4, s), np.int64)), "routing",
                                    f"expected dimension 1 to be {S}")

    def test_r1_s1_model_with_int32_indices_refuses_s2(self):
        # The finding's leak: a model at S = 1 answered an S = 2 request with twice the
        # bytes, half of them another request's.
        x = np.ones((4, K), np.float32)
        self.assert_refused(moe_request(x, np.zeros((4, 2), np.int32), "moe_s1_int32"),
                            "routing", "expected dimension 1 to be 1")

    def test_r1_input_k_other_than_the_model_is_refused(self):
        for k in (K - 1, K + 1, 0):
            with self.subTest(k=k):
                self.assert_refused(moe_request(np.ones((2, k), np.float32),
                                                np.zeros((2, S), np.int64)),
                                    "tokens", f"expected dimension 1 to be {K}")
        self.assert_refused(make_infer_request("lin", [("hidden", np.ones((2, K + 3)))]),
                            "hidden", f"expected dimension 1 to be {K}")

    def test_r1_a_rank_other_than_the_models_is_refused(self):
        idx = np.zeros((2, S), np.int64)
        for x in (np.ones(K, np.float32), np.ones((2, K, 1), np.float32),
                  np.ones((1, 2, K), np.float32)):
            with self.subTest(tokens=x.shape):
                self.assert_refused(moe_request(x, idx), "tokens", "expected rank 2")
        for idx in (np.zeros(2, np.int64), np.zeros((2, S, 1), np.int64)):
            with self.subTest(routing=idx.shape):
                self.assert_refused(moe_request(np.ones((2, K), np.float32), idx), "routing",
                                    "expected rank 2")
        self.assert_refused(make_infer_request("lin", [("hidden", np.ones((2, 2, K)))]),
                            "hidden", "expected rank 2")

    def test_r1_m_differing_between_input_and_group_indices_is_refused(self):
        for rows in (3, 5, 0):
            with self.subTest(rows=rows):
                self.assert_refused(moe_request(np.ones((4, K), np.float32),
                                                np.zeros((rows, S), np.int64)),
                                    "routing", "first dimension")
        self.assert_refused(moe_request(np.ones((4, K), np.float32),
                                        np.zeros((2, 1), np.int32), "moe_s1_int32"), "routing")

    # ------------------------------------------------------------------ R2

    def test_r2_a_datatype_other_than_the_models_is_refused(self):
        x = np.ones((2, K), np.float32)
        idx = np.zeros((2, S), np.int64)
        for x_type in ("FP64", "FP16", "BF16", "INT32"):
            with self.subTest(tokens=x_type):
                self.assert_refused(moe_request(x, idx, x_type=x_type), "tokens",
                                    "is not accepted; expected FP32")
        self.assert_refused(moe_request(x, idx.astype(np.int32)), "routing",
                            "is not accepted; expected INT64")
        self.assert_refused(moe_request(x, np.zeros((2, 1), np.int64), "moe_s1_int32"),
                            "routing", "expected INT32")
        for datatype in ("FP32", "FP16", "INT64"):
            with self.subTest(hidden=datatype):
                request = make_infer_request("lin", [("hidden", np.ones((2, K)), datatype)])
                self.assert_refused(request, "hidden", "expected FP64")

    # ------------------------------------------------------------------ R3

    def test_r3_resident_and_built_in_answers_are_identical_over_random_requests(self):
        """Random requests, most valid, some with one dimension or datatype off the
        signature: the valid ones give the resident model and the built-in operator fed
        the same weights bit-identical answers; every other one is refused by the
        resident model."""
        rng = np.random.default_rng(1212)
        valid = refused = 0
        for case in range(120):
            m = int(rng.choice([0, 1, 2, 3, 5, 16, 17, 33]))
            x = rng.integers(-4, 5, (m, K)).astype(np.float32)
            idx = rng.integers(0, G, (m, S)).astype(np.int64)
            mutation = rng.integers(0, 6) if case % 3 == 2 else None
            x_shape, idx_shape, idx_type = list(x.shape), list(idx.shape), "INT64"
            if mutation == 0:
                idx_shape[1] = int(rng.choice([0, 1, 3, 8]))
            elif mutation == 1:
                x_shape[1] = int(rng.choice([0, K - 1, K + 1]))
            elif mutation == 2:
                idx_shape[0] = m + int(rng.choice([1, 2]))
            elif mutation == 3:
                x_shape = x_shape + [1]
            elif mutation == 4:
                idx_type = "INT32"
            elif mutation == 5:
                idx_shape = idx_shape[:1]
            if mutation is not None:
                x = rng.integers(-4, 5, x_shape).astype(np.float32)
                idx = rng.integers(0, G, idx_shape).astype(
                    np.int32 if idx_type == "INT32" else np.int64)
                error = self.rpc_error(self.stub.ModelInfer, moe_request(x, idx))
                self.assertEqual(error.code(), INVALID, f"case {case}: {error.details()}")
                refused += 1
                continue
            resident = self.run_moe("moe", x, idx)
            built_in = decode_outputs(self.infer(make_infer_request(
                "grouped_matmul", [("input", x), ("weights", W), ("group_indices", idx),
                                   ("bias", BIAS)])))["output"]
            self.assertEqual(resident.shape, (m, S, N))
            self.assertEqual(resident.tobytes(), built_in.tobytes(), f"case {case}, M={m}")
            np.testing.assert_array_equal(resident, grouped_reference(x, W, idx, BIAS))
            valid += 1
            # The resident MatMul against the built-in one, likewise.
            a = rng.integers(-4, 5, (m, K)).astype(np.float64)
            lin = decode_outputs(self.infer(make_infer_request("lin", [("hidden", a)])))
            mm = decode_outputs(self.infer(make_infer_request("matmul", [("A", a),
                                                                         ("B", B_LIN)])))
            self.assertEqual(lin["projected"].tobytes(), mm["Y"].tobytes(), f"case {case}")
        self.assertGreater(valid, 60)
        self.assertGreater(refused, 20)
        self.assert_resident_models_still_serve()


if __name__ == "__main__":
    unittest.main()
