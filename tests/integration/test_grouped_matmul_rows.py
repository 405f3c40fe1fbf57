"""RELIABILITY.md, GroupedMatMul rows G1-G7: bad indices, ranks, shapes and
datatypes get INVALID_ARGUMENT and leave the server serving; empty selections
and tokens give a correct empty output."""
import unittest

import grpc
import numpy as np

from gemmserve_client import make_infer_request
from gemmserve_testing import references as ref
from gemmserve_testing.base import GemmServeTestCase

INVALID = grpc.StatusCode.INVALID_ARGUMENT
INT64_MAX = 2**63 - 1


def grouped_request(m=3, k=4, n=5, g=2, s=2, datatype="FP32", idx=None, index_dtype=np.int64,
                    x_shape=None, w_shape=None, bias_shape=None, bias_datatype=None,
                    with_bias=True):
    """A valid request unless one of the overrides makes it invalid."""
    rng = np.random.default_rng(0)
    x = ref.random_wire(rng, datatype, x_shape or (m, k))
    w = ref.random_wire(rng, datatype, w_shape or (g, k, n))
    if idx is None:
        idx = rng.integers(0, max(g, 1), size=(m, s))
    inputs = [("input", x, datatype), ("weights", w, datatype),
              ("group_indices", np.asarray(idx).astype(index_dtype))]
    if with_bias:
        bias_datatype = bias_datatype or datatype
        inputs.append(("bias", ref.random_wire(rng, bias_datatype, bias_shape or (g, n)),
                       bias_datatype))
    return make_infer_request("grouped_matmul", inputs)


