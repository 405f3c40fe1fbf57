"""One-node ONNX model files for repository tests (Debian's python3-onnx).

    weights = write_grouped(repo, "moe", k=8, n=4, groups=3, s=2)
    write_matmul(repo, "lin", b=np.ones((8, 4), np.float32), config=BATCHING)
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper

_NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
               np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.int64): TensorProto.INT64,
               np.dtype(np.int32): TensorProto.INT32}


def batching_config(delay_us=100, max_rows=0, max_queue=0, timeout_us=0):
    """config.pbtxt (Triton's) of a dynamic batcher; max_rows is gemmserve's
    max_batch_rows parameter."""
    return ("dynamic_batching {\n"
            f"  max_queue_delay_microseconds: {delay_us}\n"
            f"  default_queue_policy {{ max_queue_size: {max_queue} "
            f"default_timeout_microseconds: {timeout_us} }}\n"
            "}\n"
            f'parameters {{ key: "max_batch_rows" value {{ string_value: "{max_rows}" }} }}\n')


def model_bytes(graph):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 29)])
    model.ir_version = 8
    return model


def grouped_graph(name, weights, s, bias=None, index_type=TensorProto.INT64, external=False,
                  onnx_type=None):
    """`onnx_type`: the element type when the array holds its bits (BFLOAT16 as uint16)."""
    onnx_type = onnx_type if onnx_type is not None else _NP_TO_ONNX[weights.dtype]
    groups, k, n = weights.shape
    inits = [helper.make_tensor("experts", onnx_type, list(weights.shape),
                                weights.tobytes(), raw=True)]
    inputs = ["tokens", "experts", "routing"]
    if bias is not None:
        inits.append(helper.make_tensor("expert_bias", onnx_type, list(bias.shape),
                                        bias.tobytes(), raw=True))
        inputs.append("expert_bias")
    node = helper.make_node("GroupedMatMul", inputs, ["expert_out"], name="experts")
    return helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info("tokens", onnx_type, ["M", k]),
         helper.make_tensor_value_info("routing", index_type, ["M", s])],
        [helper.make_tensor_value_info("expert_out", onnx_type, ["M", s, n])],
        initializer=inits)


def matmul_graph(name, b, onnx_type=None):
    """`onnx_type` for wire arrays whose dtype does not say it (BF16 as uint16)."""
    onnx_type = onnx_type if onnx_type is not None else _NP_TO_ONNX[b.dtype]
    k, n = b.shape
    node = helper.make_node("MatMul", ["hidden", "proj"], ["projected"], name="linear")
    return helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info("hidden", onnx_type, ["M", k])],
        [helper.make_tensor_value_info("projected", onnx_type, ["M", n])],
        initializer=[helper.make_tensor("proj", onnx_type, list(b.shape), b.tobytes(), raw=True)])


def write_model(repo, name, graph_or_model, config=None, version=1, external=False):
    model = graph_or_model
    if isinstance(graph_or_model, onnx.GraphProto):
        model = model_bytes(graph_or_model)
    version_dir = os.path.join(repo, name, str(version))
    os.makedirs(version_dir, exist_ok=True)
    path = os.path.join(version_dir, "model.onnx")
    if external:
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="weights.bin", size_threshold=0)
    else:
        with open(path, "wb") as f:
            f.write(model.SerializeToString())
    config_path = os.path.join(repo, name, "config.pbtxt")
    if config is not None:
        with open(config_path, "w") as f:
            f.write(config)
    return path


def grouped_reference(x, w, idx, bias=None):
    """float64 reference of GroupedMatMul."""
    out = np.einsum("mk,mskn->msn", x.astype(np.float64), w.astype(np.float64)[idx])
    if bias is not None:
        out += bias.astype(np.float64)[idx]
    return out
