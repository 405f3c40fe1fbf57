"""Reference results and error bounds for MatMul and GroupedMatMul.

Floating-point results are compared with an exact-ish reference (long double)
under a rigorous bound instead of a guessed tolerance: a sum of K products
accumulated in a format with unit roundoff u is off by at most about
K * u * sum|a||b| (any summation order), and rounding the sum to a narrower
output format adds at most half an ulp. FP16/BF16 accumulate in FP32 and round
once, so their bound is the FP32 accumulation term plus one FP16/BF16 rounding.
Integer results must be exact, wrapping modulo 2^bits like numpy.
"""
import numpy as np

from gemmserve_client import bf16_bits_to_float32, float32_to_bf16_bits

FLOAT_TYPES = ("FP32", "FP64", "FP16", "BF16")
INT_TYPES = ("INT32", "INT64", "UINT32", "UINT64")
MATMUL_TYPES = FLOAT_TYPES + INT_TYPES

# Rounding error of one accumulation step (2u of the accumulator: a factor 2 of slack).
_ACCUMULATE_EPS = {"FP64": 2.0**-52, "FP32": 2.0**-23, "FP16": 2.0**-23, "BF16": 2.0**-23}
# Half an ulp of the output format, relative; zero where the accumulator is the output.
_OUTPUT_ROUNDING = {"FP64": 0.0, "FP32": 0.0, "FP16": 2.0**-11, "BF16": 2.0**-8}
# Smallest subnormal of the output format, plus accumulator underflow slack.
_TINY = {"FP64": 2.0**-1074, "FP32": 2.0**-149, "FP16": 2.0**-24, "BF16": 2.0**-133}

_INT_DTYPES = {"INT32": np.int32, "INT64": np.int64, "UINT32": np.uint32, "UINT64": np.uint64}
_UNSIGNED_OF = {"INT32": np.uint32, "INT64": np.uint64, "UINT32": np.uint32, "UINT64": np.uint64}


def to_wire(datatype, values):
    """float or int values -> the numpy array the wire carries for `datatype`.

    Floats are rounded to the datatype (BF16 to nearest-even bits)."""
    values = np.asarray(values)
    if datatype == "BF16":
        return float32_to_bf16_bits(values.astype(np.float32))
    if datatype == "FP16":
        return values.astype(np.float16)
    if datatype == "FP32":
        return values.astype(np.float32)
    if datatype == "FP64":
        return values.astype(np.float64)
    return values.astype(_INT_DTYPES[datatype])


def to_float(datatype, wire):
    """The wire array of a float datatype -> float64 values (exact)."""
    if datatype == "BF16":
        return bf16_bits_to_float32(wire).astype(np.float64)
    return np.asarray(wire).astype(np.float64)


def random_wire(rng, datatype, shape, low=-1.0, high=1.0):
    """Random values for `datatype`: uniform floats, or integers across the full range."""
    if datatype in FLOAT_TYPES:
        return to_wire(datatype, rng.uniform(low, high, size=shape))
    info = np.iinfo(_INT_DTYPES[datatype])
    return rng.integers(info.min, info.max, size=shape, dtype=_INT_DTYPES[datatype],
                        endpoint=True)


def small_int_wire(rng, datatype, shape, bound=8):
    """Integers in [-bound, bound] ([0, bound] for unsigned): exact in every datatype, and
    their products' sums stay exact in FP32 for the sizes the tests use."""
    low = 0 if datatype.startswith("UINT") else -bound
    return to_wire(datatype, rng.integers(low, bound, size=shape, endpoint=True))


def integer_matmul(a, b, datatype):
    """numpy.matmul wrapped to `datatype`: computed in uint64, where overflow is defined
    and wraps mod 2^64; two's complement makes that right for signed values too, and
    2^32 divides 2^64, so truncating gives the 32-bit results."""
    a64 = np.asarray(a).astype(np.int64 if datatype.startswith("INT") else np.uint64)
    b64 = np.asarray(b).astype(a64.dtype)
    wrapped = np.matmul(a64.view(np.uint64), b64.view(np.uint64))
    return np.asarray(wrapped).astype(_UNSIGNED_OF[datatype]).view(_INT_DTYPES[datatype])


def _reference_dtype(datatype):
    """What a float reference is computed in: long double for FP64; float64 for the narrower
    types, whose products (of 24 significant bits or fewer) float64 holds exactly and whose
    sums it rounds K * 2^-53 relative at most, 2^-29 of their own bound, at BLAS speed."""
    return np.longdouble if datatype == "FP64" else np.float64


