#!/usr/bin/python3
"""Writes a gemmserve model repository (Triton layout) of one-node ONNX models.

    scripts/make_model_repository.py DIR                # the embedded example
    scripts/make_model_repository.py DIR --olmoe bf16   # + olmoe-shaped experts

The example holds `moe`, a small mixture-of-experts expert layer
(GroupedMatMul: input [M, 512] FP32, 16 experts [512, 256] with bias, top-2
routing), `moe_int4`, the same experts quantized to INT4 in blocks of 32
(DequantizeLinear -> GroupedMatMul, scripts/quantize_model.py), `moe_int4_a8`,
the same with accuracy_level 4 (8-bit activations, integer dot products), `linear`, a
MatMul layer (A [M, 512] FP32 times a resident [512, 256]), and `moe_layer`, a
whole mixture-of-experts FFN layer routed in the graph (scripts/make_moe_layer.py:
x [M, 512] FP32, 16 experts of width 256 with gate/up fused and SiLU, softmax
then top-2, renormalised); all with dynamic batching. `--olmoe DTYPE` adds `olmoe`
(GroupedMatMul with OLMoE's expert shape: K 2048, N 1024, 64 experts, top-8)
with batching and `olmoe_unbatched`, the same weights without it, for the
batching benchmark. Weights are seeded random numbers, stored as ONNX
external data (weights.bin beside model.onnx), so nothing large is in git.
Uses Debian's python3-onnx and python3-numpy.
"""
import argparse
import importlib.util
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

ONNX_TYPES = {
    "fp32": (TensorProto.FLOAT, np.float32),
    "fp64": (TensorProto.DOUBLE, np.float64),
    "fp16": (TensorProto.FLOAT16, np.float16),
    "bf16": (TensorProto.BFLOAT16, None),
}


