"""RELIABILITY.md, Envelope rows E1-E11: each bad request gets its status code
through the real gRPC API, the server stays up, and the next valid request of
each model still gets its own correct answer (assert_rejected checks both)."""
import unittest

import grpc
import numpy as np

from gemmserve_client import decode_outputs, make_infer_request, pb2
from gemmserve_testing import references as ref
from gemmserve_testing.base import GemmServeTestCase

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
INT64_MIN = -2**63
INT64_MAX = 2**63 - 1


def matmul_request(a_shape=(2, 3), b_shape=(3, 4), datatype="FP32", typed=False):
    rng = np.random.default_rng(0)
    a = ref.random_wire(rng, datatype, a_shape)
    b = ref.random_wire(rng, datatype, b_shape)
    return make_infer_request("matmul", [("A", a, datatype), ("B", b, datatype)], typed=typed)


def grouped_request(datatype="FP32", index_dtype=np.int64):
    rng = np.random.default_rng(0)
    return make_infer_request("grouped_matmul", [
        ("input", ref.random_wire(rng, datatype, (3, 4)), datatype),
        ("weights", ref.random_wire(rng, datatype, (2, 4, 5)), datatype),
        ("group_indices", np.array([[0, 1], [1, 1], [0, 0]], index_dtype)),
        ("bias", ref.random_wire(rng, datatype, (2, 5)), datatype)])


def raw_input(request, name, datatype, shape, raw):
    request.inputs.add(name=name, datatype=datatype, shape=list(shape))
    request.raw_input_contents.append(raw)