def _matmul_long(a, b, dtype=np.longdouble):
    return np.matmul(a.astype(dtype), b.astype(dtype))


def _contracted(a_shape):
    return a_shape[-1] if len(a_shape) else 1


def _assert_within(got, exact, bound, datatype, what):
    got = np.asarray(got, dtype=np.longdouble)
    exact = np.asarray(exact, dtype=np.longdouble)
    special = ~np.isfinite(exact)
    if special.any():
        if not np.array_equal(got[special], exact[special], equal_nan=True):
            raise AssertionError(f"{what}: NaN/Inf differ: got {got[special]}, "
                                 f"expected {exact[special]}")
    tol = bound + _OUTPUT_ROUNDING[datatype] * (np.abs(exact) + bound) + _TINY[datatype]
    err = np.abs(got - exact)
    bad = ~special & ~(err <= tol)  # NaN in got counts as bad
    if bad.any():
        where = tuple(np.argwhere(bad)[0])
        raise AssertionError(
            f"{what} {datatype}: {int(bad.sum())} of {bad.size} elements out of bound; first at "
            f"{where}: got {got[where]!r}, expected {exact[where]!r}, allowed error "
            f"{tol[where]!r}")


def decode_float(datatype, got):
    return to_float(datatype, got) if datatype in FLOAT_TYPES else got


def assert_matmul_result(got, a, b, datatype, what="matmul"):
    """got (wire array from the server) equals numpy.matmul(a, b) for `datatype`."""
    if datatype in INT_TYPES:
        expected = integer_matmul(a, b, datatype)
        if got.shape != expected.shape or got.dtype != expected.dtype:
            raise AssertionError(f"{what}: got {got.dtype}{list(got.shape)}, expected "
                                 f"{expected.dtype}{list(expected.shape)}")
        if not np.array_equal(got, expected):
            where = tuple(np.argwhere(got != expected)[0])
            raise AssertionError(f"{what} {datatype}: at {where} got {got[where]}, expected "
                                 f"{expected[where]}")
        return
    af, bf = to_float(datatype, a), to_float(datatype, b)
    exact = _matmul_long(af, bf, _reference_dtype(datatype))
    if got.shape != exact.shape:
        raise AssertionError(f"{what}: got shape {list(got.shape)}, expected "
                             f"{list(exact.shape)}")
    k = _contracted(np.shape(a))
    # The bound's scale: float64's rounding of it is far below what it bounds.
    bound = k * _ACCUMULATE_EPS[datatype] * _matmul_long(np.abs(af), np.abs(bf), np.float64)
    _assert_within(to_float(datatype, got), exact, bound, datatype, what)


def grouped_matmul_exact(x, w, idx, bias=None, dtype=np.longdouble):
    """output[m, s] = x[m] @ w[idx[m, s]] (+ bias[idx[m, s]]), in `dtype` (long double unless
    asked), one product per expert over the rows routed to it."""
    x, w = np.asarray(x, dtype), np.asarray(w, dtype)
    m, s = np.shape(idx)
    n = w.shape[2]
    out = np.zeros((m, s, n), dtype=dtype)
    idx = np.asarray(idx)
    for g in np.unique(idx):
        rows, slots = np.nonzero(idx == g)
        out[rows, slots] = x[rows] @ w[int(g)]
        if bias is not None:
            out[rows, slots] += np.asarray(bias, dtype)[int(g)]
    return out


def assert_grouped_matmul_result(got, x, w, idx, bias, datatype, what="grouped_matmul"):
    xf, wf = to_float(datatype, x), to_float(datatype, w)
    bf = None if bias is None else to_float(datatype, bias)
    exact = grouped_matmul_exact(xf, wf, idx, bf, _reference_dtype(datatype))
    if got.shape != exact.shape:
        raise AssertionError(f"{what}: got shape {list(got.shape)}, expected "
                             f"{list(exact.shape)}")
    k = xf.shape[1]
    magnitude = grouped_matmul_exact(np.abs(xf), np.abs(wf), idx,
                                     None if bf is None else np.abs(bf), np.float64)
    # With a bias, the product may be rounded once before the bias is added.
    bound = k * _ACCUMULATE_EPS[datatype] * magnitude
    if bias is not None:
        bound = bound + _OUTPUT_ROUNDING[datatype] * magnitude
    _assert_within(to_float(datatype, got), exact, bound, datatype, what)
