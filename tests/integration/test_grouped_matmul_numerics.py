"""GroupedMatMul through gRPC: every value datatype with INT32 and INT64 indices,
with and without bias, skewed and sparse routing, empty selections and tokens,
typed contents and the response envelope."""
import unittest

import numpy as np

from gemmserve_client import make_infer_request
from gemmserve_testing import references as ref
from gemmserve_testing.base import GemmServeTestCase

INDEX_DTYPES = (np.int32, np.int64)


class GroupedMatMulNumericsTest(GemmServeTestCase):

    def check(self, m, k, n, g, s, datatype, index_dtype, with_bias, seed, idx=None,
              typed=False):
        rng = np.random.default_rng(seed)
        x = ref.random_wire(rng, datatype, (m, k))
        w = ref.random_wire(rng, datatype, (g, k, n))
        if idx is None:
            idx = rng.integers(0, g, size=(m, s))
        idx = np.asarray(idx).astype(index_dtype)
        bias = ref.random_wire(rng, datatype, (g, n)) if with_bias else None
        out = self.run_grouped_matmul(x, w, idx, bias, datatype, typed=typed)
        ref.assert_grouped_matmul_result(
            out, x, w, idx, bias, datatype,
            f"grouped_matmul M={m} K={k} N={n} G={g} S={s} bias={with_bias}")
        return out

    def test_every_datatype_and_index_type_matches_reference(self):
        shapes = [(1, 1, 1, 1, 1), (5, 7, 3, 4, 2), (16, 33, 17, 8, 2), (37, 64, 65, 3, 4)]
        for datatype in ref.FLOAT_TYPES:
            for index_dtype in INDEX_DTYPES:
                for with_bias in (False, True):
                    for i, (m, k, n, g, s) in enumerate(shapes):
                        with self.subTest(datatype=datatype, index=index_dtype.__name__,
                                          bias=with_bias, shape=(m, k, n, g, s)):
                            self.check(m, k, n, g, s, datatype, index_dtype, with_bias, seed=i)

    def test_every_datatype_matches_reference_on_multithreaded_sizes(self):
        for datatype in ref.FLOAT_TYPES:
            with self.subTest(datatype=datatype):
                self.check(96, 256, 128, 16, 4, datatype, np.int32, True, seed=9)

    def test_half_precision_results_equal_the_correctly_rounded_exact_sum(self):
        # Quarter-integers keep FP32 partial sums exact: only the final rounding is allowed.
        rng = np.random.default_rng(5)
        xv = rng.integers(-64, 64, size=(6, 24)) / 4.0
        wv = rng.integers(-64, 64, size=(3, 24, 5)) / 4.0
        idx = rng.integers(0, 3, size=(6, 2)).astype(np.int64)
        exact = np.einsum("mk,mskn->msn", xv, wv[idx])
        for datatype in ("FP16", "BF16"):
            with self.subTest(datatype=datatype):
                out = self.run_grouped_matmul(ref.to_wire(datatype, xv),
                                              ref.to_wire(datatype, wv), idx, None, datatype)
                np.testing.assert_array_equal(out, ref.to_wire(datatype, exact))

    def test_skewed_routing_sends_every_token_to_one_group(self):
        for datatype in ref.FLOAT_TYPES:
            with self.subTest(datatype=datatype):
                idx = np.full((40, 2), 3)
                self.check(40, 16, 8, 4, 2, datatype, np.int64, True, seed=1, idx=idx)

    def test_unused_groups_do_not_change_the_result(self):
        idx = np.array([[0, 5], [5, 0], [0, 0]])  # groups 1-4 and 6 unused
        for datatype in ref.FLOAT_TYPES:
            with self.subTest(datatype=datatype):
                self.check(3, 6, 4, 7, 2, datatype, np.int32, True, seed=2, idx=idx)

    def test_the_same_group_may_be_selected_twice_for_one_token(self):
        idx = np.array([[1, 1, 1], [0, 1, 0]])
        out = self.check(2, 5, 3, 2, 3, "FP64", np.int64, True, seed=3, idx=idx)
        np.testing.assert_array_equal(out[0, 0], out[0, 2])
        np.testing.assert_array_equal(out[1, 0], out[1, 2])

    def test_zero_selections_give_an_empty_m_by_0_by_n_output(self):
        for datatype in ref.FLOAT_TYPES:
            for with_bias in (False, True):
                with self.subTest(datatype=datatype, bias=with_bias):
                    out = self.check(4, 3, 5, 2, 0, datatype, np.int64, with_bias, seed=4,
                                     idx=np.empty((4, 0)))
                    self.assertEqual(out.shape, (4, 0, 5))

    def test_zero_tokens_give_an_empty_0_by_s_by_n_output(self):
        for datatype in ref.FLOAT_TYPES:
            for index_dtype in INDEX_DTYPES:
                with self.subTest(datatype=datatype, index=index_dtype.__name__):
                    out = self.check(0, 3, 5, 2, 2, datatype, index_dtype, True, seed=5,
                                     idx=np.empty((0, 2)))
                    self.assertEqual(out.shape, (0, 2, 5))

    def test_zero_k_gives_bias_only(self):
        idx = np.array([[0, 1], [1, 1]])
        for with_bias in (False, True):
            with self.subTest(bias=with_bias):
                out = self.check(2, 0, 3, 2, 2, "FP32", np.int64, with_bias, seed=6, idx=idx)
                if not with_bias:
                    np.testing.assert_array_equal(out, np.zeros((2, 2, 3), np.float32))

    def test_zero_n_gives_an_empty_m_by_s_by_0_output(self):
        out = self.check(3, 4, 0, 2, 2, "FP32", np.int64, True, seed=7)
        self.assertEqual(out.shape, (3, 2, 0))

    def test_typed_contents_give_the_same_result_as_raw_contents(self):
        for datatype in ("FP32", "FP64"):
            for index_dtype in INDEX_DTYPES:
                with self.subTest(datatype=datatype, index=index_dtype.__name__):
                    typed = self.check(5, 6, 4, 3, 2, datatype, index_dtype, True, seed=8,
                                       typed=True)
                    raw = self.check(5, 6, 4, 3, 2, datatype, index_dtype, True, seed=8)
                    np.testing.assert_array_equal(typed, raw)

    def test_requested_output_is_returned_and_response_names_model(self):
        x = np.ones((2, 3), np.float32)
        w = np.ones((2, 3, 4), np.float32)
        idx = np.array([[0], [1]], np.int64)
        request = make_infer_request("grouped_matmul", [("input", x), ("weights", w),
                                                        ("group_indices", idx)],
                                     outputs=["output"], request_id="g-7")
        response = self.infer(request)
        self.assertEqual((response.model_name, response.model_version, response.id),
                         ("grouped_matmul", "1", "g-7"))
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in response.outputs],
                         [("output", "FP32", [2, 1, 4])])
        self.assertEqual(response.raw_output_contents[0],
                         np.full((2, 1, 4), 3, "<f4").tobytes())


if __name__ == "__main__":
    unittest.main(verbosity=2)
