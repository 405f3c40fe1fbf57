// The plain reference GEMM every fast kernel is tested against: a triple loop
// that accumulates floating types in double (half types widened exactly first)
// and rounds once to the output type, and integers with wrap-around. Slow on
// purpose; used by tests, fuzzers and the naive benchmark baseline only.
//
//   ReferenceGemm(DataType::kBF16, m, n, k, a, k, b, n, c, n);
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_REFERENCE_GEMM_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_REFERENCE_GEMM_H_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "server/tensor/datatype.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace reference_internal {

// Rounds to binary32 with round-to-odd. A second rounding of that float to a
// type of at most 22 significand bits (FP16, BF16) then equals one correct
// rounding of the double: the reference rounds once, as its contract says.
inline float RoundToOddFloat(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) != d && std::isfinite(f)) {
    uint32_t bits = FloatBits(f);
    if ((bits & 1u) == 0) bits += std::fabs(static_cast<double>(f)) > std::fabs(d) ? -1 : 1;
    f = BitsToFloat(bits);
  }
  return f;
}

template <typename T>
void IntegerGemm(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
                 T* c, int64_t ldc) {
  using U = std::make_unsigned_t<T>;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      U acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc += static_cast<U>(a[i * lda + p]) * static_cast<U>(b[p * ldb + j]);
      c[i * ldc + j] = static_cast<T>(acc);
    }
}

template <typename T, typename Load, typename Store>
void FloatGemm(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
               T* c, int64_t ldc, Load load, Store store) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc +=
            static_cast<double>(load(a[i * lda + p])) * static_cast<double>(load(b[p * ldb + j]));
      c[i * ldc + j] = store(acc);
    }
}

}  // namespace reference_internal

inline void ReferenceGemm(DataType type, int64_t m, int64_t n, int64_t k, const void* a,
                          int64_t lda, const void* b, int64_t ldb, void* c, int64_t ldc) {
  using namespace reference_internal;
  auto same = [](auto v) { return v; };
  switch (type) {
    case DataType::kFP32:
      return FloatGemm(m, n, k, static_cast<const float*>(a), lda, static_cast<const float*>(b),
                       ldb, static_cast<float*>(c), ldc, same,
                       [](double v) { return static_cast<float>(v); });
    case DataType::kFP64:
      return FloatGemm(m, n, k, static_cast<const double*>(a), lda, static_cast<const double*>(b),
                       ldb, static_cast<double*>(c), ldc, same, same);
    case DataType::kFP16:
      return FloatGemm(m, n, k, static_cast<const uint16_t*>(a), lda,
                       static_cast<const uint16_t*>(b), ldb, static_cast<uint16_t*>(c), ldc,
                       HalfToFloat, [](double v) { return FloatToHalf(RoundToOddFloat(v)); });
    case DataType::kBF16:
      return FloatGemm(m, n, k, static_cast<const uint16_t*>(a), lda,
                       static_cast<const uint16_t*>(b), ldb, static_cast<uint16_t*>(c), ldc,
                       BFloat16ToFloat,
                       [](double v) { return FloatToBFloat16(RoundToOddFloat(v)); });
    case DataType::kINT32:
      return IntegerGemm(m, n, k, static_cast<const int32_t*>(a), lda,
                         static_cast<const int32_t*>(b), ldb, static_cast<int32_t*>(c), ldc);
    case DataType::kINT64:
      return IntegerGemm(m, n, k, static_cast<const int64_t*>(a), lda,
                         static_cast<const int64_t*>(b), ldb, static_cast<int64_t*>(c), ldc);
    case DataType::kUINT32:
      return IntegerGemm(m, n, k, static_cast<const uint32_t*>(a), lda,
                         static_cast<const uint32_t*>(b), ldb, static_cast<uint32_t*>(c), ldc);
    case DataType::kUINT64:
      return IntegerGemm(m, n, k, static_cast<const uint64_t*>(a), lda,
                         static_cast<const uint64_t*>(b), ldb, static_cast<uint64_t*>(c), ldc);
  }
}

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_REFERENCE_GEMM_H_
