#include "server/tensor/half.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace gemmserve {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

bool IsHalfNaN(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool IsBFloat16NaN(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// Decodes FP16 bits from the IEEE definition, independently of half.h.
double DecodeHalf(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 0x1f) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// Nearest FP16 by brute force over every non-negative finite pattern
// (0x0000..0x7bff, increasing in value), with +infinity standing for the next
// step up, 2^16 (an even pattern, 0x7c00), as IEEE rounding with an unbounded
// exponent prescribes. Ties go to the even pattern.
uint16_t BruteForceNearestHalf(float f) {
  const double x = std::fabs(static_cast<double>(f));
  uint16_t best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (uint32_t h = 0; h <= 0x7c00u; ++h) {
    const double v = h == 0x7c00u ? 65536.0 : DecodeHalf(static_cast<uint16_t>(h));
    const double d = std::fabs(v - x);
    if (d < best_distance || (d == best_distance && (h & 1u) == 0)) {
      best_distance = d;
      best = static_cast<uint16_t>(h);
    }
  }
  if (x > 65536.0) best = 0x7c00u;
  return static_cast<uint16_t>(best | (std::signbit(f) ? 0x8000u : 0u));
}

// The same answer by binary search over a table of those values.
class NearestHalfTable {
 public:
  NearestHalfTable() {
    for (uint32_t h = 0; h < 0x7c00u; ++h) values_.push_back(DecodeHalf(static_cast<uint16_t>(h)));
    values_.push_back(65536.0);  // 0x7c00, infinity
  }
  uint16_t Nearest(float f) const {
    const double x = std::fabs(static_cast<double>(f));
    uint16_t h;
    if (x >= 65536.0) {
      h = 0x7c00u;
    } else {
      const auto hi = std::lower_bound(values_.begin(), values_.end(), x);
      const uint32_t up = static_cast<uint32_t>(hi - values_.begin());
      if (values_[up] == x || up == 0) {
        h = static_cast<uint16_t>(up);
      } else {
        const double d_up = values_[up] - x;
        const double d_down = x - values_[up - 1];
        if (d_up < d_down || (d_up == d_down && (up & 1u) == 0)) {
          h = static_cast<uint16_t>(up);
        } else {
          h = static_cast<uint16_t>(up - 1);
        }
      }
    }
    return static_cast<uint16_t>(h | (std::signbit(f) ? 0x8000u : 0u));
  }

 private:
  std::vector<double> values_;
};

// Nearest BF16, independently: the two bfloat16 neighbours of f are its bits
// truncated and that plus one unit; compare distances in double.
uint16_t NearestBFloat16(float f) {
  const uint32_t bits = FloatBits(f);
  const uint32_t down = bits & 0xffff0000u;
  const uint32_t up = down + 0x10000u;  // next magnitude (may reach infinity)
  const double x = std::fabs(static_cast<double>(f));
  const double v_down = std::fabs(static_cast<double>(BitsToFloat(down)));
  // For the bits past FLT_MAX the next value up is 2^128, which float cannot hold.
  const double v_up = (up & 0x7fffffffu) == 0x7f800000u
                          ? std::ldexp(1.0, 128)
                          : std::fabs(static_cast<double>(BitsToFloat(up)));
  const double d_down = x - v_down, d_up = v_up - x;
  const bool take_up = d_up < d_down || (d_up == d_down && ((down >> 16) & 1u));
  return static_cast<uint16_t>((take_up ? up : down) >> 16);
}

// --- FP16 ------------------------------------------------------------------

TEST(HalfTest, EveryHalfPatternRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float f = HalfToFloat(h);
    if (IsHalfNaN(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << bits;
      const uint16_t back = FloatToHalf(f);
      ASSERT_TRUE(IsHalfNaN(back)) << std::hex << bits << " -> " << back;
      EXPECT_EQ(back & 0x8000u, h & 0x8000u) << "NaN sign lost for " << std::hex << bits;
      EXPECT_NE(back & 0x0200u, 0u) << "NaN not quiet for " << std::hex << bits;
    } else {
      ASSERT_EQ(FloatToHalf(f), h) << std::hex << bits;
    }
  }
}

TEST(HalfTest, HalfToFloatMatchesTheIeeeDefinition) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const double expected = DecodeHalf(h);
    const float f = HalfToFloat(h);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << bits;
    } else {
      ASSERT_EQ(static_cast<double>(f), expected) << std::hex << bits;
      ASSERT_EQ(std::signbit(f), (bits & 0x8000u) != 0) << std::hex << bits;
    }
  }
}

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(FloatToHalf(1.5f), 0x3e00);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(0.1f), 0x2e66);  // numpy: np.float16(0.1).view(np.uint16)
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(HalfToFloat(0x3e00), 1.5f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));
}