def bf16_bits(values):
    """FP32 values to BF16 bits, round to nearest even (NaN kept quiet)."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(values)
    rounded = np.where(nan, (u >> 16) | 0x40, rounded)
    return rounded.astype(np.uint16)


def initializer(name, values, dtype):
    onnx_type, np_type = ONNX_TYPES[dtype]
    if dtype == "bf16":
        raw = bf16_bits(values).tobytes()
    else:
        raw = np.ascontiguousarray(values, dtype=np_type).tobytes()
    return helper.make_tensor(name, onnx_type, list(values.shape), raw, raw=True)


def save(repo, name, graph, config):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 29)])
    model.ir_version = 8
    version_dir = os.path.join(repo, name, "1")
    os.makedirs(version_dir, exist_ok=True)
    path = os.path.join(version_dir, "model.onnx")
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    config_path = os.path.join(repo, name, "config.pbtxt")
    if config:
        with open(config_path, "w") as f:
            f.write(config)
    elif os.path.exists(config_path):
        os.remove(config_path)


def grouped_model(repo, name, k, n, groups, s, dtype, bias, config, seed):
    rng = np.random.default_rng(seed)
    onnx_type = ONNX_TYPES[dtype][0]
    scale = 1.0 / np.sqrt(k)
    inits = [initializer("experts", (rng.standard_normal((groups, k, n)) * scale).astype(np.float32), dtype)]
    inputs = ["tokens", "experts", "routing"]
    if bias:
        inits.append(initializer("expert_bias", (rng.standard_normal((groups, n)) * 0.1).astype(np.float32), dtype))
        inputs.append("expert_bias")
    node = helper.make_node("GroupedMatMul", inputs, ["expert_out"], name="experts_up")
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info("tokens", onnx_type, ["M", k]),
         helper.make_tensor_value_info("routing", TensorProto.INT64, ["M", s])],
        [helper.make_tensor_value_info("expert_out", onnx_type, ["M", s, n])],
        initializer=inits)
    save(repo, name, graph, config)


def matmul_model(repo, name, k, n, dtype, config, seed):
    rng = np.random.default_rng(seed)
    onnx_type = ONNX_TYPES[dtype][0]
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    node = helper.make_node("MatMul", ["hidden", "proj"], ["projected"], name="linear")
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info("hidden", onnx_type, ["M", k])],
        [helper.make_tensor_value_info("projected", onnx_type, ["M", n])],
        initializer=[initializer("proj", b, dtype)])
    save(repo, name, graph, config)


BATCHING = """dynamic_batching {
  max_queue_delay_microseconds: 500
  default_queue_policy { max_queue_size: 1024 }
}
parameters { key: "max_batch_rows" value { string_value: "256" } }
"""

# The benchmark's olmoe layer: a decode batch of 64 clients x 4 tokens fits,
# and an idle batcher waits up to 2 ms for the last batch's clients to return
# (on two cores shared with the load generator, they take that long).
OLMOE_BATCHING = """dynamic_batching {
  max_queue_delay_microseconds: 2000
  default_queue_policy { max_queue_size: 1024 }
}
parameters { key: "max_batch_rows" value { string_value: "512" } }
"""


def quantized_copy(repo, source, name, config):
    """`name`: `source` with its weights in INT4, blocks of 32 rows of K
    (scripts/quantize_model.py), the bias kept FP32."""
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("quantize_model",
                                                  os.path.join(here, "quantize_model.py"))
    quantize_model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quantize_model)
    model = onnx.load(os.path.join(repo, source, "1", "model.onnx"))
    quantized, _, _ = quantize_model.quantize_model(model, bits=4, symmetric=True, block_size=32)
    quantized.graph.name = name
    version_dir = os.path.join(repo, name, "1")
    os.makedirs(version_dir, exist_ok=True)
    onnx.save_model(quantized, os.path.join(version_dir, "model.onnx"),
                    save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(config)


def moe_layer_model(repo, name, config):
    """`name`: a whole mixture-of-experts layer (docs/moe_layer.md), routed in the graph."""
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("make_moe_layer",
                                                  os.path.join(here, "make_moe_layer.py"))
    make_moe_layer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_moe_layer)
    graph = make_moe_layer.layer_graph(512, 256, 16, 2, "fp32", gate_up="fused",
                                       routing="softmax_topk", normalise=True, seed=4)
    graph.name = name
    version_dir = os.path.join(repo, name, "1")
    os.makedirs(version_dir, exist_ok=True)
    onnx.save_model(make_moe_layer.layer_model(graph), os.path.join(version_dir, "model.onnx"),
                    save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=1024)
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(config)


def _make_moe_layer():
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("make_moe_layer",
                                                  os.path.join(here, "make_moe_layer.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The shards of the example's sharded layer, as deploy/docker-compose.sharded.yml and
# deploy/k8s/sharded/ name their services (gRPC port 8001, DNS-resolved: a headless Service).
SHARD_ADDRESSES = ["dns:///shard0:8001", "dns:///shard1:8001"]


def sharded_moe_layer(out_dir, name="moe_layer"):
    """The example's `moe_layer` (the same weights) sharded by expert (issue 53):
    out_dir/router/, out_dir/shard0/ (experts 0-7), out_dir/shard1/ (experts 8-15)."""
    m = _make_moe_layer()
    graph = m.layer_graph(512, 256, 16, 2, "fp32", gate_up="fused", routing="softmax_topk",
                          normalise=True, seed=4)
    graph.name = name
    return m.write_sharded(out_dir, name, m.layer_model(graph), 2, SHARD_ADDRESSES)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repo")
    parser.add_argument("--olmoe", choices=sorted(ONNX_TYPES), help="also write olmoe models")
    parser.add_argument("--sharded", metavar="DIR",
                        help="also write the example's moe_layer sharded in two (DIR/router, "
                        "DIR/shard0, DIR/shard1: deploy/docker-compose.sharded.yml)")
    args = parser.parse_args()
    if args.sharded:
        sharded_moe_layer(args.sharded)
    os.makedirs(args.repo, exist_ok=True)
    grouped_model(args.repo, "moe", 512, 256, 16, 2, "fp32", True, BATCHING, seed=1)
    quantized_copy(args.repo, "moe", "moe_int4", BATCHING)
    # The same INT4 experts on 8-bit activations (issue 42).
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("quantize_model",
                                                  os.path.join(here, "quantize_model.py"))
    quantize_model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quantize_model)
    quantized_copy(args.repo, "moe", "moe_int4_a8",
                   BATCHING + quantize_model.accuracy_level_config("4"))
    matmul_model(args.repo, "linear", 512, 256, "fp32", BATCHING, seed=2)
    moe_layer_model(args.repo, "moe_layer", BATCHING)
    if args.olmoe:
        grouped_model(args.repo, "olmoe", 2048, 1024, 64, 8, args.olmoe, False, OLMOE_BATCHING,
                      seed=3)
        grouped_model(args.repo, "olmoe_unbatched", 2048, 1024, 64, 8, args.olmoe, False, None,
                      seed=3)
    print(f"model repository written to {args.repo}")


if __name__ == "__main__":
    sys.exit(main())
