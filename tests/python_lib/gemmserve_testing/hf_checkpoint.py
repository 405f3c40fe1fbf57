"""Tiny Hugging Face mixture-of-experts checkpoints for tests (issue 41): safetensors written by
the format's spec, with OLMoE/Qwen-MoE or Mixtral tensor names, and the Hugging Face block's
forward computed directly in float64 (OlmoeSparseMoeBlock, MixtralSparseMoeBlock), as the
reference the converted and served layer is judged against."""
import json
import os

import numpy as np


def bf16_bits(values):
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors):
    """tensors: {name: (float array, "F32" | "F16" | "BF16")}; returns the values as stored."""
    header, blobs, stored, at = {}, [], {}, 0
    for name, (values, dtype) in tensors.items():
        values = np.asarray(values, np.float32)
        if dtype == "BF16":
            raw = bf16_bits(values)
            stored[name] = (raw.astype(np.uint32) << 16).view(np.float32).reshape(values.shape)
        else:
            raw = values.astype(np.float16 if dtype == "F16" else np.float32)
            stored[name] = raw.astype(np.float32)
        data = raw.astype(raw.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(values.shape),
                        "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the spec pads the header to 8 bytes
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))
    return stored


NAMES = {
    "olmoe": ("mlp.experts.{e}.gate_proj.weight", "mlp.experts.{e}.up_proj.weight",
              "mlp.experts.{e}.down_proj.weight", "mlp.gate.weight"),
    "mixtral": ("block_sparse_moe.experts.{e}.w1.weight", "block_sparse_moe.experts.{e}.w3.weight",
                "block_sparse_moe.experts.{e}.w2.weight", "block_sparse_moe.gate.weight"),
}


def tiny_checkpoint(folder, family, k, i, g, top_k, layer=1, norm=False, dtype="BF16", seed=5):
    """Two layers' MoE blocks (and an unrelated tensor) in `folder`, split over two files,
    with config.json; returns layer `layer`'s weights as stored, Hugging Face layout
    ({"gate": [G, I, K], "up": [G, I, K], "down": [G, K, I], "router": [G, K]})."""
    rng = np.random.default_rng(seed)
    gate_name, up_name, down_name, router_name = NAMES[family]
    files = [{}, {}]
    for n in range(2):
        prefix = f"model.layers.{n}."
        files[n][prefix + "self_attn.q_proj.weight"] = (rng.standard_normal((k, k)), "F32")
        files[n][prefix + router_name] = (rng.standard_normal((g, k)), "F32")
        for e in range(g):
            for name, shape in ((gate_name, (i, k)), (up_name, (i, k)), (down_name, (k, i))):
                values = rng.standard_normal(shape) / np.sqrt(shape[1])
                files[n][prefix + name.format(e=e)] = (values, dtype)
    stored = {}
    for n, tensors in enumerate(files):
        stored.update(write_safetensors(
            os.path.join(folder, f"model-0000{n + 1}-of-00002.safetensors"), tensors))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"num_experts_per_tok": top_k, "norm_topk_prob": norm}, f)
    prefix = f"model.layers.{layer}."
    return {"gate": np.stack([stored[prefix + gate_name.format(e=e)] for e in range(g)]),
            "up": np.stack([stored[prefix + up_name.format(e=e)] for e in range(g)]),
            "down": np.stack([stored[prefix + down_name.format(e=e)] for e in range(g)]),
            "router": stored[prefix + router_name]}


def hf_block(w, x, top_k, norm, family):
    """The Hugging Face block's forward in float64: router logits x @ gate.T, softmax over
    all experts, top-k, renormalised (always for Mixtral; norm_topk_prob for OLMoE), and the
    weighted sum of down(SiLU(gate(x)) * up(x)) of the chosen experts."""
    x = np.asarray(x, np.float64)
    logits = x @ w["router"].astype(np.float64).T
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ids = np.argsort(-p, axis=-1, kind="stable")[:, :top_k]
    rw = np.take_along_axis(p, ids, -1)
    if norm or family == "mixtral":
        rw = rw / rw.sum(-1, keepdims=True)
    out = np.zeros_like(x)
    for m in range(x.shape[0]):
        for slot in range(top_k):
            e = ids[m, slot]
            g = w["gate"][e].astype(np.float64) @ x[m]
            u = w["up"][e].astype(np.float64) @ x[m]
            out[m] += rw[m, slot] * (w["down"][e].astype(np.float64) @ (g / (1 + np.exp(-g)) * u))
    return out
