// Test-only helpers shared by the ops tests (kernels, MatMul, GroupedMatMul):
// random operands of any DataType, element access by DataType, and the
// tolerance with which a fast kernel must agree with ReferenceGemm.
//
// Tolerance, for C = A * B with contraction length k and
// abs_dot = sum_p |A[i,p]| * |B[p,j]|:
//   integers          bit-exact (both sides wrap);
//   FP16, BF16        one unit in the last place of the output type (the two
//                     sides may round a sum on either side of a midpoint) plus
//                     twice the worst-case FP32 accumulation error,
//                     2 * k * 2^-24 * abs_dot;
//   FP32              one ulp plus 1e-5 * sqrt(k) * abs_dot;
//   FP64              one ulp plus 1e-13 * sqrt(k) * abs_dot.
// 1e-5 * sqrt(k) exceeds the worst-case FP32 accumulation bound k * 2^-24 for
// every k below ~6900, and stays tight enough to catch a wrong element.
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_GEMM_TESTING_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_GEMM_TESTING_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "server/tensor/datatype.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace ops_testing {

// Element i of a floating-point buffer of `type`, widened exactly to double.
inline double ValueAt(DataType type, const void* data, int64_t i) {
  switch (type) {
    case DataType::kFP16: return HalfToFloat(static_cast<const uint16_t*>(data)[i]);
    case DataType::kBF16: return BFloat16ToFloat(static_cast<const uint16_t*>(data)[i]);
    case DataType::kFP32: return static_cast<const float*>(data)[i];
    case DataType::kFP64: return static_cast<const double*>(data)[i];
    case DataType::kINT32: return static_cast<const int32_t*>(data)[i];
    case DataType::kINT64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DataType::kUINT32: return static_cast<const uint32_t*>(data)[i];
    case DataType::kUINT64: return static_cast<double>(static_cast<const uint64_t*>(data)[i]);
  }
  return 0;
}

// Stores v (rounded to nearest even for the narrow float types; integers must
// be representable).
inline void SetValue(DataType type, void* data, int64_t i, double v) {
  switch (type) {
    case DataType::kFP16:
      static_cast<uint16_t*>(data)[i] = FloatToHalf(static_cast<float>(v));
      return;
    case DataType::kBF16:
      static_cast<uint16_t*>(data)[i] = FloatToBFloat16(static_cast<float>(v));
      return;
    case DataType::kFP32: static_cast<float*>(data)[i] = static_cast<float>(v); return;
    case DataType::kFP64: static_cast<double*>(data)[i] = v; return;
    case DataType::kINT32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v); return;
    case DataType::kINT64: static_cast<int64_t*>(data)[i] = static_cast<int64_t>(v); return;
    case DataType::kUINT32: static_cast<uint32_t*>(data)[i] = static_cast<uint32_t>(v); return;
    case DataType::kUINT64: static_cast<uint64_t*>(data)[i] = static_cast<uint64_t>(v); return;
  }
}

// Floats: uniform in [-1, 1], rounded to the type. Integers: random bits over
// the full range of the type, so that products and sums wrap.
inline void FillRandom(DataType type, void* data, int64_t count, std::mt19937_64& rng) {
  if (IsFloatingPoint(type)) {
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    for (int64_t i = 0; i < count; ++i) SetValue(type, data, i, dist(rng));
    return;
  }
  const int64_t size = DataTypeSize(type);
  auto* bytes = static_cast<uint8_t*>(data);
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t r = rng();
    std::memcpy(bytes + i * size, &r, static_cast<size_t>(size));
  }
}

// Bytes of a matrix `rows` x `cols` with row stride `ld`, as elements, with a
// guard region after it; zero-size matrices still get a valid pointer.
struct Matrix {
  Matrix(DataType t, int64_t r, int64_t c, int64_t stride, int64_t guard_elements = 0)
      : type(t), rows(r), cols(c), ld(stride), guard(guard_elements) {
    const int64_t bytes = (rows * ld + guard) * DataTypeSize(type);
    storage.assign(static_cast<size_t>(bytes / 8 + 2), 0);
  }
  void* data() { return storage.data(); }
  const void* data() const { return storage.data(); }
  int64_t elements() const { return rows * ld + guard; }
  uint8_t* bytes() { return reinterpret_cast<uint8_t*>(storage.data()); }
  const uint8_t* bytes() const { return reinterpret_cast<const uint8_t*>(storage.data()); }

  DataType type;
  int64_t rows, cols, ld, guard;
  std::vector<uint64_t> storage;  // 8-byte aligned
};