class GroupedMatMulRowsTest(GemmServeTestCase):

    def test_g1_index_out_of_range(self):
        cases = [(np.int64, -1), (np.int64, 2), (np.int64, INT64_MAX), (np.int64, -2**63),
                 (np.int32, -1), (np.int32, 2), (np.int32, 2**31 - 1), (np.int32, -2**31)]
        for index_dtype, bad in cases:
            with self.subTest(index=index_dtype.__name__, value=bad):
                idx = np.array([[0, 1], [1, bad], [0, 0]], dtype=index_dtype)
                request = grouped_request(g=2, idx=idx, index_dtype=index_dtype)
                self.assert_rejected(request, INVALID, "group_indices")

    def test_g1_one_bad_index_among_many_is_found(self):
        idx = np.zeros((1000, 4), np.int64)
        idx[777, 3] = 8  # G = 8
        self.assert_rejected(grouped_request(m=1000, g=8, s=4, idx=idx), INVALID,
                             "group_indices")

    def test_g1_negative_index_does_not_count_back_from_g(self):
        # -1 would select the last group if it were counted from G: it must not be.
        request = grouped_request(g=3, s=1, idx=[[-1], [0], [1]], with_bias=False)
        self.assert_rejected(request, INVALID, "group_indices")

    def test_g2_group_indices_of_rank_1_or_3(self):
        for idx in (np.zeros(3), np.zeros((3, 2, 1))):
            with self.subTest(shape=idx.shape):
                self.assert_rejected(grouped_request(idx=idx), INVALID, "group_indices")

    def test_g2_group_indices_first_dimension_other_than_m(self):
        for rows in (2, 4, 0):
            with self.subTest(rows=rows):
                request = grouped_request(m=3, idx=np.zeros((rows, 2)))
                self.assert_rejected(request, INVALID, "group_indices")

    def test_g3_weights_of_rank_2_or_4(self):
        for w_shape in ((4, 5), (2, 4, 5, 1), (1, 2, 4, 5)):
            with self.subTest(weights=w_shape):
                request = grouped_request(w_shape=w_shape, with_bias=False, idx=np.zeros((3, 2)))
                self.assert_rejected(request, INVALID, "weights")

    def test_g3_weights_k_different_from_input_k(self):
        for w_shape in ((2, 3, 5), (2, 5, 5), (2, 0, 5)):
            with self.subTest(weights=w_shape):
                self.assert_rejected(grouped_request(w_shape=w_shape), INVALID)

    def test_g3_input_of_rank_other_than_2(self):
        for x_shape in ((4,), (3, 4, 1), (1, 3, 4)):
            with self.subTest(input=x_shape):
                self.assert_rejected(grouped_request(x_shape=x_shape), INVALID, "input")

    def test_g4_bias_shape_other_than_g_by_n(self):
        for bias_shape in ((2, 6), (2, 4), (3, 5), (1, 5), (5,), (2, 5, 1), (1, 2, 5)):
            with self.subTest(bias=bias_shape):
                self.assert_rejected(grouped_request(bias_shape=bias_shape), INVALID, "bias")

    def test_g4_bias_datatype_different_from_input(self):
        for datatype, bias_datatype in (("FP32", "FP64"), ("FP16", "BF16"), ("FP64", "FP32"),
                                        ("BF16", "FP16"), ("FP32", "INT32")):
            with self.subTest(input=datatype, bias=bias_datatype):
                request = grouped_request(datatype=datatype, bias_datatype=bias_datatype)
                self.assert_rejected(request, INVALID, "bias")

    def test_g5_zero_groups_with_selections(self):
        for with_bias in (False, True):
            with self.subTest(bias=with_bias):
                request = grouped_request(g=0, idx=np.zeros((3, 2)), with_bias=with_bias)
                self.assert_rejected(request, INVALID)

    def test_g6_zero_selections_or_zero_tokens_give_a_correct_empty_output(self):
        cases = {"S=0": dict(m=3, s=0), "M=0": dict(m=0, s=2), "M=0 and S=0": dict(m=0, s=0),
                 # G5 only forbids G = 0 when something is selected.
                 "M=0 with G=0": dict(m=0, s=2, g=0)}
        for datatype in ref.FLOAT_TYPES:
            for index_dtype in (np.int32, np.int64):
                for label, sizes in cases.items():
                    with self.subTest(datatype=datatype, index=index_dtype.__name__,
                                      case=label):
                        sizes = {"k": 4, "n": 5, "g": 2, **sizes}
                        request = grouped_request(datatype=datatype, index_dtype=index_dtype,
                                                  **sizes)
                        response = self.infer(request)
                        self.assertEqual(
                            [(t.name, t.datatype, list(t.shape)) for t in response.outputs],
                            [("output", datatype, [sizes["m"], sizes["s"], sizes["n"]])])
                        self.assertEqual(response.raw_output_contents[0], b"")
        self.assert_server_still_serves()

    def test_g6_huge_m_with_zero_selections_is_answered_at_once(self):
        # 2^40 tokens with no selections and no features: nothing to compute or send.
        from gemmserve_client import pb2
        request = pb2.ModelInferRequest(model_name="grouped_matmul",
                                        raw_input_contents=[b"", b"", b""])
        request.inputs.add(name="input", datatype="FP32", shape=[2**40, 0])
        request.inputs.add(name="weights", datatype="FP32", shape=[2, 0, 5])
        request.inputs.add(name="group_indices", datatype="INT64", shape=[2**40, 0])
        response = self.infer(request, timeout=10)
        self.assertEqual(list(response.outputs[0].shape), [2**40, 0, 5])
        self.assertEqual(response.raw_output_contents[0], b"")
        self.assert_server_still_serves()

    def test_g7_group_indices_datatype_other_than_int32_or_int64(self):
        for dtype in (np.float32, np.float64, np.int8, np.int16, np.uint8, np.uint16,
                      np.uint32, np.uint64, np.bool_):
            with self.subTest(dtype=np.dtype(dtype).name):
                request = grouped_request(idx=np.zeros((3, 2)), index_dtype=dtype)
                self.assert_rejected(request, INVALID, "group_indices")


if __name__ == "__main__":
    unittest.main(verbosity=2)
