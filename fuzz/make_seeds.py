#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/.

The seeds are committed; run this again only to change them:

    /usr/bin/python3 fuzz/make_seeds.py

fuzz_infer_request gets serialized ModelInferRequest messages (valid ones for
both built-in models and each datatype family, and invalid ones from
RELIABILITY.md's envelope rows), made with protoc's Python code for
proto/grpc_service.proto. fuzz_shapes, fuzz_grouped_indices and
fuzz_resident_model read their input front to back as fuzz/fuzz_support.h's
ByteReader does; the layouts are described at the top of each target.
fuzz_model_loader gets real one-node models (tests/python_lib's onnx_models)
and mixture-of-experts layer graphs (scripts/make_moe_layer.py) with
config.pbtxt texts. fuzz_http_connection gets raw HTTP connections: requests
over every route and framing, after a byte that says how they are sent.
"""
import importlib.util
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.join(HERE, "..", "proto")
CORPUS = os.path.join(HERE, "corpus")

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def load_protocol(tmp):
    subprocess.run(["protoc", "-I", PROTO_DIR, "--python_out=" + tmp,
                    "grpc_service.proto", "model_config.proto"], check=True)
    sys.path.insert(0, tmp)
    import grpc_service_pb2  # noqa: E402
    return grpc_service_pb2


def pack(fmt, values):
    return struct.pack("<%d%s" % (len(values), fmt), *values)


def bf16(values):
    """float -> BF16 bits, truncating (exact for the small values used here)."""
    return [struct.unpack("<I", struct.pack("<f", v))[0] >> 16 for v in values]


def infer_request_seeds(pb):
    seeds = {}

    def request(model, inputs, raw=True, **params):
        r = pb.ModelInferRequest(model_name=model)
        for name, datatype, shape, contents in inputs:
            t = r.inputs.add(name=name, datatype=datatype, shape=shape)
            if raw:
                if contents is not None:
                    r.raw_input_contents.append(contents)
            elif contents is not None:
                field, values = contents
                getattr(t.contents, field).extend(values)
        for key, value in params.items():
            if value >= 0:
                r.parameters[key].uint64_param = value
            else:
                r.parameters[key].int64_param = value
        return r.SerializeToString()

    seeds["matmul_fp32_raw"] = request("matmul", [
        ("A", "FP32", [2, 3], pack("f", [1, 2, 3, 4, 5, 6])),
        ("B", "FP32", [3, 2], pack("f", [1, 0, 0, 1, 1, 1]))])
    seeds["matmul_int32_typed_vector"] = request("matmul", [
        ("A", "INT32", [2, 2], ("int_contents", [1, -2, 3, 2**31 - 1])),
        ("B", "INT32", [2], ("int_contents", [5, 7]))], raw=False)
    seeds["matmul_int64_broadcast"] = request("matmul", [
        ("A", "INT64", [2, 1, 1, 2], pack("q", [1, 2, 3, INT64_MAX])),
        ("B", "INT64", [3, 2, 1], pack("q", [1, 1, 2, 2, 3, -3]))])
    seeds["matmul_uint64_k0"] = request("matmul", [
        ("A", "UINT64", [2, 0], b""), ("B", "UINT64", [0, 3], b"")])
    seeds["matmul_fp16_batch"] = request("matmul", [
        ("A", "FP16", [2, 1, 2], pack("H", [0x3c00, 0x4000, 0x7c00, 0x0001])),
        ("B", "FP16", [2, 2, 1], pack("H", [0x3c00, 0xbc00, 0x7e00, 0x3800]))],
        priority=1, timeout=1000)
    # Every datatype reaches RunBatch from some seed: an FP64 one was missing
    # when a misaligned FP64 scratch went unfound (fuzz/regressions/).
    seeds["matmul_fp64_raw"] = request("matmul", [
        ("A", "FP64", [2, 3], pack("d", [1, -2, 3.5, 0, 1e300, -1e-300])),
        ("B", "FP64", [3, 2], pack("d", [1, 0, 0, 1, 1, 1]))])
    seeds["matmul_bf16_vector"] = request("matmul", [
        ("A", "BF16", [3], pack("H", bf16([1, 2, 3]))),
        ("B", "BF16", [3, 2], pack("H", bf16([1, 0.5, -1, 2, 0.25, 4])))])
    seeds["matmul_uint32_typed"] = request("matmul", [
        ("A", "UINT32", [1, 2], ("uint_contents", [2**32 - 1, 7])),
        ("B", "UINT32", [2, 1], ("uint_contents", [3, 5]))], raw=False)
    seeds["grouped_fp64_bias"] = request("grouped_matmul", [
        ("input", "FP64", [1, 2], pack("d", [1, 2])),
        ("weights", "FP64", [2, 2, 1], pack("d", [1, 1, 2, -2])),
        ("group_indices", "INT32", [1, 2], pack("i", [1, 0])),
        ("bias", "FP64", [2, 1], pack("d", [0.5, -0.5]))])
    seeds["grouped_bf16_int64_bias"] = request("grouped_matmul", [
        ("input", "BF16", [2, 3], pack("H", bf16([1, 2, 3, -1, 0.5, 4]))),
        ("weights", "BF16", [2, 3, 2], pack("H", bf16([1, 0, 0, 1, 1, 1, 2, 2, -1, 0, 0.25, 3]))),
        ("group_indices", "INT64", [2, 2], pack("q", [0, 1, 1, 1])),
        ("bias", "BF16", [2, 2], pack("H", bf16([0.5, -0.5, 1, 2])))])
    seeds["grouped_fp16_int32"] = request("grouped_matmul", [
        ("input", "FP16", [1, 2], pack("H", [0x3c00, 0x4000])),
        ("weights", "FP16", [3, 2, 1], pack("H", [0x3c00] * 6)),
        ("group_indices", "INT32", [1, 1], pack("i", [2]))])
    seeds["grouped_fp32_typed"] = request("grouped_matmul", [
        ("input", "FP32", [2, 2], ("fp32_contents", [1, 2, 3, 4])),
        ("weights", "FP32", [1, 2, 2], ("fp32_contents", [1, 0, 0, 1])),
        ("group_indices", "INT64", [2, 1], ("int64_contents", [0, 0]))], raw=False)
    seeds["grouped_fp64_s0"] = request("grouped_matmul", [
        ("input", "FP64", [2, 1], pack("d", [1, 2])),
        ("weights", "FP64", [1, 1, 1], pack("d", [3])),
        ("group_indices", "INT64", [2, 0], b"")])
    # Invalid requests (RELIABILITY.md E1-E7, G1, G5).
    seeds["bad_index_int64_max"] = request("grouped_matmul", [
        ("input", "FP32", [1, 1], pack("f", [1])),
        ("weights", "FP32", [2, 1, 1], pack("f", [1, 2])),
        ("group_indices", "INT64", [1, 1], pack("q", [INT64_MAX]))])
    seeds["bad_g0"] = request("grouped_matmul", [
        ("input", "FP32", [1, 1], pack("f", [1])),
        ("weights", "FP32", [0, 1, 1], b""),
        ("group_indices", "INT32", [1, 1], pack("i", [0]))])
    r = pb.ModelInferRequest(model_name="matmul")
    r.inputs.add(name="A", datatype="FP32", shape=[1, 1]).contents.fp32_contents.append(1)
    r.inputs.add(name="B", datatype="FP32", shape=[1, 1])
    r.raw_input_contents.extend([pack("f", [1]), pack("f", [2])])
    seeds["bad_raw_and_typed"] = r.SerializeToString()
    seeds["bad_negative_dim"] = request("matmul", [
        ("A", "FP32", [INT64_MIN, 1], b""), ("B", "FP32", [1, -1], b"")])
    seeds["bad_overflow_shape"] = request("matmul", [
        ("A", "FP64", [2**62, 4], b""), ("B", "FP64", [4, 2**62], b"")])
    seeds["bad_datatype"] = request("matmul", [
        ("A", "FP8", [1], b"\0"), ("B", "INT8", [1], b"\0")])
    seeds["bad_raw_count"] = request("matmul", [
        ("A", "FP32", [1, 2], pack("f", [1, 2])), ("B", "FP32", [2, 1], pack("f", [1]) + b"\0")])
    seeds["bad_duplicate_input"] = request("matmul", [
        ("A", "FP32", [1], pack("f", [1])), ("A", "FP32", [1], pack("f", [1]))])
    seeds["bad_parameter"] = request("matmul", [
        ("A", "FP32", [1], pack("f", [1])), ("B", "FP32", [1], pack("f", [1]))], priority=-1)
    seeds["empty"] = b""
    return seeds


def dims(*values):
    """ByteReader::Dimension encodings: 0..63 as is, anything else raw."""
    out = b""
    for v in values:
        out += bytes([v]) if 0 <= v < 0x40 else b"\x80" + struct.pack("<q", v)
    return out


def shape(*values):
    return bytes([len(values)]) + dims(*values)


def shapes_seeds():
    fp32, bf16_type, int64 = 2, 0, 5  # indices into kAllDataTypes
    return {
        "matmul_2x3_3x4": bytes([fp32]) + shape(2, 3) + shape(3, 4) + shape() + shape() + b"\0",
        "matmul_broadcast": bytes([int64]) + shape(2, 1, 3, 4) + shape(5, 4, 6) + shape() +
                            shape() + b"\0",
        "matmul_vectors": bytes([fp32]) + shape(3) + shape(3) + shape() + shape() + b"\0",
        "grouped_bias": bytes([bf16_type]) + shape(4, 8) + shape(3, 8, 5) + shape(4, 2) +
                        shape(3, 5) + b"\1",
        "overflow_2pow62": bytes([fp32]) + shape(2**62, 4) + shape(4, 2**62) + shape(2**62, 2) +
                           shape(2**62, 1) + b"\0",
        "sqrt_int64_max": bytes([int64]) + shape(3037000499, 3037000499) +
                          shape(3037000499, 3037000500) + shape() + shape() + b"\0",
        "negative_min": bytes([fp32]) + shape(INT64_MIN, -1) + shape(-1, 0) + shape(0, INT64_MAX) +
                        shape() + b"\0",
        "zero_with_huge": bytes([fp32]) + shape(0, 2**62, 2**62) + shape(0, 2**62) +
                          shape() + shape() + b"\0",
        "rank_33": bytes([fp32]) + shape(*([1] * 33)) + shape(*([2] * 32)) + shape() + shape() +
                   b"\0",
    }


def grouped_indices_seeds():
    def case(m, k, n, g, s, flags, indices, values=b""):
        return bytes([m, k, n, g, s, flags]) + bytes(indices) + values

    int64, bias, two_threads, raw_bits = 1, 2, 16, 32
    fp32, fp64, fp16, bf16_type = 0, 4, 8, 12
    values = bytes(range(1, 200))
    return {
        "fp32_int64_bias": case(3, 4, 2, 3, 2, fp32 | int64 | bias, [0, 1, 2, 2, 1, 0], values),
        "bf16_int32_threads": case(8, 8, 8, 4, 2, bf16_type | two_threads, range(16), values),
        "fp16_int64": case(2, 3, 5, 2, 1, fp16 | int64, [1, 0], values),
        "fp64_bias": case(1, 1, 1, 1, 1, fp64 | bias, [0], values),
        "edge_g_int32": case(2, 2, 2, 2, 1, fp32, [0, 0xc0], values),
        "edge_2pow32_plus_1": case(2, 2, 2, 2, 1, fp32 | int64, [0, 0xc7], values),
        "raw_int64_min": case(1, 2, 2, 3, 1, fp32 | int64, [0xf0], struct.pack("<q", INT64_MIN)),
        "g0_empty": case(0, 3, 3, 0, 4, fp32, []),
        "raw_bits": case(2, 2, 2, 2, 2, fp32 | raw_bits, [0, 1, 1, 0], b"\xff\x7f\x80\x7f" * 8),
    }


def resident_model_seeds():
    """Layout at the top of fuzz_resident_model.cc."""
    values = bytes((i * 37 + 11) % 256 for i in range(600))
    free, weights_value = 0, 1

    def fixed(v):
        return 2 + v

    grouped, bias, int32, raw_bits = 1, 16, 32, 64

    def types(i):  # datatype index into the op's list, in bits 1-3
        return i << 1

    def matmul(dtype, k, n, sig, requests):
        head = bytes([types(dtype), k, n, 0, 0, len(sig) - 1]) + bytes(sig)
        return head + values[:k * n] + b"".join(requests)

    def grouped_model(flags, k, n, g, s, x_sig, idx_sig, requests):
        head = bytes([grouped | flags, k, n, g, s]) + bytes(x_sig + idx_sig)
        w = values[:g * k * n] + (values[:g * n] if flags & bias else b"")
        return head + w + b"".join(requests)

    def request(flags, m, dim_tags, count):
        return bytes([flags, m]) + bytes(dim_tags) + values[:count]

    quantized = 128

    def quantized_grouped(flags, k, n, g, s, layout, block, scales, requests):
        """Bits 0-1 of `layout`: INT8 UINT8 INT4 UINT4; bit 2 zero point; bits 3-4 grain."""
        head = bytes([grouped | quantized | flags, k, n, g, s, free, weights_value, free,
                      weights_value, layout, block])
        zps = scales if layout & 4 else 0
        body = values[:g * k * n + scales + zps] + (values[:g * n] if flags & bias else b"")
        return head + body + b"".join(requests)

    def quantized_matmul(dtype, k, n, layout, block, scales, requests):
        head = bytes([types(dtype) | quantized, k, n, 0, 0, 1, free, weights_value, layout, block])
        zps = scales if layout & 4 else 0
        return head + values[:k * n + scales + zps] + b"".join(requests)

    return {
        "matmul_fp32_m_k": matmul(0, 4, 3, [free, weights_value],
                                  [request(0, 2, [0, 0], 8), request(0, 3, [0, 0], 12),
                                   request(0, 1, [0, 6], 5)]),
        "matmul_int64_rank3": matmul(5, 2, 2, [fixed(2), free, weights_value],
                                     [request(0, 2, [0, 0, 0], 8), request(7, 1, [0, 0, 0], 4)]),
        "matmul_bf16_vector": matmul(3, 3, 5, [weights_value], [request(0, 0, [0], 3)]),
        "matmul_k_wrong": matmul(0, 4, 3, [free, fixed(5)], []),
        "grouped_fp32_bias_s2": grouped_model(types(0) | bias, 3, 2, 3, 2,
                                              [free, weights_value], [free, weights_value],
                                              [request(0, 2, [0, 0, 0, 0], 6 + 4),
                                               request(0, 3, [0, 0, 0, 6], 9 + 9),
                                               request(0, 1, [0, 0, 0, 0], 3 + 2)]),
        "grouped_fp16_int32_s1": grouped_model(types(2) | int32, 2, 2, 2, 1,
                                               [free, free], [free, weights_value],
                                               [request(0, 4, [0, 0, 0, 0], 8 + 4),
                                                request(0x30, 2, [0, 0, 0, 0], 4 + 2)]),
        "grouped_fp64_m_fixed": grouped_model(types(1), 2, 3, 4, 3, [fixed(2), free],
                                              [fixed(2), weights_value],
                                              [request(0, 2, [0, 0, 0, 0], 4 + 6)]),
        "grouped_s_free": grouped_model(types(0), 2, 2, 2, 2, [free, free], [free, free], []),
        # Quantized weights: INT4 blocked (blocks of 2 of K=3) with a zero point,
        # BF16; UINT8 per column; INT8 per row of a MatMul; a scale shape made wrong.
        "quantized_int4_blocked_bf16": quantized_grouped(
            types(3) | bias, 3, 5, 2, 2, 2 | 4 | (3 << 3), 1, 2 * 2 * 5,
            [request(0, 2, [0, 0, 0, 0], 6 + 4), request(0, 1, [0, 0, 0, 0], 3 + 2)]),
        "quantized_uint8_per_column": quantized_grouped(
            types(0), 4, 3, 3, 1, 1 | 4 | (1 << 3), 0, 3, [request(0, 3, [0, 0, 0, 0], 12 + 3)]),
        "quantized_matmul_int8_per_row": quantized_matmul(
            2, 5, 2, 0 | (2 << 3), 0, 5, [request(0, 2, [0, 0], 10)]),
        "quantized_bad_scale_shape": quantized_grouped(
            types(0), 2, 2, 2, 1, 3 | 32 | (3 << 3), 0, 2 * 1 * 2, []),
        "grouped_raw_bits": grouped_model(types(3) | raw_bits, 2, 2, 2, 2, [free, free],
                                          [free, weights_value],
                                          [request(0, 2, [0, 0, 0, 0], 8 + 4)]),
    }


def model_loader_seeds():
    """Layout at the top of fuzz_model_loader.cc: real models and configs."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "python_lib"))
    import numpy as np  # noqa: E402
    from gemmserve_testing.onnx_models import grouped_graph, matmul_graph, model_bytes  # noqa

    def case(config, model, weights=b""):
        assert len(config) < 256 and len(weights) % 16 == 0 and len(weights) < 4096
        return bytes([len(config)]) + config + bytes([len(weights) // 16]) + weights + model

    w = (np.arange(2 * 4 * 3) % 7 - 3).astype(np.float32).reshape(2, 4, 3)
    grouped = model_bytes(grouped_graph("fuzzed", w, 2)).SerializeToString()
    matmul = model_bytes(matmul_graph("fuzzed", np.ones((4, 2)))).SerializeToString()
    external = model_bytes(grouped_graph("fuzzed", w, 1))
    init = external.graph.initializer[0]
    raw = init.raw_data + b"\0" * (-len(init.raw_data) % 16)
    init.ClearField("raw_data")
    init.data_location = 1
    init.external_data.add(key="location", value="weights.bin")
    init.external_data.add(key="offset", value="0")
    init.external_data.add(key="length", value=str(w.nbytes))
    spec = importlib.util.spec_from_file_location(
        "quantize_model", os.path.join(HERE, "..", "scripts", "quantize_model.py"))
    quantize_model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quantize_model)
    int4 = quantize_model.quantize_model(model_bytes(grouped_graph("fuzzed", w, 2)), 4, True, 3)[0]
    uint8 = quantize_model.quantize_model(
        model_bytes(matmul_graph("fuzzed", np.ones((4, 2), np.float32))), 8, False, 0)[0]
    spec = importlib.util.spec_from_file_location(
        "make_moe_layer", os.path.join(HERE, "..", "scripts", "make_moe_layer.py"))
    moe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(moe)

    def moe_layer(dtype, bits=0, **options):
        model = moe.layer_model(moe.layer_graph(4, 2, 3, 2, dtype, **options))
        return (moe.quantize_layer(model, bits, 2) if bits else model).SerializeToString()

    return {
        # Mixture-of-experts layer graphs (moe_layer_graph.h) in several forms.
        "moe_layer_fused_given": case(b"", moe_layer("fp32", routing="given")),
        "moe_layer_separate_softmax": case(
            b"", moe_layer("bf16", gate_up="separate", routing="softmax_topk", normalise=True)),
        "moe_layer_topk_shared_gelu": case(
            b"", moe_layer("fp16", routing="topk_softmax", activation="gelu",
                           shared_expert=True)),
        "moe_layer_int4": case(b"", moe_layer("fp32", bits=4, routing="softmax_topk")),
        # Sharded layers (issue 53): a shard of experts 1..2 of a layer, and a router whose
        # shards are parsed and then refused (the fuzzer's repository has no shard client).
        "moe_layer_shard": case(
            b'parameters{key:"expert_range" value{string_value:"1:4"}}',
            moe_layer("fp32", routing="given")),
        "moe_layer_router": case(
            b'parameters{key:"shards" value{string_value:"0:2=127.0.0.1:1|[::1]:2;2:3=dns:///s:3"}}',
            moe_layer("bf16", routing="softmax_topk", shared_expert=True)),
        "moe_layer_warmup": case(
            b'model_warmup{name:"w" inputs{key:"x" value{data_type:TYPE_FP32 dims:[3,4] '
            b'random_data:true}}}', moe_layer("fp32", routing="topk_softmax")),
        "quantized_int4_blocked": case(b"", int4.SerializeToString()),
        "quantized_uint8_matmul": case(b"", uint8.SerializeToString()),
        "grouped_no_config": case(b"", grouped),
        "grouped_batching": case(b"dynamic_batching { max_queue_delay_microseconds: 100 "
                                 b"priority_levels: 2 } parameters { key: \"max_batch_rows\" "
                                 b"value { string_value: \"64\" } }", grouped),
        "matmul_priority_huge": case(b"dynamic_batching { priority_levels: 2147483647 }", matmul),
        "external_weights": case(b"", external.SerializeToString(), raw),
        "bad_config": case(b"dynamic_batching { bogus: 1 }", matmul),
        # Triton's config.pbtxt as Triton writes it (issue 51): the batch dimension, preferred
        # sizes, instance groups, version policies, and fields refused by name.
        "triton_batched": case(
            b'platform:"onnxruntime_onnx" max_batch_size:8 input[{name:"hidden" '
            b'data_type:TYPE_FP32 dims:[4]}] output[{name:"projected" dims:[2]}] '
            b'instance_group[{count:2 kind:KIND_CPU}] dynamic_batching{'
            b'preferred_batch_size:[4,8] max_queue_delay_microseconds:2000}', matmul),
        "triton_versions": case(
            b'backend: "onnxruntime" version_policy { specific { versions: [1] } } '
            b'max_batch_size: 4 dynamic_batching { preferred_batch_size: 2 }', matmul),
        "triton_latest_all": case(b"version_policy { all {} } max_batch_size: 2", grouped),
        "triton_batched_warmup": case(
            b'max_batch_size: 4 model_warmup { name: "w" batch_size: 3 inputs { key: "hidden" '
            b'value { data_type: TYPE_FP32 dims: [4] random_data: true } } }', matmul),
        "triton_sequence_refused": case(b"sequence_batching { } max_batch_size: 8", matmul),
        "triton_old_spelling": case(b"dynamic_batching { max_batch_rows: 8 }", matmul),
        "grouped_warmup": case(
            b'model_warmup{name:"w" count:3 inputs{key:"tokens" value{data_type:TYPE_FP32 '
            b'dims:[2,4] random_data:true}} inputs{key:"routing" value{data_type:TYPE_INT64 '
            b'dims:[2,2] zero_data:true}}}', grouped),
        "grouped_warmup_file": case(
            b'model_warmup{name:"f" inputs{key:"tokens" value{data_type:TYPE_FP32 dims:[1,4] '
            b'input_data_file:"data.bin"}} inputs{key:"routing" value{data_type:TYPE_INT64 '
            b'dims:[1,2] zero_data:true}}}', grouped, b"\0" * 16),
        "matmul_warmup_batching": case(
            b'dynamic_batching{max_queue_delay_microseconds:50} model_warmup{name:"m" '
            b'inputs{key:"hidden" value{data_type:TYPE_FP64 dims:[3,4] random_data:true}}}',
            matmul),
        "bad_model": case(b"", b"\x08\x08garbage"),
        # Triton's JSON form (triton_config.h), declared tensors checked against the model.
        "json_batching_declared": case(
            b'{"input":[{"name":"hidden","data_type":"TYPE_FP32","dims":[-1,4]}],'
            b'"dynamic_batching":{"default_queue_policy":{"max_queue_size":8}},'
            b'"parameters":{"max_batch_rows":{"string_value":"64"}}}', matmul),
        "json_warmup": case(
            b'{"model_warmup":[{"count":2,"inputs":{"tokens":{"data_type":"TYPE_FP32",'
            b'"dims":[2,4],"random_data":true},"routing":{"data_type":"TYPE_INT64",'
            b'"dims":[2,2],"zero_data":true}}}]}', grouped),
        "json_refused": case(b'{"max_batch_size":8,"output":[{"name":"nope"}]}', grouped),
    }


def write(target, seeds):
    d = os.path.join(CORPUS, target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    print("%s: %d seeds, %d bytes" % (target, len(seeds), sum(len(s) for s in seeds.values())))


def http_connection_seeds():
    """Raw bytes of HTTP connections, after a first byte that says how they are sent
    (0: at once; 0x80 | n: in pieces of n + 1 bytes)."""
    import gzip
    import json

    def post(path, body, headers=""):
        return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                f"{headers}\r\n").encode() + body

    matmul = json.dumps({"inputs": [
        {"name": "A", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]},
        {"name": "B", "shape": [2, 1], "datatype": "FP32", "data": [3, 4]}]}).encode()
    binary_header = json.dumps({"inputs": [
        {"name": "A", "shape": [1, 1], "datatype": "FP32", "parameters": {"binary_data_size": 4}},
        {"name": "B", "shape": [1, 1], "datatype": "FP32", "parameters": {"binary_data_size": 4}}],
        "outputs": [{"name": "Y", "parameters": {"binary_data": True}}]}).encode()
    binary = binary_header + struct.pack("<ff", 2.0, 3.0)
    chunked = (b"POST /v2/models/matmul/infer HTTP/1.1\r\nHost: x\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(matmul) + matmul
               + b"\r\n0\r\n\r\n")
    health = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
    return {
        "infer_json": b"\0" + post("/v2/models/matmul/infer", matmul),
        "infer_binary": b"\0" + post("/v2/models/matmul/infer", binary,
                                     f"Inference-Header-Content-Length: {len(binary_header)}\r\n"),
        "infer_gzip": b"\x85" + post("/v2/models/matmul/infer", gzip.compress(matmul),
                                     "Content-Encoding: gzip\r\n"),
        "chunked_in_pieces": b"\x83" + chunked,
        "pipelined": b"\0" + health + post("/v2/repository/index", b'{"ready":true}') + health,
        "expect_continue": b"\0" + post("/v2/models/matmul/infer", matmul,
                                        "Expect: 100-continue\r\n"),
        "smuggling": b"\0" + b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\n"
                     b"Transfer-Encoding: chunked, identity\r\n\r\n" + health,
        "load_unload": b"\0" + post("/v2/repository/models/nobody/unload", b"")
                       + post("/v2/repository/models/nobody/load", b'{"parameters":{}}'),
        "log_settings": b"\0" + post("/v2/logging",
                                     b'{"log_info":true,"log_verbose_level":1,"log_format":"x"}'),
        "trace_settings": b"\0" + post("/v2/trace/setting",
                                       b'{"trace_level":["TIMESTAMPS","OFF"],"trace_rate":7,'
                                       b'"trace_count":null,"log_frequency":"2"}')
                          + post("/v2/models/matmul/trace/setting", b'{"trace_rate":null}'),
        "shm_register": b"\0" + post("/v2/systemsharedmemory/region/r/register",
                                     b'{"key":"/x","byte_size":8}'),
    }


def main():
    with tempfile.TemporaryDirectory() as tmp:
        write("fuzz_infer_request", infer_request_seeds(load_protocol(tmp)))
    write("fuzz_shapes", shapes_seeds())
    write("fuzz_grouped_indices", grouped_indices_seeds())
    write("fuzz_resident_model", resident_model_seeds())
    write("fuzz_model_loader", model_loader_seeds())
    write("fuzz_http_connection", http_connection_seeds())


if __name__ == "__main__":
    main()
