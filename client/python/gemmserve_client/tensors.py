"""numpy arrays <-> KServe v2 tensors (ModelInferRequest / ModelInferResponse).

Tensors travel as little-endian row-major bytes. numpy has no bfloat16, so a
BF16 tensor is held as a uint16 array of its bit patterns:
float32_to_bf16_bits() and bf16_bits_to_float32() convert, and bf16() marks
such an array as BF16 for a request (a bare uint16 array means UINT16).
"""
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from . import _stubs

pb2, pb2_grpc = _stubs.load()

# KServe datatype name -> little-endian numpy dtype of one element.
DTYPE_OF = {
    "BOOL": np.dtype("?"),
    "INT8": np.dtype("i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "UINT8": np.dtype("u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BF16": np.dtype("<u2"),  # bit patterns
}

# numpy dtype -> KServe datatype name, for arrays passed without a datatype.
# uint16 maps to UINT16: a BF16 tensor must be named explicitly.
DATATYPE_OF = {np.dtype(v).newbyteorder("="): k for k, v in DTYPE_OF.items() if k != "BF16"}

# The InferTensorContents field that carries each datatype when typed
# contents are used. FP16 and BF16 have none.
TYPED_FIELD_OF = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}


def float32_to_bf16_bits(values):
    """Rounds float32 values to bfloat16 (nearest, ties to even); returns uint16 bits.

    NaN stays NaN (made quiet); values past the largest bfloat16 become +-Inf.
    """
    values = np.asarray(values, dtype=np.float32)
    bits = values.reshape(-1).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    rounded = np.where(np.isnan(values.reshape(-1)), (bits >> 16) | 0x0040, rounded)
    return rounded.astype(np.uint16).reshape(values.shape)


def bf16_bits_to_float32(bits):
    """Widens bfloat16 bit patterns (uint16) to float32 exactly."""
    bits = np.asarray(bits, dtype=np.uint16)
    widened = bits.reshape(-1).astype(np.uint32) << 16  # 1-D: a 0-d array cannot be viewed
    return widened.view(np.float32).reshape(bits.shape)


class Tensor(NamedTuple):
    """An array with the KServe datatype it is sent as, where the dtype alone does not say
    (BF16 bits are uint16). Anywhere an input array goes, a Tensor may go instead."""
    array: np.ndarray
    datatype: str


def bf16(bits):
    """Marks a uint16 array of bfloat16 bit patterns as a BF16 input:
    `client.infer("matmul", A=bf16(a_bits), B=bf16(b_bits))`.

    Floats are refused rather than rounded silently: convert them with
    float32_to_bf16_bits() first.
    """
    array = np.asarray(bits)
    if array.dtype != np.uint16:
        raise TypeError(f"bf16() takes uint16 bit patterns, got dtype {array.dtype}; "
                        f"round floats with float32_to_bf16_bits() first")
    return Tensor(array, "BF16")


def datatype_of(array):
    """The KServe datatype name of a numpy array (never BF16: name it explicitly)."""
    try:
        return DATATYPE_OF[np.dtype(array.dtype).newbyteorder("=")]
    except KeyError:
        raise ValueError(f"no KServe datatype for numpy dtype {array.dtype}") from None


def input_entries(inputs=None, arrays=None, datatypes=None, *, strict=True):
    """Normalises the ways inputs can be given into a list of (name, array, datatype).

    inputs: None, a sequence of (name, array) or (name, array, datatype), or a
      mapping {name: array}.
    arrays: a further mapping {name: array} (infer's keyword arguments).
    datatypes: {name: datatype} for inputs whose dtype does not say, e.g. {"A": "BF16"}.
    An array may be a Tensor (see bf16()); the datatype otherwise comes from its dtype.
    strict: refuse what no server would accept (an input given twice, an unknown
      datatype, float values marked BF16) with ValueError/TypeError. make_infer_request
      passes False, so that tests can still build such requests for the server to reject.
    """
    named = []
    if isinstance(inputs, Mapping):
        named.extend((name, value, None) for name, value in inputs.items())
    elif inputs is not None:
        for entry in inputs:
            if isinstance(entry, (str, bytes)) or len(entry) not in (2, 3):
                raise TypeError(f"an input must be (name, array) or (name, array, datatype), "
                                f"got {entry!r:.80}")
            named.append((entry[0], entry[1], entry[2] if len(entry) == 3 else None))
    named.extend((name, value, None) for name, value in (arrays or {}).items())
    datatypes = dict(datatypes or {})

    entries, seen = [], set()
    for name, value, datatype in named:
        if strict and name in seen:
            raise ValueError(f"input '{name}' is given twice")
        seen.add(name)
        if isinstance(value, Tensor):
            datatype = datatype or value.datatype
            value = value.array
        array = np.asarray(value)
        datatype = datatypes.pop(name, None) or datatype or datatype_of(array)
        if strict and datatype not in DTYPE_OF:
            raise ValueError(f"input '{name}': unknown datatype {datatype!r}")
        if strict and datatype == "BF16" and np.issubdtype(array.dtype, np.floating):
            # Casting floats to uint16 would send garbage bit patterns.
            raise TypeError(f"input '{name}': BF16 travels as uint16 bit patterns, got "
                            f"{array.dtype} values; convert with float32_to_bf16_bits()")
        entries.append((name, array, datatype))
    if datatypes:
        raise ValueError(f"datatypes names inputs that are not given: {sorted(datatypes)}")
    return entries


def make_infer_request(model_name, inputs, outputs=None, *, typed=False, model_version="",
                       request_id="", datatypes=None):
    """Builds a ModelInferRequest.

    inputs: sequence of (name, array) or (name, array, datatype), or a mapping
      {name: array}; the datatype defaults from the array's dtype, and must be
      given for a uint16 array of bfloat16 bits: as "BF16" in the tuple, as a
      bf16(array) value, or in `datatypes`.
    outputs: names of the outputs wanted; None asks for all of them.
    typed: put values in the typed `contents` lists instead of raw bytes
      (not possible for FP16/BF16).
    datatypes: {name: datatype}, overriding what the inputs say.
    """
    request = pb2.ModelInferRequest(model_name=model_name, model_version=model_version,
                                    id=request_id)
    for name, array, datatype in input_entries(inputs, datatypes=datatypes, strict=False):
        dtype = DTYPE_OF[datatype]
        tensor = request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
        values = np.ascontiguousarray(array, dtype=dtype)
        if typed:
            field = TYPED_FIELD_OF.get(datatype)
            if field is None:
                raise ValueError(f"{datatype} has no typed contents field; use raw contents")
            getattr(tensor.contents, field).extend(values.ravel().tolist())
        else:
            request.raw_input_contents.append(values.tobytes())
    for name in outputs or ():
        request.outputs.add(name=name)
    return request


def decode_outputs(response):
    """Returns {name: numpy array} for every output of a ModelInferResponse.

    BF16 outputs come back as uint16 bit patterns (see bf16_bits_to_float32).
    """
    if len(response.raw_output_contents) != len(response.outputs):
        raise ValueError(f"response has {len(response.outputs)} outputs but "
                         f"{len(response.raw_output_contents)} raw_output_contents")
    result = {}
    for tensor, raw in zip(response.outputs, response.raw_output_contents):
        dtype = DTYPE_OF[tensor.datatype]
        shape = tuple(tensor.shape)
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if len(raw) != expected:
            raise ValueError(f"output '{tensor.name}': expected {expected} bytes "
                             f"(shape {list(shape)}, {tensor.datatype}), got {len(raw)}")
        result[tensor.name] = np.frombuffer(raw, dtype=dtype).reshape(shape)
    return result
