// IEEE binary16 (FP16) and bfloat16 (BF16) conversions to and from binary32.
//
// Both half types are stored as their uint16_t bit patterns. Narrowing rounds
// to nearest, ties to even, like numpy and ml_dtypes; NaN stays NaN (quieted),
// infinities and signed zeros are kept, FP16 overflow becomes infinity and
// FP16 subnormals are exact. Portable scalar code: the kernels convert whole
// blocks with these, so they are inline.
//
//   uint16_t h = FloatToHalf(1.5f);     // 0x3e00
//   float f = BFloat16ToFloat(0x3fc0);  // 1.5f
#ifndef GEMMSERVE_SERVER_TENSOR_HALF_H_
#define GEMMSERVE_SERVER_TENSOR_HALF_H_

#include <cstdint>
#include <cstring>

namespace gemmserve {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float BFloat16ToFloat(uint16_t b) { return BitsToFloat(uint32_t{b} << 16); }

inline uint16_t FloatToBFloat16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  }
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) {
    // Infinity, or NaN made quiet as vcvtph2ps does, so scalar and vector
    // conversions agree bit for bit.
    const uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return BitsToFloat(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in binary32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return BitsToFloat(sign | FloatBits(magnitude));
  }
  return BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) {  // NaN: keep the top payload bits, force quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  }
  if (a >= 0x47800000u) return sign | 0x7c00u;  // >= 65536, or infinity
  if (a >= 0x38800000u) {
    // Normal in FP16: round the mantissa at bit 13 (ties to even), rebias the
    // exponent by 127 - 15; a carry out of 65504 correctly yields infinity.
    const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u;
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25 rounds to zero (tie goes even)
  // FP16 subnormal: units of 2^-24.
  const uint32_t exponent = a >> 23;  // 102..112
  const uint32_t mantissa = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exponent;  // 14..24
  uint32_t q = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_TENSOR_HALF_H_