TEST(HalfTest, SignedZeroIsKept) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
  EXPECT_EQ(HalfToFloat(0x8000), 0.0f);
  // Values that round to zero keep their sign.
  EXPECT_EQ(FloatToHalf(-1e-10f), 0x8000);
  EXPECT_EQ(FloatToHalf(1e-10f), 0x0000);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::denorm_min()), 0x8000);
}

TEST(HalfTest, InfinityIsKeptAndOverflowBecomesInfinity) {
  EXPECT_EQ(FloatToHalf(kInf), 0x7c00);
  EXPECT_EQ(FloatToHalf(-kInf), 0xfc00);
  EXPECT_EQ(HalfToFloat(0x7c00), kInf);
  EXPECT_EQ(HalfToFloat(0xfc00), -kInf);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);    // largest finite stays
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7bff);  // just under the midpoint
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);    // midpoint: ties to even = inf
  EXPECT_EQ(FloatToHalf(-65520.0f), 0xfc00);
  EXPECT_EQ(FloatToHalf(65536.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(1e10f), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::max()), 0xfc00);
}

TEST(HalfTest, NaNStaysNaN) {
  const float quiet = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(IsHalfNaN(FloatToHalf(quiet)));
  EXPECT_TRUE(IsHalfNaN(FloatToHalf(-quiet)));
  EXPECT_EQ(FloatToHalf(-quiet) & 0x8000u, 0x8000u);
  // Payloads that live only in the low float bits would truncate to the
  // infinity pattern if the conversion merely shifted.
  for (uint32_t bits : {0x7f800001u, 0x7f800fffu, 0x7f801000u, 0xff800001u, 0x7fffffffu,
                        0x7fc00000u, 0xffc00001u}) {
    const uint16_t h = FloatToHalf(BitsToFloat(bits));
    EXPECT_TRUE(IsHalfNaN(h)) << std::hex << bits << " -> " << h;
    EXPECT_EQ((h & 0x8000u) != 0, (bits & 0x80000000u) != 0) << std::hex << bits;
  }
}

TEST(HalfTest, RoundsToNearestTiesToEven) {
  const float one = 1.0f;
  const float ulp = std::ldexp(1.0f, -10);                              // FP16 spacing in [1, 2)
  EXPECT_EQ(FloatToHalf(one + ulp / 2), 0x3c00);                        // tie, 0x3c00 even: down
  EXPECT_EQ(FloatToHalf(one + 3 * ulp / 2), 0x3c02);                    // tie, 0x3c01 odd: up
  EXPECT_EQ(FloatToHalf(one + 5 * ulp / 2), 0x3c02);                    // tie, 0x3c02 even: down
  EXPECT_EQ(FloatToHalf(std::nextafter(one + ulp / 2, 2.0f)), 0x3c01);  // above the tie
  EXPECT_EQ(FloatToHalf(std::nextafter(one + 3 * ulp / 2, 0.0f)), 0x3c01);  // below
  EXPECT_EQ(FloatToHalf(-(one + ulp / 2)), 0xbc00);
  EXPECT_EQ(FloatToHalf(-(one + 3 * ulp / 2)), 0xbc02);
  EXPECT_EQ(FloatToHalf(2049.0f), 0x6800);  // 2048 | 2050: tie to 2048
  EXPECT_EQ(FloatToHalf(2051.0f), 0x6802);  // 2050 | 2052: tie to 2052
  EXPECT_EQ(FloatToHalf(2050.0f), 0x6801);
  // A carry out of the mantissa bumps the exponent: 2 - 2^-12 rounds to 2.
  EXPECT_EQ(FloatToHalf(2.0f - std::ldexp(1.0f, -12)), 0x4000);
}