// Spacing of `type`'s representable numbers at magnitude |x| (the subnormal
// spacing below the normal range).
inline double Ulp(DataType type, double x) {
  int mantissa_bits = 52, min_exponent = -1074;
  switch (type) {
    case DataType::kFP16:
      mantissa_bits = 10;
      min_exponent = -24;
      break;
    case DataType::kBF16:
      mantissa_bits = 7;
      min_exponent = -133;
      break;
    case DataType::kFP32:
      mantissa_bits = 23;
      min_exponent = -149;
      break;
    default: break;
  }
  x = std::fabs(x);
  if (!(x > 0) || !std::isfinite(x)) return std::ldexp(1.0, min_exponent);
  int e;
  std::frexp(x, &e);  // x = f * 2^e, f in [0.5, 1)
  return std::ldexp(1.0, std::max(e - 1 - mantissa_bits, min_exponent));
}

// The accumulation error bound. Besides the relative term, every step of an
// FP32 (or FP64) accumulator rounds to at worst half its subnormal spacing:
// with products in the subnormal range that absolute floor is the whole
// error (found by fuzz_infer_request: three FP32 products near 2^-141 summed
// 0.65 of 2^-149 away from the exact sum, which no relative bound covers).
inline double AccumulationTolerance(DataType type, int64_t k, double abs_dot) {
  const double steps = static_cast<double>(std::max<int64_t>(k, 1));
  const double subnormal_floor = steps * (type == DataType::kFP64 ? 0x1p-1074 : 0x1p-150);
  if (IsHalfPrecision(type)) return steps * 0x1p-23 * abs_dot + subnormal_floor;  // 2 k 2^-24
  const double per_step = type == DataType::kFP64 ? 1e-13 : 1e-5;
  return per_step * std::sqrt(steps) * abs_dot + subnormal_floor;
}

// See the file comment. NaN matches NaN; infinities must match exactly.
inline bool WithinTolerance(DataType type, double got, double want, double abs_dot, int64_t k) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  const double allowed = Ulp(type, std::max(std::fabs(got), std::fabs(want))) +
                         AccumulationTolerance(type, k, abs_dot);
  return std::fabs(got - want) <= allowed;
}

// The stricter check against the exact (double) result: a kernel that
// accumulates in FP32 and rounds once to the output type is off by at most
// half an ulp of the output plus the accumulation error. One that truncates,
// or rounds twice, is not.
inline bool WithinRoundingOfExact(DataType type, double got, double exact, double abs_dot,
                                  int64_t k) {
  if (std::isnan(exact) || std::isnan(got)) return std::isnan(exact) && std::isnan(got);
  if (std::isinf(exact) || std::isinf(got)) return got == exact;
  const double allowed = Ulp(type, std::max(std::fabs(got), std::fabs(exact))) / 2 +
                         AccumulationTolerance(type, k, abs_dot);
  return std::fabs(got - exact) <= allowed;
}

inline bool SameBits(DataType type, const void* a, int64_t i, const void* b, int64_t j) {
  const int64_t size = DataTypeSize(type);
  return std::memcmp(static_cast<const uint8_t*>(a) + i * size,
                     static_cast<const uint8_t*>(b) + j * size, static_cast<size_t>(size)) == 0;
}

inline std::string ElementToString(DataType type, const void* data, int64_t i) {
  std::ostringstream out;
  switch (type) {
    case DataType::kINT32: out << static_cast<const int32_t*>(data)[i]; break;
    case DataType::kINT64: out << static_cast<const int64_t*>(data)[i]; break;
    case DataType::kUINT32: out << static_cast<const uint32_t*>(data)[i]; break;
    case DataType::kUINT64: out << static_cast<const uint64_t*>(data)[i]; break;
    case DataType::kFP16:
    case DataType::kBF16:
      out << ValueAt(type, data, i) << " (0x" << std::hex << static_cast<const uint16_t*>(data)[i]
          << ")";
      break;
    default:
      out.precision(17);
      out << ValueAt(type, data, i);
      break;
  }
  return out.str();
}

// A * B exactly (in double, from the exactly widened operands) and |A| * |B|,
// element by element, for the tolerances: `a` is m x k (row stride lda), `b`
// is k x n (row stride ldb), the results m x n dense. Floating types only.
struct ExactProduct {
  std::vector<double> value;
  std::vector<double> abs_dot;
};

inline ExactProduct ExactGemm(DataType type, int64_t m, int64_t n, int64_t k, const void* a,
                              int64_t lda, const void* b, int64_t ldb) {
  ExactProduct out;
  out.value.assign(static_cast<size_t>(m * n), 0.0);
  out.abs_dot.assign(static_cast<size_t>(m * n), 0.0);
  if (!IsFloatingPoint(type)) return out;
  std::vector<double> bd(static_cast<size_t>(k * n));
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j = 0; j < n; ++j) bd[p * n + j] = ValueAt(type, b, p * ldb + j);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const double a_ip = ValueAt(type, a, i * lda + p);
      for (int64_t j = 0; j < n; ++j) {
        out.value[i * n + j] += a_ip * bd[p * n + j];
        out.abs_dot[i * n + j] += std::fabs(a_ip * bd[p * n + j]);
      }
    }
  return out;
}

}  // namespace ops_testing
}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_GEMM_TESTING_H_
