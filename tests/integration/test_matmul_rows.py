"""RELIABILITY.md, MatMul rows M1-M7 (numpy.matmul semantics): the rejected
ones get INVALID_ARGUMENT and leave the server serving; the accepted edge cases
(zero sizes, NaN/Inf/subnormals, integer overflow) give numpy's answer."""
import unittest

import grpc
import numpy as np

from gemmserve_client import make_infer_request
from gemmserve_testing import references as ref
from gemmserve_testing.base import GemmServeTestCase

INVALID = grpc.StatusCode.INVALID_ARGUMENT

# A subnormal of each float datatype, and its double (still subnormal and exact).
SUBNORMAL = {"FP64": 2.0**-1060, "FP32": 2.0**-140, "FP16": 2.0**-20, "BF16": 2.0**-130}
# Two of these overflow the datatype's range when added (after FP32 accumulation for FP16).
LARGE = {"FP64": 1.5e308, "FP32": 3e38, "FP16": 60000.0, "BF16": 3e38}


def matmul_request(a, b, a_datatype, b_datatype=None):
    return make_infer_request("matmul", [("A", a, a_datatype),
                                         ("B", b, b_datatype or a_datatype)])


class MatMulRowsTest(GemmServeTestCase):

    def test_m1_a_and_b_datatypes_differ(self):
        cases = [("FP32", "FP64"), ("FP16", "BF16"), ("INT32", "UINT32"), ("INT64", "FP64"),
                 ("BF16", "FP32")]
        for a_type, b_type in cases:
            with self.subTest(a=a_type, b=b_type):
                rng = np.random.default_rng(0)
                request = matmul_request(ref.random_wire(rng, a_type, (2, 3)),
                                         ref.random_wire(rng, b_type, (3, 4)), a_type, b_type)
                self.assert_rejected(request, INVALID, "'B'")

    def test_m2_rank_0_operand(self):
        scalar = np.array(2.0, np.float32)
        vector = np.ones(3, np.float32)
        for a, b in ((scalar, vector), (vector, scalar), (scalar, scalar),
                     (np.ones((2, 3), np.float32), scalar)):
            with self.subTest(a=a.shape, b=b.shape):
                self.assert_rejected(matmul_request(a, b, "FP32"), INVALID)

    def test_m3_contracted_dimensions_differ(self):
        cases = [((2, 3), (4, 5)), ((3,), (4, 5)), ((2, 3), (4,)), ((3,), (4,)),
                 ((2, 2, 3), (2, 4, 5)), ((2, 0), (1, 3)), ((3,), (2, 4, 1))]
        for a_shape, b_shape in cases:
            with self.subTest(a=a_shape, b=b_shape):
                request = matmul_request(np.ones(a_shape, np.float32),
                                         np.ones(b_shape, np.float32), "FP32")
                self.assert_rejected(request, INVALID)

    def test_m4_batch_dimensions_that_do_not_broadcast(self):
        cases = [((2, 3, 4), (3, 4, 5)), ((4, 2, 3, 4), (2, 2, 4, 5)),
                 ((2, 1, 3, 4), (3, 3, 4, 5)), ((0, 3, 4), (2, 4, 5))]
        for a_shape, b_shape in cases:
            with self.subTest(a=a_shape, b=b_shape):
                request = matmul_request(np.ones(a_shape, np.float32),
                                         np.ones(b_shape, np.float32), "FP32")
                self.assert_rejected(request, INVALID)

    def test_m5_zero_size_dimensions_anywhere(self):
        cases = {"M=0": ((0, 3), (3, 4)), "N=0": ((2, 3), (3, 0)),
                 "batch 0": ((0, 2, 3), (0, 3, 4)), "K=0": ((2, 0), (0, 3)),
                 "batched K=0": ((3, 2, 0), (1, 0, 4))}
        for datatype in ref.MATMUL_TYPES:
            for label, (a_shape, b_shape) in cases.items():
                with self.subTest(datatype=datatype, case=label):
                    rng = np.random.default_rng(0)
                    a = ref.random_wire(rng, datatype, a_shape)
                    b = ref.random_wire(rng, datatype, b_shape)
                    y = self.run_matmul(a, b, datatype)
                    expected_shape = np.matmul(np.zeros(a_shape), np.zeros(b_shape)).shape
                    self.assertEqual(y.shape, expected_shape)
                    if label.endswith("K=0"):
                        self.assertGreater(y.size, 0)
                        self.assertTrue(np.all(ref.decode_float(datatype, y) == 0),
                                        "an empty sum is zero")
        self.assert_server_still_serves()

    def test_m5_huge_dimensions_with_zero_elements_are_answered_at_once(self):
        # 2^40 rows of nothing: a server that loops over rows or batches would hang.
        from gemmserve_client import decode_outputs, pb2
        for a_shape, b_shape, y_shape in (([2**40, 1, 0], [0, 0], [2**40, 1, 0]),
                                          ([2**40, 0], [0, 0], [2**40, 0]),
                                          ([0, 5], [2**40, 5, 0], [2**40, 0, 0])):
            with self.subTest(a=a_shape, b=b_shape):
                request = pb2.ModelInferRequest(model_name="matmul",
                                                raw_input_contents=[b"", b""])
                request.inputs.add(name="A", datatype="FP64", shape=a_shape)
                request.inputs.add(name="B", datatype="FP64", shape=b_shape)
                response = self.infer(request, timeout=10)
                self.assertEqual(list(response.outputs[0].shape), y_shape)
                self.assertEqual(decode_outputs(response)["Y"].size, 0)
        self.assert_server_still_serves()

    def test_m6_nan_inf_and_subnormal_values_pass_through_as_ieee_says(self):
        for datatype in ref.FLOAT_TYPES:
            with self.subTest(datatype=datatype):
                nan, inf, sub = np.nan, np.inf, SUBNORMAL[datatype]
                with np.errstate(invalid="ignore", over="ignore"):
                    a_wire = ref.to_wire(datatype, np.array(
                        [[nan, 1], [inf, 1], [-inf, 1], [inf, -inf], [sub, 0], [sub, sub],
                         [1, 2], [LARGE[datatype], LARGE[datatype]]]))
                    b_wire = ref.to_wire(datatype, np.array([[1, 0], [1, 1]]))
                    a, b = ref.to_float(datatype, a_wire), ref.to_float(datatype, b_wire)
                    # IEEE elementwise: inf*0 = NaN, inf-inf = NaN, subnormals neither
                    # flushed nor read as zero, a sum past the largest finite value is inf.
                    exact = (a[:, :, None] * b[None, :, :]).sum(axis=1)
                    expected = ref.to_float(datatype, ref.to_wire(datatype, exact))
                self.assertEqual(a[4, 0], sub, "the subnormal survives encoding")
                self.assertTrue(np.isinf(expected[7, 0]) and np.isnan(expected[3, 1]))
                y = ref.to_float(datatype, self.run_matmul(a_wire, b_wire, datatype))
                np.testing.assert_array_equal(y, expected, f"{datatype} special values")
        self.assert_server_still_serves()

    def test_m6_results_round_correctly_into_the_subnormal_range(self):
        # Products of normal numbers landing among the output format's subnormals, at
        # 1/2, 3/4, 5/8, 1/4, 3/2 and -3/4 of the smallest subnormal: ties go to even
        # (0, or 2 steps), nothing is flushed to zero. (a scale, b scale) put the
        # products at half the smallest subnormal of each format.
        scales = {"FP16": (2.0**-12, 2.0**-13), "BF16": (2.0**-64, 2.0**-70),
                  "FP32": (2.0**-75, 2.0**-75), "FP64": (2.0**-537, 2.0**-538)}
        factors = np.array([1.0, 1.5, 1.25, 0.5, 3.0, -1.5])
        for datatype, (a_scale, b_scale) in scales.items():
            with self.subTest(datatype=datatype):
                a_wire = ref.to_wire(datatype, (factors * a_scale).reshape(6, 1))
                b_wire = ref.to_wire(datatype, np.array([[b_scale]]))
                a, b = ref.to_float(datatype, a_wire), ref.to_float(datatype, b_wire)
                np.testing.assert_array_equal(a.ravel(), factors * a_scale, "a is exact")
                self.assertEqual(b[0, 0], b_scale)
                exact = a.astype(np.longdouble) * b.astype(np.longdouble)
                if datatype == "FP64":
                    expected = exact.astype(np.float64)
                else:  # exact fits float64; one rounding to the output format
                    expected = ref.to_float(datatype, ref.to_wire(datatype, exact.astype(
                        np.float64)))
                self.assertTrue(np.any(expected != 0) and np.any(expected == 0))
                y = ref.to_float(datatype, self.run_matmul(a_wire, b_wire, datatype))
                np.testing.assert_array_equal(y, expected, f"{datatype} subnormal results")
        self.assert_server_still_serves()

    def test_m7_integer_overflow_wraps_in_the_result_type(self):
        cases = {
            "INT32": ([[2**30, 2**30, 2**30, 2**30 + 5]], 5),
            "UINT32": ([[2**31, 2**31, 7]], 7),
            "INT64": ([[2**62, 2**62, 2**62, 2**62 - 3]], -3),
            "UINT64": ([[2**63, 2**63, 11]], 11),
        }
        for datatype, (row, expected) in cases.items():
            with self.subTest(datatype=datatype, case="sum"):
                a = ref.to_wire(datatype, np.array(row, dtype=object))
                b = ref.to_wire(datatype, np.ones((a.shape[1], 1), dtype=np.int64))
                self.assertEqual(self.run_matmul(a, b, datatype).tolist(), [[expected]])
        for datatype in ref.INT_TYPES:
            with self.subTest(datatype=datatype, case="full range"):
                rng = np.random.default_rng(9)
                a = ref.random_wire(rng, datatype, (4, 33))
                b = ref.random_wire(rng, datatype, (33, 5))
                y = self.run_matmul(a, b, datatype)
                ref.assert_matmul_result(y, a, b, datatype, "wrapping matmul")
        self.assert_server_still_serves()


if __name__ == "__main__":
    unittest.main(verbosity=2)