class EnvelopeRowsTest(GemmServeTestCase):

    # ------------------------------------------------------------------ E1

    def test_e1_empty_request_is_invalid_argument(self):
        self.assert_rejected(pb2.ModelInferRequest(), INVALID)

    def test_e1_empty_model_name_with_valid_inputs_is_invalid_argument(self):
        request = matmul_request()
        request.model_name = ""
        self.assert_rejected(request, INVALID)

    def test_e1_unknown_model_is_not_found(self):
        for name in ("no_such_model", "MatMul", "matmul.", "x" * 128):
            with self.subTest(model=name):
                request = matmul_request()
                request.model_name = name
                self.assert_rejected(request, NOT_FOUND)
        # A name no model can have (L3) is the request's own error.
        for name in ("matmul ", "x" * 129, "a/b", "_unknown"):
            with self.subTest(model=name):
                request = matmul_request()
                request.model_name = name
                self.assert_rejected(request, INVALID, "model name")

    def test_e1_model_version_that_does_not_exist_is_not_found(self):
        for model_request in (matmul_request, grouped_request):
            for version in ("2", "0", "11"):
                with self.subTest(model=model_request.__name__, version=version):
                    request = model_request()
                    request.model_version = version
                    self.assert_rejected(request, NOT_FOUND)

    def test_rejection_messages_stay_short_when_the_request_carries_long_names(self):
        # Names are echoed to say what was wrong, but never at length: assert_rejected
        # also caps the message at 2 KiB.
        long = "x" * 100000
        cases = [("model name", lambda r: setattr(r, "model_name", long), INVALID),
                 ("version", lambda r: setattr(r, "model_version", long), NOT_FOUND),
                 ("input name", lambda r: setattr(r.inputs[1], "name", long), INVALID),
                 ("datatype", lambda r: setattr(r.inputs[0], "datatype", long), INVALID),
                 ("requested output", lambda r: r.outputs.add(name=long), INVALID)]
        for what, mutate, code in cases:
            with self.subTest(long=what):
                request = matmul_request()
                mutate(request)
                self.assert_rejected(request, code)

    # ------------------------------------------------------------------ E2

    def test_e2_unknown_datatype_string_is_invalid_argument(self):
        for datatype in ("FP8", "", "fp32", "FLOAT32", "BYTES"):
            with self.subTest(datatype=datatype):
                request = matmul_request()
                request.inputs[0].datatype = datatype
                self.assert_rejected(request, INVALID)

    def test_e2_int8_is_not_allowed_for_matmul(self):
        request = make_infer_request("matmul", [("A", np.ones((2, 3), np.int8)),
                                                ("B", np.ones((3, 4), np.int8))])
        self.assertEqual(request.inputs[0].datatype, "INT8")
        self.assert_rejected(request, INVALID, "INT8")

    def test_e2_integer_values_are_not_allowed_for_grouped_matmul(self):
        for datatype in ("INT32", "INT64", "UINT32"):
            with self.subTest(datatype=datatype):
                rng = np.random.default_rng(0)
                request = make_infer_request("grouped_matmul", [
                    ("input", ref.random_wire(rng, datatype, (3, 4)), datatype),
                    ("weights", ref.random_wire(rng, datatype, (2, 4, 5)), datatype),
                    ("group_indices", np.zeros((3, 1), np.int64))])
                self.assert_rejected(request, INVALID)

    # ------------------------------------------------------------------ E3

    def test_e3_fewer_raw_contents_than_inputs_is_invalid_argument(self):
        request = matmul_request()
        del request.raw_input_contents[1]
        self.assert_rejected(request, INVALID)

    def test_e3_more_raw_contents_than_inputs_is_invalid_argument(self):
        request = matmul_request()
        request.raw_input_contents.append(request.raw_input_contents[1])
        self.assert_rejected(request, INVALID)

    def test_e3_raw_and_typed_contents_together_are_invalid_argument(self):
        # Typed contents on one input while both inputs also have raw entries.
        request = matmul_request()
        request.inputs[0].contents.fp32_contents.extend([1.0] * 6)
        self.assert_rejected(request, INVALID)
        # Typed on A, raw for B only: counts differ as well as mixing.
        request = matmul_request(typed=True)
        request.raw_input_contents.append(np.ones((3, 4), np.float32).tobytes())
        request.inputs[1].ClearField("contents")
        self.assert_rejected(request, INVALID)

    # ------------------------------------------------------------------ E4

    def test_e4_raw_byte_length_one_short_or_one_over_is_invalid_argument(self):
        for index, name in ((0, "A"), (1, "B")):
            for delta in (-1, +1):
                with self.subTest(input=name, delta=delta):
                    request = matmul_request()
                    raw = request.raw_input_contents[index]
                    request.raw_input_contents[index] = raw[:-1] if delta < 0 else raw + b"\0"
                    self.assert_rejected(request, INVALID, f"'{name}'")

    def test_e4_raw_byte_length_of_a_whole_element_short_is_invalid_argument(self):
        for datatype in ("FP64", "FP16", "BF16", "INT32", "UINT64"):
            with self.subTest(datatype=datatype):
                request = matmul_request(datatype=datatype)
                size = len(request.raw_input_contents[1]) // 12
                request.raw_input_contents[1] = request.raw_input_contents[1][:-size]
                self.assert_rejected(request, INVALID, "'B'")

    def test_e4_group_indices_byte_length_mismatch_is_invalid_argument(self):
        for delta in (-1, +1, -8, +8):
            with self.subTest(delta=delta):
                request = grouped_request()
                raw = request.raw_input_contents[2]
                request.raw_input_contents[2] = raw[:delta] if delta < 0 else raw + b"\0" * delta
                self.assert_rejected(request, INVALID, "'group_indices'")

    # ------------------------------------------------------------------ E5

    def test_e5_typed_contents_count_one_short_or_one_over_is_invalid_argument(self):
        for datatype, field in (("FP32", "fp32_contents"), ("FP64", "fp64_contents"),
                                ("INT32", "int_contents"), ("INT64", "int64_contents"),
                                ("UINT32", "uint_contents"), ("UINT64", "uint64_contents")):
            for delta in (-1, +1):
                with self.subTest(datatype=datatype, delta=delta):
                    request = matmul_request(datatype=datatype, typed=True)
                    values = getattr(request.inputs[1].contents, field)
                    if delta < 0:
                        del values[-1]
                    else:
                        values.append(values[0])
                    self.assert_rejected(request, INVALID, "'B'")

    def test_e5_typed_contents_missing_for_a_nonempty_tensor_is_invalid_argument(self):
        request = matmul_request(typed=True)
        request.inputs[1].ClearField("contents")
        self.assert_rejected(request, INVALID, "'B'")

    def test_e5_typed_field_of_the_wrong_kind_is_invalid_argument(self):
        cases = [("FP32", "fp64_contents"), ("FP32", "int_contents"),
                 ("FP64", "fp32_contents"), ("INT32", "int64_contents"),
                 ("INT64", "int_contents"), ("UINT32", "int_contents"),
                 ("UINT64", "int64_contents"), ("INT32", "uint_contents")]
        for datatype, wrong_field in cases:
            with self.subTest(datatype=datatype, field=wrong_field):
                request = matmul_request(datatype=datatype, typed=True)
                request.inputs[1].ClearField("contents")
                getattr(request.inputs[1].contents, wrong_field).extend([1] * 12)
                self.assert_rejected(request, INVALID, "'B'")

    def test_e5_half_precision_has_no_typed_field(self):
        for datatype in ("FP16", "BF16"):
            for field in ("fp32_contents", "uint_contents", "int_contents"):
                with self.subTest(datatype=datatype, field=field):
                    request = pb2.ModelInferRequest(model_name="matmul")
                    for name, shape in (("A", (2, 3)), ("B", (3, 4))):
                        tensor = request.inputs.add(name=name, datatype=datatype,
                                                    shape=list(shape))
                        getattr(tensor.contents, field).extend([1] * int(np.prod(shape)))
                    self.assert_rejected(request, INVALID)

    def test_e5_right_and_wrong_typed_fields_together_are_invalid_argument(self):
        request = matmul_request(typed=True)
        request.inputs[1].contents.int_contents.extend([1] * 12)
        self.assert_rejected(request, INVALID, "'B'")

    # ------------------------------------------------------------------ E6

    def test_e6_duplicate_input_names_are_invalid_argument(self):
        request = matmul_request(b_shape=(3, 3), a_shape=(3, 3))
        request.inputs[1].name = "A"
        self.assert_rejected(request, INVALID)  # may be reported as 'B' missing
        request = matmul_request()
        raw_input(request, "A", "FP32", (2, 3), request.raw_input_contents[0])
        self.assert_rejected(request, INVALID, "'A'")

    def test_e6_unknown_extra_input_is_invalid_argument(self):
        request = matmul_request()
        raw_input(request, "C", "FP32", (3, 4), request.raw_input_contents[1])
        self.assert_rejected(request, INVALID, "'C'")
        request = grouped_request()
        raw_input(request, "scale", "FP32", (2, 5), request.raw_input_contents[3])
        self.assert_rejected(request, INVALID, "'scale'")

    def test_e6_required_input_missing_is_invalid_argument(self):
        for model_request, index, name in ((matmul_request, 1, "B"), (matmul_request, 0, "A"),
                                           (grouped_request, 0, "input"),
                                           (grouped_request, 1, "weights"),
                                           (grouped_request, 2, "group_indices")):
            with self.subTest(missing=name):
                request = model_request()
                del request.inputs[index]
                del request.raw_input_contents[index]
                self.assert_rejected(request, INVALID, f"'{name}'")

    def test_e6_no_inputs_at_all_is_invalid_argument(self):
        self.assert_rejected(pb2.ModelInferRequest(model_name="matmul"), INVALID)

    # ------------------------------------------------------------------ E7

    def test_e7_negative_dimension_is_invalid_argument(self):
        for dims in ((-1, 3), (2, -3), (INT64_MIN, 3)):
            with self.subTest(shape=dims):
                request = matmul_request()
                request.inputs[0].ClearField("shape")
                request.inputs[0].shape.extend(dims)
                self.assert_rejected(request, INVALID, "'A'")

    def test_e7_shape_whose_element_count_overflows_int64_is_invalid_argument(self):
        for dims in ((2**32, 2**32), (INT64_MAX, 2), (INT64_MAX, INT64_MAX),
                     (2**21, 2**21, 2**21, 3)):
            with self.subTest(shape=dims):
                request = matmul_request()
                request.inputs[1].ClearField("shape")
                request.inputs[1].shape.extend(dims)
                self.assert_rejected(request, INVALID, "'B'")

    def test_e7_shape_whose_byte_size_overflows_int64_is_invalid_argument(self):
        # 2^62 FP32 elements fit in int64, their 2^64 bytes do not.
        request = matmul_request()
        request.inputs[1].ClearField("shape")
        request.inputs[1].shape.extend([3, 2**62 // 3 + 1])
        self.assert_rejected(request, INVALID, "'B'")

    def test_e7_huge_group_indices_shape_is_invalid_argument(self):
        request = grouped_request()
        request.inputs[2].ClearField("shape")
        request.inputs[2].shape.extend([INT64_MAX, 2])
        self.assert_rejected(request, INVALID, "'group_indices'")

    def test_e7_output_whose_element_count_overflows_int64_is_invalid_argument(self):
        # Empty inputs (K = 0) whose batch dimensions broadcast to [2^40, 2^40]: the
        # output shape itself overflows, as numpy also refuses ("array is too big").
        request = pb2.ModelInferRequest(model_name="matmul", raw_input_contents=[b"", b""])
        request.inputs.add(name="A", datatype="FP32", shape=[2**40, 1, 1, 0])
        request.inputs.add(name="B", datatype="FP32", shape=[2**40, 0, 1])
        self.assert_rejected(request, INVALID, before_admission=True)

    # ------------------------------------------------------------------ E8

    def test_e8_matmul_output_over_the_cap_is_rejected_quickly(self):
        a = np.ones((1000000, 1), np.float32)
        b = np.ones((1, 1000000), np.float32)
        request = make_infer_request("matmul", [("A", a), ("B", b)])
        self.assert_rejected(request, EXHAUSTED, "max_output_bytes", before_admission=True)

    def test_e8_batched_matmul_output_over_the_cap_is_rejected_quickly(self):
        # 2000 x 1000 x 1000 FP32 = 8 GB, from a few kilobytes of input.
        a = np.ones((2000, 1, 1, 1), np.float32)
        b = np.ones((1, 1000, 1, 1000), np.float32)
        request = make_infer_request("matmul", [("A", a), ("B", b)])
        self.assert_rejected(request, EXHAUSTED, "max_output_bytes", before_admission=True)

    def test_e8_zero_filled_output_over_the_cap_from_empty_inputs_is_rejected_quickly(self):
        # K = 0: no input bytes at all, but 4 TB of zeros asked for.
        request = pb2.ModelInferRequest(model_name="matmul", raw_input_contents=[b"", b""])
        request.inputs.add(name="A", datatype="FP32", shape=[1000000, 0])
        request.inputs.add(name="B", datatype="FP32", shape=[0, 1000000])
        self.assert_rejected(request, EXHAUSTED, "max_output_bytes", before_admission=True)

    def test_e8_grouped_matmul_output_over_the_cap_is_rejected_quickly(self):
        x = np.ones((1000000, 1), np.float32)
        w = np.ones((1, 1, 1000000), np.float32)
        idx = np.zeros((1000000, 1), np.int32)
        request = make_infer_request("grouped_matmul",
                                     [("input", x), ("weights", w), ("group_indices", idx)])
        self.assert_rejected(request, EXHAUSTED, "max_output_bytes", before_admission=True)

    # ----------------------------------------------------------------- E10

    def test_e10_a_thousand_inputs_are_rejected_cheaply(self):
        request = matmul_request()
        for i in range(998):
            raw_input(request, f"extra_{i}", "FP32", (1,), b"\0\0\0\0")
        self.assertEqual(len(request.inputs), 1000)
        self.assert_rejected(request, INVALID, before_admission=True)

    def test_e10_a_million_dimension_shape_is_rejected_cheaply(self):
        request = matmul_request()
        request.inputs[0].ClearField("shape")
        request.inputs[0].shape.extend([1] * 999998 + [2, 3])
        # assert_rejected also checks that the message stays capped (no echo of the shape).
        self.assert_rejected(request, INVALID, "'A'", before_admission=True)

    # ----------------------------------------------------------------- E11

    def test_e11_raw_data_at_every_offset_inside_the_message_is_read_correctly(self):
        # Python cannot choose where the server's buffers start, but it decides where
        # each raw tensor lies inside the serialized message: `id` (field 3) precedes the
        # raw contents (field 7), so its length shifts every raw entry. With all eight
        # residues mod 8 covered, a server that reads tensors in place from the received
        # bytes (zero-copy parsing, slices of the gRPC buffer) instead of copying them is
        # handed misaligned 8-byte values here, which UBSan reports and strict-alignment
        # CPUs trap on. Today's server parses into std::string, whose heap buffers are
        # aligned anyway, so for it this test guards correctness against a future change
        # of parsing; tiny tensors (a few bytes) additionally sit in the strings' inline
        # short-string storage.
        residues = set()
        for datatype in ("FP64", "INT64", "UINT64", "FP32", "FP16", "BF16"):
            for id_length in range(9):  # id absent, then 1..8 bytes: 8 distinct shifts
                for a_shape, b_shape in (((1, 1), (1, 1)), ((3, 5), (5, 2)),
                                         ((2, 7, 9), (9, 4))):
                    with self.subTest(datatype=datatype, id_length=id_length, a=a_shape):
                        rng = np.random.default_rng(id_length)
                        a = ref.random_wire(rng, datatype, a_shape)
                        b = ref.random_wire(rng, datatype, b_shape)
                        request = make_infer_request(
                            "matmul", [("A", a, datatype), ("B", b, datatype)],
                            request_id="x" * id_length)
                        wire = request.SerializeToString()
                        if datatype == "FP64" and a.size > 1:
                            residues.add(wire.index(a.tobytes()) % 8)
                        response = self.infer(request)
                        self.assertEqual(response.id, "x" * id_length)
                        ref.assert_matmul_result(decode_outputs(response)["Y"], a, b, datatype,
                                                 f"offset test {datatype}")
        self.assertEqual(residues, set(range(8)), "every alignment of the raw bytes covered")
        self.assert_server_still_serves()

    def test_e11_grouped_matmul_indices_at_every_offset_are_read_correctly(self):
        for id_length in range(8):
            with self.subTest(id_length=id_length):
                rng = np.random.default_rng(id_length)
                x = ref.random_wire(rng, "FP64", (5, 3))
                w = ref.random_wire(rng, "FP64", (4, 3, 2))
                idx = rng.integers(0, 4, size=(5, 3)).astype(np.int64)
                bias = ref.random_wire(rng, "FP64", (4, 2))
                request = make_infer_request("grouped_matmul", [
                    ("input", x), ("weights", w), ("group_indices", idx), ("bias", bias)],
                    request_id="y" * id_length)
                out = decode_outputs(self.infer(request))["output"]
                ref.assert_grouped_matmul_result(out, x, w, idx, bias, "FP64")
        self.assert_server_still_serves()


class SmallLimitsTest(GemmServeTestCase):
    """E8 and E9 against a server started with small limits."""

    MAX_MESSAGE = 1 << 20
    MAX_OUTPUT = 4 << 20
    server_flags = (f"--max_message_bytes={MAX_MESSAGE}", f"--max_output_bytes={MAX_OUTPUT}")

    def test_e9_message_over_the_receive_limit_is_rejected_and_the_server_stays_up(self):
        a = np.ones((512, 512), np.float64)  # 2 MiB
        b = np.ones((512, 1), np.float64)
        request = make_infer_request("matmul", [("A", a), ("B", b)])
        self.assertGreater(request.ByteSize(), 2 * self.MAX_MESSAGE - 1)
        self.assert_rejected(request, EXHAUSTED)

    def test_e9_response_over_the_send_limit_is_resource_exhausted_naming_the_flag(self):
        # 600 x 600 FP32 = 1.44 MB: under --max_output_bytes, over --max_message_bytes.
        a = np.ones((600, 1), np.float32)
        b = np.ones((1, 600), np.float32)
        request = make_infer_request("matmul", [("A", a), ("B", b)])
        self.assert_rejected(request, EXHAUSTED, "max_message_bytes", before_admission=True)

    def test_e9_response_over_the_send_limit_because_of_the_echoed_id_names_the_flag(self):
        # The response echoes the request's id: 700 KB of id plus 409,600 bytes of output
        # exceed 1 MiB although the output alone fits. The request itself is under 1 MiB.
        a = np.ones((320, 1), np.float32)
        b = np.ones((1, 320), np.float32)
        request = make_infer_request("matmul", [("A", a), ("B", b)], request_id="x" * 700000)
        self.assertLess(request.ByteSize(), self.MAX_MESSAGE)
        self.assert_rejected(request, EXHAUSTED, "max_message_bytes", before_admission=True)

    def test_e8_output_over_max_output_bytes_is_resource_exhausted_naming_the_flag(self):
        # 1100 x 1100 FP32 = 4.84 MB > 4 MiB, from 8.8 KB of input.
        a = np.ones((1100, 1), np.float32)
        b = np.ones((1, 1100), np.float32)
        request = make_infer_request("matmul", [("A", a), ("B", b)])
        self.assert_rejected(request, EXHAUSTED, "max_output_bytes", before_admission=True)

    def test_requests_and_responses_just_under_the_limits_succeed(self):
        # 480 x 480 FP32 = 921,600 bytes of output; 921,600 bytes of input.
        a = np.arange(480, dtype=np.float32).reshape(480, 1)
        b = np.arange(480, dtype=np.float32).reshape(1, 480)
        y = self.run_matmul(a, b, "FP32")
        np.testing.assert_array_equal(y, a @ b)
        big_a = np.ones((480, 480), np.float32)
        y = self.run_matmul(big_a, np.ones((480, 1), np.float32), "FP32")
        np.testing.assert_array_equal(y, np.full((480, 1), 480, np.float32))


class OutputCapBoundaryTest(GemmServeTestCase):
    """E8 at the edge: an output of exactly --max_output_bytes is allowed, one more
    element is not."""

    MAX_OUTPUT = 4096
    server_flags = (f"--max_output_bytes={MAX_OUTPUT}",)

    def test_e8_output_of_exactly_the_cap_is_accepted_and_one_element_more_rejected(self):
        a = np.arange(32, dtype=np.float32).reshape(32, 1)
        y = self.run_matmul(a, np.ones((1, 32), np.float32), "FP32")  # 32*32*4 = 4096
        np.testing.assert_array_equal(y, np.repeat(a, 32, axis=1))
        request = make_infer_request("matmul", [("A", a), ("B", np.ones((1, 33), np.float32))])
        self.assert_rejected(request, EXHAUSTED, "max_output_bytes")

    def test_e8_grouped_output_of_exactly_the_cap_is_accepted_and_one_element_more_rejected(self):
        x = np.ones((16, 2), np.float64)
        w = np.ones((3, 2, 16), np.float64)
        idx = np.zeros((16, 2), np.int64)  # output [16,2,16] FP64 = 4096 bytes
        out = self.run_grouped_matmul(x, w, idx, None, "FP64")
        np.testing.assert_array_equal(out, np.full((16, 2, 16), 2.0))
        request = make_infer_request("grouped_matmul", [
            ("input", x), ("weights", np.ones((3, 2, 17))), ("group_indices", idx)])
        self.assert_rejected(request, EXHAUSTED, "max_output_bytes")


class SmallMessageLimitTest(GemmServeTestCase):
    """A --max_message_bytes of 16 KiB still carries small requests and responses."""

    MAX_MESSAGE = 16 * 1024
    server_flags = (f"--max_message_bytes={MAX_MESSAGE}",)

    def test_small_outputs_are_served_under_a_small_message_limit(self):
        a = np.arange(4, dtype=np.float32).reshape(2, 2)
        y = self.run_matmul(a, a, "FP32")  # 16 bytes of output
        np.testing.assert_array_equal(y, a @ a)
        out = self.run_grouped_matmul(np.ones((4, 8), np.float64), np.ones((2, 8, 16)),
                                      np.zeros((4, 2), np.int64), None, "FP64")  # 1 KiB
        np.testing.assert_array_equal(out, np.full((4, 2, 16), 8.0))

    def test_e9_output_over_a_small_message_limit_names_the_flag(self):
        a = np.ones((100, 1), np.float32)
        request = make_infer_request("matmul", [("A", a), ("B", a.T.copy())])  # 40 KB out
        self.assert_rejected(request, EXHAUSTED, "max_message_bytes")


if __name__ == "__main__":
    unittest.main(verbosity=2)
