"""Every ONNX node test in <repository>/../shared/conformance/onnx-node/ passes
when sent through gemmserve's public gRPC API.

Each case is one MatMul or GroupedMatMul node: its inputs (TensorProto files, in
graph-input order) go to the built-in model of that op type, under the model's
input names by position in the node (an empty node input name is an optional
input left out), and the answer is compared with the expected output the way
the ONNX runner does (rtol 1e-3, atol 1e-7; looser for half precision)."""
import glob
import os
import unittest

import numpy as np
import onnx
from onnx import numpy_helper

from gemmserve_client import bf16_bits_to_float32, decode_outputs, make_infer_request
from gemmserve_testing import shared_dir
from gemmserve_testing.base import GemmServeTestCase

MIN_CASES = 18
MODELS = {  # op type -> (model, input names by node position, output name)
    "MatMul": ("matmul", ["A", "B"], "Y"),
    "GroupedMatMul": ("grouped_matmul", ["input", "weights", "group_indices", "bias"], "output"),
}
DATATYPES = {onnx.TensorProto.FLOAT: "FP32", onnx.TensorProto.DOUBLE: "FP64",
             onnx.TensorProto.FLOAT16: "FP16", onnx.TensorProto.BFLOAT16: "BF16",
             onnx.TensorProto.INT32: "INT32", onnx.TensorProto.INT64: "INT64",
             onnx.TensorProto.UINT32: "UINT32", onnx.TensorProto.UINT64: "UINT64"}
TOLERANCE = {"FP16": dict(rtol=4e-3, atol=1e-3), "BF16": dict(rtol=1.6e-2, atol=1e-2)}
DEFAULT_TOLERANCE = dict(rtol=1e-3, atol=1e-7)


def load_tensor(path):
    """(datatype, array) of a TensorProto file; BF16 as uint16 bit patterns, which
    onnx 1.12's numpy_helper does not produce."""
    tensor = onnx.load_tensor(path)
    datatype = DATATYPES.get(tensor.data_type)
    if datatype is None:
        raise AssertionError(f"{path}: unsupported TensorProto data_type {tensor.data_type}")
    if datatype == "BF16":
        if tensor.raw_data:
            bits = np.frombuffer(tensor.raw_data, dtype="<u2")
        else:  # int32_data holds one bit pattern per element
            bits = np.array(tensor.int32_data, dtype=np.uint32).astype(np.uint16)
        return datatype, bits.reshape(tuple(tensor.dims)), tensor.name
    return datatype, numpy_helper.to_array(tensor), tensor.name


def discover():
    root = os.path.join(shared_dir(), "conformance", "onnx-node")
    cases = sorted(d for d in glob.glob(os.path.join(root, "test_*")) if os.path.isdir(d))
    if not cases:
        raise RuntimeError(f"no test_* folders in {root}")
    return cases


try:
    CASES, DISCOVERY_ERROR = discover(), None
except RuntimeError as error:
    CASES, DISCOVERY_ERROR = [], str(error)


class OnnxConformanceTest(GemmServeTestCase):

    def test_conformance_data_is_present(self):
        self.assertIsNone(DISCOVERY_ERROR)
        self.assertGreaterEqual(len(CASES), MIN_CASES,
                                f"only {len(CASES)} ONNX node tests found")

    def run_case(self, case_dir):
        model = onnx.load(os.path.join(case_dir, "model.onnx"))
        self.assertEqual(len(model.graph.node), 1, "one-node model")
        node = model.graph.node[0]
        self.assertIn(node.op_type, MODELS)
        model_name, input_names, output_name = MODELS[node.op_type]
        graph_inputs = [i.name for i in model.graph.input]
        data_sets = sorted(glob.glob(os.path.join(case_dir, "test_data_set_*")))
        self.assertTrue(data_sets, f"{case_dir} has no test_data_set_*")
        for data_set in data_sets:
            # input_<i>.pb belongs to the i-th graph input.
            by_name = {}
            for i, graph_input in enumerate(graph_inputs):
                datatype, array, name = load_tensor(os.path.join(data_set, f"input_{i}.pb"))
                self.assertIn(name, ("", graph_input))
                by_name[graph_input] = (datatype, array)
            self.assertLessEqual(len(node.input), len(input_names))
            inputs = [(input_names[position], by_name[name][1], by_name[name][0])
                      for position, name in enumerate(node.input) if name]
            response = self.infer(make_infer_request(model_name, inputs))
            datatype, expected, _ = load_tensor(os.path.join(data_set, "output_0.pb"))
            self.assertEqual([t.datatype for t in response.outputs], [datatype])
            got = decode_outputs(response)[output_name]
            self.assertEqual(got.shape, expected.shape)
            if datatype == "BF16":
                got, expected = bf16_bits_to_float32(got), bf16_bits_to_float32(expected)
            np.testing.assert_allclose(got, expected, **TOLERANCE.get(datatype, DEFAULT_TOLERANCE),
                                       err_msg=os.path.relpath(data_set, os.path.dirname(case_dir)))


def _add_case(case_dir):
    def test(self):
        self.run_case(case_dir)
    name = os.path.basename(case_dir)
    test.__name__ = name
    test.__doc__ = f"ONNX node test {name} through gRPC"
    setattr(OnnxConformanceTest, name, test)


for _case in CASES:
    _add_case(_case)


if __name__ == "__main__":
    unittest.main(verbosity=2)