TEST(HalfTest, SubnormalsAreExactAndRoundTiesToEven) {
  const float tiny = std::ldexp(1.0f, -24);  // smallest FP16 subnormal
  EXPECT_EQ(FloatToHalf(tiny), 0x0001);
  EXPECT_EQ(FloatToHalf(-tiny), 0x8001);
  EXPECT_EQ(FloatToHalf(1023 * tiny), 0x03ff);  // largest subnormal
  EXPECT_EQ(FloatToHalf(1024 * tiny), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToHalf(tiny / 2), 0x0000);     // tie between 0 and 1: even 0
  EXPECT_EQ(FloatToHalf(std::nextafter(tiny / 2, 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::nextafter(tiny / 2, 0.0f)), 0x0000);
  EXPECT_EQ(FloatToHalf(1.5f * tiny), 0x0002);     // tie between 1 and 2: even 2
  EXPECT_EQ(FloatToHalf(2.5f * tiny), 0x0002);     // tie between 2 and 3: even 2
  EXPECT_EQ(FloatToHalf(1023.5f * tiny), 0x0400);  // tie between 0x3ff and 0x400: even
  EXPECT_EQ(FloatToHalf(1022.5f * tiny), 0x03fe);
  for (uint32_t m = 1; m < 1024; ++m) {
    EXPECT_EQ(HalfToFloat(static_cast<uint16_t>(m)), static_cast<float>(m) * tiny);
  }
}

TEST(HalfTest, FloatToHalfMatchesBruteForceNearest) {
  // The brute-force search is slow; it checks the fast table on a sample
  // that includes the edges, and the table then checks many random floats.
  NearestHalfTable table;
  std::vector<float> edges = {0.0f,     -0.0f,          1.0f,           65504.0f,
                              65519.0f, 65520.0f,       65535.0f,       65536.0f,
                              1e-8f,    2.9802322e-08f, 5.9604645e-08f, 6.1035156e-05f,
                              6.1e-05f, 3.14159265f,    -2.71828f,      1e30f};
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> bits_in_range(0x33000000u, 0x47800000u);
  for (int i = 0; i < 300; ++i) {
    float f = BitsToFloat(bits_in_range(rng));
    edges.push_back((i & 1) ? -f : f);
  }
  for (float f : edges) {
    EXPECT_EQ(table.Nearest(f), BruteForceNearestHalf(f)) << f;
    EXPECT_EQ(FloatToHalf(f), BruteForceNearestHalf(f)) << std::hexfloat << f;
  }

  // Random bit patterns concentrated where FP16 is interesting (|x| in
  // [2^-26, 2^17)), plus fully random finite floats.
  std::uniform_int_distribution<uint32_t> interesting(0x32800000u, 0x48000000u);
  std::uniform_int_distribution<uint32_t> any_bits;
  int mismatches = 0;
  for (int i = 0; i < 1000000 && mismatches < 10; ++i) {
    uint32_t bits = (i % 4 == 3) ? any_bits(rng) : interesting(rng) | ((i & 1u) << 31);
    const float f = BitsToFloat(bits);
    if (std::isnan(f)) continue;
    const uint16_t expected = table.Nearest(f);
    const uint16_t got = FloatToHalf(f);
    if (got != expected) {
      ++mismatches;
      ADD_FAILURE() << "FloatToHalf(" << std::hexfloat << f << ") = 0x" << std::hex << got
                    << ", nearest is 0x" << expected;
    }
  }
}

TEST(HalfTest, HalfToFloatIsMonotonicOverPositivePatterns) {
  for (uint32_t h = 1; h <= 0x7c00u; ++h) {
    ASSERT_LT(HalfToFloat(static_cast<uint16_t>(h - 1)), HalfToFloat(static_cast<uint16_t>(h)))
        << std::hex << h;
  }
}

// --- BF16 ------------------------------------------------------------------

TEST(BFloat16Test, EveryPatternRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const uint16_t b = static_cast<uint16_t>(bits);
    const float f = BFloat16ToFloat(b);
    ASSERT_EQ(FloatBits(f), bits << 16);  // widening is exact: the top half of a float
    if (IsBFloat16NaN(b)) {
      ASSERT_TRUE(std::isnan(f));
      const uint16_t back = FloatToBFloat16(f);
      ASSERT_TRUE(IsBFloat16NaN(back)) << std::hex << bits << " -> " << back;
      EXPECT_EQ(back & 0x8000u, b & 0x8000u) << std::hex << bits;
    } else {
      ASSERT_EQ(FloatToBFloat16(f), b) << std::hex << bits;
    }
  }
}

