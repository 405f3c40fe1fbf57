"""MatMul through gRPC: every datatype against a reference, numpy.matmul's
broadcasting and 1-D promotion, zero-size dimensions, typed and raw contents,
requested outputs, and the response envelope."""
import unittest

import grpc
import numpy as np

from gemmserve_client import float32_to_bf16_bits, make_infer_request
from gemmserve_testing import references as ref
from gemmserve_testing.base import GemmServeTestCase

# Shapes include 1, primes and sizes around common kernel block edges.
SHAPES_2D = [((1, 1), (1, 1)), ((5, 37), (37, 3)), ((7, 13), (13, 11)),
             ((16, 16), (16, 16)), ((17, 65), (65, 9)), ((64, 63), (63, 65))]

# numpy.matmul: 1-D promotion on either side and batch broadcasting.
BROADCAST_SHAPES = [
    ((5,), (5,)),                      # 1-D x 1-D -> scalar, shape []
    ((4,), (2, 4, 3)),                 # 1-D x 3-D
    ((1, 2, 4, 3), (3,)),              # 4-D x 1-D
    ((3, 1, 3, 4), (1, 2, 4, 2)),      # batch broadcast both ways
    ((4,), (4, 3)),
    ((3, 4), (4,)),
    ((2, 1, 3, 4), (5, 4, 2)),         # different ranks
    ((1, 3, 4), (2, 4, 5)),
    ((2, 3, 4), (4, 5)),               # batched x plain matrix
]