TEST(BFloat16Test, KnownValues) {
  EXPECT_EQ(BFloat16ToFloat(0x3fc0), 1.5f);
  EXPECT_EQ(FloatToBFloat16(1.5f), 0x3fc0);
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(0.1f), 0x3dcd);  // ml_dtypes: bfloat16(0.1)
  EXPECT_EQ(FloatToBFloat16(-3.0f), 0xc040);
}

TEST(BFloat16Test, RoundsToNearestTiesToEven) {
  const float ulp = std::ldexp(1.0f, -7);  // BF16 spacing in [1, 2)
  EXPECT_EQ(FloatToBFloat16(1.0f + ulp / 2), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * ulp / 2), 0x3f82);
  EXPECT_EQ(FloatToBFloat16(std::nextafter(1.0f + ulp / 2, 2.0f)), 0x3f81);
  EXPECT_EQ(FloatToBFloat16(std::nextafter(1.0f + 3 * ulp / 2, 0.0f)), 0x3f81);
  EXPECT_EQ(FloatToBFloat16(-(1.0f + ulp / 2)), 0xbf80);
  EXPECT_EQ(FloatToBFloat16(257.0f), 0x4380);                       // 256 | 258: tie to 256
  EXPECT_EQ(FloatToBFloat16(259.0f), 0x4382);                       // 258 | 260: tie to 260
  EXPECT_EQ(FloatToBFloat16(2.0f - std::ldexp(1.0f, -9)), 0x4000);  // carry into exponent
}

TEST(BFloat16Test, InfinitySignedZeroAndOverflow) {
  EXPECT_EQ(FloatToBFloat16(kInf), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(-kInf), 0xff80);
  EXPECT_EQ(FloatToBFloat16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBFloat16(-0.0f), 0x8000);
  // FLT_MAX is past the midpoint between the largest BF16 and 2^128.
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(FloatToBFloat16(BitsToFloat(0x7f7f7fffu)), 0x7f7f);  // just below the midpoint
  EXPECT_EQ(FloatToBFloat16(BitsToFloat(0x7f7f8000u)), 0x7f80);  // midpoint, odd: up to inf
}

TEST(BFloat16Test, SubnormalsRoundLikeNormals) {
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::denorm_min()),
            0x0000);                                             // below half a unit
  EXPECT_EQ(FloatToBFloat16(BitsToFloat(0x00008000u)), 0x0000);  // tie, even down
  EXPECT_EQ(FloatToBFloat16(BitsToFloat(0x00018000u)), 0x0002);  // tie, odd up
  EXPECT_EQ(FloatToBFloat16(BitsToFloat(0x00008001u)), 0x0001);
  EXPECT_EQ(FloatToBFloat16(BitsToFloat(0x007fffffu)), 0x0080);  // rounds up to min normal
  EXPECT_EQ(BFloat16ToFloat(0x0001), BitsToFloat(0x00010000u));
}

TEST(BFloat16Test, NaNStaysNaN) {
  for (uint32_t bits : {0x7f800001u, 0x7f80ffffu, 0xff800001u, 0x7fc00000u, 0x7fffffffu,
                        0xffffffffu, 0x7f81ffffu}) {
    const uint16_t b = FloatToBFloat16(BitsToFloat(bits));
    EXPECT_TRUE(IsBFloat16NaN(b)) << std::hex << bits << " -> " << b;
    EXPECT_EQ((b & 0x8000u) != 0, (bits & 0x80000000u) != 0) << std::hex << bits;
  }
}

TEST(BFloat16Test, FloatToBFloat16MatchesIndependentNearest) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<uint32_t> any_bits;
  int mismatches = 0;
  for (int i = 0; i < 1000000 && mismatches < 10; ++i) {
    uint32_t bits = any_bits(rng);
    // Every fourth sample sits on an exact tie, where rounding errors hide.
    if (i % 4 == 0) bits = (bits & 0xffff0000u) | 0x8000u;
    const float f = BitsToFloat(bits);
    if (std::isnan(f) || std::isinf(f)) continue;
    const uint16_t expected = NearestBFloat16(f);
    const uint16_t got = FloatToBFloat16(f);
    if (got != expected) {
      ++mismatches;
      ADD_FAILURE() << "FloatToBFloat16(" << std::hexfloat << f << ") = 0x" << std::hex << got
                    << ", nearest is 0x" << expected;
    }
  }
}

}  // namespace
}  // namespace gemmserve