class MatMulNumericsTest(GemmServeTestCase):

    def check(self, a_shape, b_shape, datatype, seed, typed=False):
        rng = np.random.default_rng(seed)
        a = ref.random_wire(rng, datatype, a_shape)
        b = ref.random_wire(rng, datatype, b_shape)
        y = self.run_matmul(a, b, datatype, typed=typed)
        ref.assert_matmul_result(y, a, b, datatype,
                                 f"matmul {list(a_shape)} x {list(b_shape)}")

    def test_every_datatype_matches_reference_on_2d_shapes(self):
        for datatype in ref.MATMUL_TYPES:
            for i, (a_shape, b_shape) in enumerate(SHAPES_2D):
                with self.subTest(datatype=datatype, a=a_shape, b=b_shape):
                    self.check(a_shape, b_shape, datatype, seed=i)

    def test_every_datatype_matches_reference_on_large_blocked_shapes(self):
        for datatype in ref.MATMUL_TYPES:
            with self.subTest(datatype=datatype):
                self.check((131, 257), (257, 129), datatype, seed=7)

    def test_every_datatype_matches_reference_on_multithreaded_sizes(self):
        # Big enough that the server splits the work across its compute threads.
        for datatype in ref.MATMUL_TYPES:
            with self.subTest(datatype=datatype):
                self.check((300, 512), (512, 301), datatype, seed=8)

    def test_many_small_batched_products_and_broadcast_b(self):
        for datatype in ("FP32", "FP16", "INT64"):
            for i, (a_shape, b_shape) in enumerate((((1000, 2, 3), (3, 2)),
                                                    ((2, 3), (100, 3, 4)),
                                                    ((5, 1, 4, 3), (1, 7, 3, 2)))):
                with self.subTest(datatype=datatype, a=a_shape, b=b_shape):
                    self.check(a_shape, b_shape, datatype, seed=200 + i)

    def test_every_datatype_follows_numpy_broadcasting_and_1d_promotion(self):
        for datatype in ref.MATMUL_TYPES:
            for i, (a_shape, b_shape) in enumerate(BROADCAST_SHAPES):
                with self.subTest(datatype=datatype, a=a_shape, b=b_shape):
                    self.check(a_shape, b_shape, datatype, seed=100 + i)

    def test_1d_times_1d_gives_a_scalar_of_shape_empty(self):
        a = np.array([1, 2, 3], np.float32)
        b = np.array([4, 5, 6], np.float32)
        y = self.run_matmul(a, b, "FP32")
        self.assertEqual(y.shape, ())
        self.assertEqual(float(y), 32.0)

    def test_fp16_accumulates_in_fp32_and_rounds_once_to_nearest_even(self):
        # Spacing of FP16 at 2048 is 2. Accumulating in FP16 would give 2048 for all
        # three rows; FP32 accumulation then one rounding gives 2050, 2048 (2049 is a
        # tie, to even) and 2052 (2051 is a tie, to even).
        a = np.array([[2048, 1, 1], [2048, 1, 0], [2048, 1, 2]], np.float16)
        b = np.ones((3, 1), np.float16)
        y = self.run_matmul(a, b, "FP16")
        np.testing.assert_array_equal(y, np.array([[2050], [2048], [2052]], np.float16))

    def test_bf16_accumulates_in_fp32_and_rounds_once_to_nearest_even(self):
        # Spacing of BF16 at 256 is 2: the same pattern as for FP16 at 2048.
        a = float32_to_bf16_bits(np.array([[256, 1, 1], [256, 1, 0], [256, 1, 2]], np.float32))
        b = float32_to_bf16_bits(np.ones((3, 1), np.float32))
        y = self.run_matmul(a, b, "BF16")
        np.testing.assert_array_equal(
            y, float32_to_bf16_bits(np.array([[258], [256], [260]], np.float32)))

    def test_half_precision_results_equal_the_correctly_rounded_exact_sum(self):
        # Quarter-integers: every partial sum is exact in FP32, so the only rounding
        # allowed is the final one, and the result must be bit-exact.
        rng = np.random.default_rng(3)
        av = rng.integers(-64, 64, size=(2, 6, 40)) / 4.0
        bv = rng.integers(-64, 64, size=(40, 5)) / 4.0
        exact = av @ bv
        for datatype in ("FP16", "BF16"):
            with self.subTest(datatype=datatype):
                y = self.run_matmul(ref.to_wire(datatype, av), ref.to_wire(datatype, bv),
                                    datatype)
                np.testing.assert_array_equal(y, ref.to_wire(datatype, exact))

    def test_integer_products_wrap_in_their_own_type(self):
        cases = {
            "INT32": ([[2**30, 2**30, 2**30, 2**30 + 5]], 5),          # 2^32 + 5 -> 5
            "UINT32": ([[2**31, 2**31, 7]], 7),                        # 2^32 + 7 -> 7
            "INT64": ([[2**62, 2**62, 2**62, 2**62 - 3]], -3),          # 2^64 - 3 -> -3
            "UINT64": ([[2**63, 2**63, 11]], 11),                      # 2^64 + 11 -> 11
        }
        for datatype, (row, expected) in cases.items():
            with self.subTest(datatype=datatype):
                a = ref.to_wire(datatype, np.array(row, dtype=object))
                b = ref.to_wire(datatype, np.ones((a.shape[1], 1), dtype=np.int64))
                y = self.run_matmul(a, b, datatype)
                self.assertEqual(y.tolist(), [[expected]])
        # Negative products and sums in INT32: (-2^31) * (-1) wraps to -2^31.
        a = np.array([[-2**31]], np.int32)
        b = np.array([[-1]], np.int32)
        self.assertEqual(self.run_matmul(a, b, "INT32").tolist(), [[-2**31]])

    def test_zero_size_dimensions_give_correctly_shaped_results(self):
        cases = [((0, 3), (3, 4)),         # M = 0
                 ((2, 3), (3, 0)),         # N = 0
                 ((0, 2, 3), (0, 3, 4)),   # batch 0
                 ((0, 2, 3), (1, 3, 4)),   # batch 0 broadcast against 1
                 ((0,), (0,)),             # 1-D with K = 0 -> scalar 0
                 ((2, 0), (0, 3)),         # K = 0 -> zeros
                 ((2, 2, 0), (0, 3))]
        for datatype in ref.MATMUL_TYPES:
            for a_shape, b_shape in cases:
                with self.subTest(datatype=datatype, a=a_shape, b=b_shape):
                    rng = np.random.default_rng(0)
                    a = ref.random_wire(rng, datatype, a_shape)
                    b = ref.random_wire(rng, datatype, b_shape)
                    y = self.run_matmul(a, b, datatype)
                    expected_shape = np.matmul(np.zeros(a_shape), np.zeros(b_shape)).shape
                    self.assertEqual(y.shape, expected_shape)
                    # Every element of a K = 0 product is an empty sum: +0.
                    self.assertTrue(np.all(ref.decode_float(datatype, y) == 0))

    def test_typed_contents_give_the_same_result_as_raw_contents(self):
        for datatype in ("FP32", "FP64", "INT32", "INT64", "UINT32", "UINT64"):
            with self.subTest(datatype=datatype):
                rng = np.random.default_rng(11)
                a = ref.random_wire(rng, datatype, (3, 7))
                b = ref.random_wire(rng, datatype, (7, 4))
                typed = self.run_matmul(a, b, datatype, typed=True)
                raw = self.run_matmul(a, b, datatype, typed=False)
                ref.assert_matmul_result(typed, a, b, datatype, "typed contents")
                np.testing.assert_array_equal(typed, raw)

    def test_typed_contents_of_an_empty_tensor_may_be_left_unset(self):
        # A [0, 3] input has no values, so an unset `contents` is exactly right for it.
        for unset in (False, True):
            with self.subTest(contents="unset" if unset else "present but empty"):
                request = make_infer_request("matmul", [("A", np.zeros((0, 3), np.float32)),
                                                        ("B", np.ones((3, 4), np.float32))],
                                             typed=True)
                if unset:
                    request.inputs[0].ClearField("contents")
                self.assertEqual(request.inputs[0].HasField("contents"), not unset)
                y = self.single_output(request, "Y", "FP32", timeout=30)
                self.assertEqual(y.shape, (0, 4))

    def test_requested_output_y_is_returned(self):
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        b = np.arange(12, dtype=np.float32).reshape(3, 4)
        outputs = self.infer_outputs("matmul", [("A", a), ("B", b)], outputs=["Y"])
        self.assertEqual(list(outputs), ["Y"])
        np.testing.assert_array_equal(outputs["Y"], a @ b)

    def test_requesting_an_unknown_output_is_invalid_argument(self):
        request = make_infer_request("matmul", [("A", np.ones((2, 2), np.float32)),
                                                ("B", np.ones((2, 2), np.float32))],
                                     outputs=["Z"])
        self.assert_rejected(request, grpc.StatusCode.INVALID_ARGUMENT, "'Z'")

    def test_response_names_model_and_version_and_echoes_request_id(self):
        a = np.ones((2, 3), np.int64)
        b = np.ones((3, 2), np.int64)
        for version in ("", "1"):
            with self.subTest(model_version=version):
                request = make_infer_request("matmul", [("A", a), ("B", b)],
                                             model_version=version, request_id="req-42")
                response = self.infer(request)
                self.assertEqual(response.model_name, "matmul")
                self.assertEqual(response.model_version, "1")
                self.assertEqual(response.id, "req-42")
                self.assertEqual(len(response.outputs), 1)
                out = response.outputs[0]
                self.assertEqual((out.name, out.datatype, list(out.shape)), ("Y", "INT64", [2, 2]))
                self.assertFalse(out.HasField("contents"), "outputs travel as raw contents")
                self.assertEqual(response.raw_output_contents[0],
                                 np.full((2, 2), 3, "<i8").tobytes())


if __name__ == "__main__":
    unittest.main(verbosity=2)
