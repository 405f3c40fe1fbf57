#include "server/ops/kernels/gemm.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/ops/kernels/gemm_testing.h"
#include "server/ops/kernels/reference_gemm.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

using ops_testing::ElementToString;
using ops_testing::ExactGemm;
using ops_testing::ExactProduct;
using ops_testing::FillRandom;
using ops_testing::Matrix;
using ops_testing::SameBits;
using ops_testing::SetValue;
using ops_testing::ValueAt;
using ops_testing::WithinRoundingOfExact;
using ops_testing::WithinTolerance;

constexpr uint8_t kSentinel = 0xff;  // NaN for every float type, -1 / max for integers
constexpr int64_t kGuard = 16;       // elements after C that no kernel may touch

struct GemmShape {
  int64_t m, n, k;
};

// 0, 1, primes and the block edges: the integer kernel's panels (K 128,
// N 256), the half kernel's row block (M 512), BLIS micro-tile sizes and KC.
const std::vector<GemmShape>& ShapeTable() {
  static const std::vector<GemmShape> shapes = {
      // zero sizes; k == 0 must write zeros
      {0, 0, 0},
      {0, 7, 3},
      {7, 0, 3},
      {0, 0, 5},
      {5, 3, 0},
      {1, 1, 0},
      {128, 129, 0},
      {257, 2, 0},
      // tiny and prime
      {1, 1, 1},
      {1, 1, 2},
      {2, 3, 1},
      {3, 2, 7},
      {1, 17, 13},
      {17, 1, 13},
      {7, 8, 13},
      {8, 7, 16},
      {13, 17, 31},
      {16, 16, 16},
      {17, 13, 64},
      {31, 64, 17},
      // integer kernel: K panel edges (127 / 128 / 129 / 256 / 257)
      {64, 65, 127},
      {65, 64, 128},
      {3, 7, 129},
      {5, 3, 127},
      {5, 3, 128},
      {5, 3, 129},
      {4, 5, 256},
      {4, 5, 257},
      {31, 1, 257},
      // integer kernel: N panel edges (255 / 256 / 257 / 513)
      {2, 255, 3},
      {3, 256, 2},
      {2, 257, 5},
      {1, 513, 1},
      // half kernel: row block edges (511 / 512 / 513 / 1025)
      {511, 3, 7},
      {512, 2, 5},
      {513, 3, 8},
      {1025, 2, 3},
      // K across BLIS's KC blocks (skx 384, haswell 256), micro-tile edges
      {33, 13, 1100},
      {65, 25, 385},
      {31, 97, 513},
      // several blocks in every direction
      {129, 257, 129},
      {257, 31, 65},
      {64, 64, 64},
      {128, 128, 128},
      {1, 1, 1000},
  };
  return shapes;
}

struct Strides {
  int64_t pad_a, pad_b, pad_c;
};

// Runs GemmRowMajor with `threads` into a sentinel-filled C and checks that
// the padding and the guard after C were not written.
Matrix RunKernel(DataType type, const GemmShape& s, const Matrix& a, const Matrix& b, int64_t ldc,
                 int threads, const std::string& where) {
  Matrix c(type, s.m, s.n, ldc, kGuard);
  std::memset(c.bytes(), kSentinel, static_cast<size_t>(c.elements() * DataTypeSize(type)));
  absl::Status status =
      GemmRowMajor(type, s.m, s.n, s.k, a.data(), a.ld, b.data(), b.ld, c.data(), ldc, threads);
  EXPECT_TRUE(status.ok()) << where << ": " << status;
  const int64_t size = DataTypeSize(type);
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = s.n; j < ldc; ++j) {
      const uint8_t* p = c.bytes() + (i * ldc + j) * size;
      for (int64_t q = 0; q < size; ++q) {
        if (p[q] != kSentinel) {
          ADD_FAILURE() << where << ": wrote into the padding of C at (" << i << "," << j << ")";
          return c;
        }
      }
    }
  }
  for (int64_t q = s.m * ldc * size; q < c.elements() * size; ++q) {
    if (c.bytes()[q] != kSentinel) {
      ADD_FAILURE() << where << ": wrote past the end of C";
      break;
    }
  }
  return c;
}

// Compares C (row stride c.ld) with a dense reference, reporting the first
// few mismatches.
void ExpectMatches(DataType type, const GemmShape& s, const Matrix& c, const Matrix& want,
                   const std::vector<double>& abs_dot, int64_t tolerance_factor,
                   const std::string& where) {
  int reported = 0;
  for (int64_t i = 0; i < s.m && reported < 5; ++i) {
    for (int64_t j = 0; j < s.n && reported < 5; ++j) {
      const int64_t ci = i * c.ld + j, wi = i * want.ld + j;
      bool ok;
      if (IsFloatingPoint(type)) {
        ok = WithinTolerance(type, ValueAt(type, c.data(), ci), ValueAt(type, want.data(), wi),
                             tolerance_factor * abs_dot[i * s.n + j], s.k);
      } else {
        ok = SameBits(type, c.data(), ci, want.data(), wi);
      }
      if (!ok) {
        ++reported;
        ADD_FAILURE() << where << " at (" << i << "," << j << "): got "
                      << ElementToString(type, c.data(), ci) << ", want "
                      << ElementToString(type, want.data(), wi);
      }
    }
  }
}

// Every element of C within half an ulp (plus FP32 accumulation error) of
// the exact product: what one rounding of an FP32 sum can give.
void ExpectRoundedOnce(DataType type, const GemmShape& s, const Matrix& c,
                       const ExactProduct& exact, const std::string& where) {
  if (!IsFloatingPoint(type)) return;
  int reported = 0;
  for (int64_t i = 0; i < s.m && reported < 5; ++i) {
    for (int64_t j = 0; j < s.n && reported < 5; ++j) {
      const double got = ValueAt(type, c.data(), i * c.ld + j);
      const double want = exact.value[i * s.n + j];
      if (!WithinRoundingOfExact(type, got, want, exact.abs_dot[i * s.n + j], s.k)) {
        ++reported;
        ADD_FAILURE() << where << " at (" << i << "," << j << "): got "
                      << ElementToString(type, c.data(), i * c.ld + j) << ", exact " << want;
      }
    }
  }
}

void CheckAgainstReference(DataType type, const GemmShape& s, const Strides& pad,
                           std::mt19937_64& rng) {
  const std::string where = absl::StrCat(DataTypeName(type), " m=", s.m, " n=", s.n, " k=", s.k,
                                         " pads=", pad.pad_a, "/", pad.pad_b, "/", pad.pad_c);
  Matrix a(type, s.m, s.k, s.k + pad.pad_a);
  Matrix b(type, s.k, s.n, s.n + pad.pad_b);
  // The padding of A and B holds random values too: a kernel that reads it
  // gives wrong answers.
  FillRandom(type, a.data(), a.elements(), rng);
  FillRandom(type, b.data(), b.elements(), rng);
  const int64_t ldc = s.n + pad.pad_c;

  Matrix want(type, s.m, s.n, s.n);
  ReferenceGemm(type, s.m, s.n, s.k, a.data(), a.ld, b.data(), b.ld, want.data(), s.n);
  const ExactProduct exact = ExactGemm(type, s.m, s.n, s.k, a.data(), a.ld, b.data(), b.ld);

  Matrix c1 = RunKernel(type, s, a, b, ldc, /*threads=*/1, where + " threads=1");
  ExpectMatches(type, s, c1, want, exact.abs_dot, 1, where + " threads=1");
  ExpectRoundedOnce(type, s, c1, exact, where + " threads=1");
  Matrix c2 = RunKernel(type, s, a, b, ldc, /*threads=*/2, where + " threads=2");
  ExpectMatches(type, s, c2, want, exact.abs_dot, 1, where + " threads=2");
  ExpectRoundedOnce(type, s, c2, exact, where + " threads=2");
  // Whatever the thread count, the same answer (each within tolerance of the
  // reference, so within twice that of each other; integers exactly).
  ExpectMatches(type, s, c2, c1, exact.abs_dot, 2, where + " threads=2 vs threads=1");
}

class GemmRowMajorTest : public ::testing::TestWithParam<DataType> {};

TEST_P(GemmRowMajorTest, MatchesReferenceOverShapeTableWithDenseStrides) {
  std::mt19937_64 rng(42 + static_cast<int>(GetParam()));
  for (const GemmShape& s : ShapeTable()) CheckAgainstReference(GetParam(), s, {0, 0, 0}, rng);
}

TEST_P(GemmRowMajorTest, MatchesReferenceWithRowStridesLongerThanRows) {
  std::mt19937_64 rng(4242 + static_cast<int>(GetParam()));
  int i = 0;
  for (const GemmShape& s : ShapeTable()) {
    ++i;
    CheckAgainstReference(GetParam(), s, {1 + i % 3, 1 + i % 5, 1 + i % 7}, rng);
  }
}

TEST_P(GemmRowMajorTest, ZeroKOverwritesGarbageWithZeros) {
  const DataType type = GetParam();
  for (int threads : {1, 2}) {
    const GemmShape s{9, 300, 0};
    Matrix a(type, s.m, 0, 0), b(type, 0, s.n, s.n);
    Matrix c = RunKernel(type, s, a, b, s.n + 3, threads, "k=0");
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        ASSERT_EQ(ValueAt(type, c.data(), i * c.ld + j), 0.0) << DataTypeName(type);
        ASSERT_FALSE(std::signbit(ValueAt(type, c.data(), i * c.ld + j)));
      }
  }
}

TEST_P(GemmRowMajorTest, ZeroMOrNWritesNothing) {
  const DataType type = GetParam();
  Matrix a(type, 4, 4, 4), b(type, 4, 4, 4);
  std::mt19937_64 rng(7);
  FillRandom(type, a.data(), a.elements(), rng);
  FillRandom(type, b.data(), b.elements(), rng);
  // C has room for one row, but m == 0 or n == 0 says nothing is to be written.
  for (GemmShape s : {GemmShape{0, 4, 4}, GemmShape{4, 0, 4}}) {
    Matrix c(type, 1, 4, 4, kGuard);
    std::memset(c.bytes(), kSentinel, static_cast<size_t>(c.elements() * DataTypeSize(type)));
    ASSERT_TRUE(
        GemmRowMajor(type, s.m, s.n, s.k, a.data(), 4, b.data(), 4, c.data(), s.n == 0 ? 0 : 4, 2)
            .ok());
    for (int64_t q = 0; q < c.elements() * DataTypeSize(type); ++q) {
      ASSERT_EQ(c.bytes()[q], kSentinel) << DataTypeName(type);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GemmRowMajorTest, ::testing::ValuesIn(kAllDataTypes),
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return std::string(DataTypeName(info.param));
                         });

// --- integer wrap-around, as numpy ----------------------------------------------

template <typename T>
T Gemm1x1(DataType type, std::vector<T> a, std::vector<T> b) {
  T c{};
  const int64_t k = static_cast<int64_t>(a.size());
  EXPECT_TRUE(GemmRowMajor(type, 1, 1, k, a.data(), k, b.data(), 1, &c, 1, 1).ok());
  return c;
}

TEST(IntGemmTest, WrapsLikeNumpy) {
  constexpr int32_t i32max = std::numeric_limits<int32_t>::max();
  constexpr int64_t i64max = std::numeric_limits<int64_t>::max();
  constexpr int64_t i64min = std::numeric_limits<int64_t>::min();
  // np.matmul(np.array([[2**31-1]], np.int32), np.array([[2]], np.int32)) == -2
  EXPECT_EQ(Gemm1x1<int32_t>(DataType::kINT32, {i32max}, {2}), -2);
  EXPECT_EQ(Gemm1x1<int32_t>(DataType::kINT32, {65536}, {65536}), 0);
  EXPECT_EQ(Gemm1x1<int32_t>(DataType::kINT32, {i32max, 1}, {1, 1}),
            std::numeric_limits<int32_t>::min());
  EXPECT_EQ(Gemm1x1<int32_t>(DataType::kINT32, {-7, 3}, {5, -4}), -47);
  EXPECT_EQ(Gemm1x1<int64_t>(DataType::kINT64, {i64max}, {i64max}), 1);
  EXPECT_EQ(Gemm1x1<int64_t>(DataType::kINT64, {i64min}, {-1}), i64min);
  EXPECT_EQ(Gemm1x1<int64_t>(DataType::kINT64, {i64max, 1}, {1, 1}), i64min);
  EXPECT_EQ(Gemm1x1<uint32_t>(DataType::kUINT32, {0xffffffffu}, {0xffffffffu}), 1u);
  EXPECT_EQ(Gemm1x1<uint32_t>(DataType::kUINT32, {0xffffffffu, 2u}, {1u, 1u}), 1u);
  EXPECT_EQ(Gemm1x1<uint64_t>(DataType::kUINT64, {~uint64_t{0}}, {~uint64_t{0}}), 1u);
  EXPECT_EQ(Gemm1x1<uint64_t>(DataType::kUINT64, {uint64_t{1} << 32}, {uint64_t{1} << 32}), 0u);
}

TEST(IntGemmTest, LongAccumulationAcrossPanelsWraps) {
  // 300 (> 2 K panels) products of 2^30 * 2^2 = 2^32 each wrap INT32 to 0,
  // and one extra 1 * 5 survives.
  std::vector<int32_t> a(301, 1 << 30), b(301, 4);
  a[300] = 1;
  b[300] = 5;
  EXPECT_EQ(Gemm1x1<int32_t>(DataType::kINT32, a, b), 5);
}

// --- NaN, Inf and subnormals pass through as IEEE arithmetic says -------------------

template <typename T>
std::vector<T> GemmDense(DataType type, int64_t m, int64_t n, int64_t k, const std::vector<T>& a,
                         const std::vector<T>& b, int threads) {
  std::vector<T> c(static_cast<size_t>(m * n));
  EXPECT_TRUE(GemmRowMajor(type, m, n, k, a.data(), k, b.data(), n, c.data(), n, threads).ok());
  return c;
}

TEST(FloatGemmTest, NaNAndInfinityPropagateAsIeeeSays) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int threads : {1, 2}) {
    // Row 0 of A holds a NaN, row 1 an infinity, row 2 is finite.
    const std::vector<float> a = {1, nan, 1, inf, 1, 2};
    const std::vector<float> b = {1, 0, 1, 1};  // [[1, 0], [1, 1]]
    const std::vector<float> c = GemmDense(DataType::kFP32, 3, 2, 2, a, b, threads);
    EXPECT_TRUE(std::isnan(c[0]));
    EXPECT_TRUE(std::isnan(c[1]));  // 1*0 + NaN*1
    EXPECT_EQ(c[2], inf);           // 1*1 + inf*1
    EXPECT_EQ(c[3], inf);           // 1*0 + inf*1
    EXPECT_EQ(c[4], 3.0f);
    EXPECT_EQ(c[5], 2.0f);
    // inf * 0 is NaN.
    const std::vector<float> d = GemmDense<float>(DataType::kFP32, 1, 1, 1, {inf}, {0.0f}, threads);
    EXPECT_TRUE(std::isnan(d[0]));
  }
}

TEST(FloatGemmTest, SubnormalsAreNotFlushed) {
  const float tiny = std::numeric_limits<float>::denorm_min() * 3;
  const double dtiny = std::numeric_limits<double>::denorm_min() * 5;
  for (int threads : {1, 2}) {
    EXPECT_EQ(GemmDense<float>(DataType::kFP32, 1, 1, 1, {tiny}, {1.0f}, threads)[0], tiny);
    EXPECT_EQ(GemmDense<double>(DataType::kFP64, 1, 1, 1, {dtiny}, {1.0}, threads)[0], dtiny);
    const uint16_t h = 0x0003;  // FP16 subnormal 3 * 2^-24
    EXPECT_EQ(GemmDense<uint16_t>(DataType::kFP16, 1, 1, 1, {h}, {FloatToHalf(1.0f)}, threads)[0],
              h);
    const uint16_t bf = 0x0005;  // BF16 subnormal
    EXPECT_EQ(
        GemmDense<uint16_t>(DataType::kBF16, 1, 1, 1, {bf}, {FloatToBFloat16(1.0f)}, threads)[0],
        bf);
  }
}

TEST(FloatGemmTest, SubnormalProductsStayWithinTheAccumulatorsAbsoluteFloor) {
  // Each product is 1.5 * 2^-149 exactly, between two FP32 subnormals: an
  // FP32 accumulator rounds at every step, so the sum can be off by half the
  // subnormal spacing per term however small |A| |B| is. The tolerance must
  // allow that (fuzz_infer_request found a case it did not) and no more.
  const float a = std::ldexp(1.5f, -75), b = std::ldexp(1.0f, -74);
  for (int k : {1, 3, 7}) {
    for (int threads : {1, 2}) {
      const std::vector<float> c = GemmDense<float>(
          DataType::kFP32, 1, 1, k, std::vector<float>(k, a), std::vector<float>(k, b), threads);
      const double exact = k * std::ldexp(1.5, -149);
      EXPECT_GT(c[0], 0.0f) << "flushed";
      EXPECT_TRUE(WithinRoundingOfExact(DataType::kFP32, c[0], exact, exact, k))
          << "k " << k << ": " << c[0] << " against " << exact;
      EXPECT_LE(std::fabs(c[0] - exact), (k + 1) * std::ldexp(0.5, -149));
    }
  }
}

TEST(HalfGemmTest, SpecialValuesAndOverflowToInfinity) {
  const uint16_t one = FloatToHalf(1.0f), h300 = FloatToHalf(300.0f);
  for (int threads : {1, 2}) {
    // 300 * 300 = 90000 > 65504: FP16 infinity; the same in BF16 is finite.
    EXPECT_EQ(GemmDense<uint16_t>(DataType::kFP16, 1, 1, 1, {h300}, {h300}, threads)[0], 0x7c00);
    const uint16_t b300 = FloatToBFloat16(300.0f);
    EXPECT_EQ(GemmDense<uint16_t>(DataType::kBF16, 1, 1, 1, {b300}, {b300}, threads)[0],
              FloatToBFloat16(90000.0f));
    // -inf * 1 and NaN * 1.
    EXPECT_EQ(GemmDense<uint16_t>(DataType::kFP16, 1, 1, 1, {0xfc00}, {one}, threads)[0], 0xfc00);
    const uint16_t nan = GemmDense<uint16_t>(DataType::kFP16, 1, 1, 1, {0x7e00}, {one}, threads)[0];
    EXPECT_TRUE((nan & 0x7c00) == 0x7c00 && (nan & 0x3ff) != 0) << std::hex << nan;
    // 65504 + 16 lands on the midpoint to 65536, which rounds (to even) to infinity.
    EXPECT_EQ(GemmDense<uint16_t>(DataType::kFP16, 1, 1, 2, {0x7bff, FloatToHalf(16.0f)},
                                  {one, one}, threads)[0],
              0x7c00);
  }
}

TEST(HalfGemmTest, RoundsOnceFromFp32Accumulation) {
  // 1 + 2^-11 + 2^-11: each partial sum would round back to 1 in FP16, but
  // FP32 accumulation holds 1 + 2^-10 exactly and rounds it once.
  const uint16_t one = FloatToHalf(1.0f);
  const uint16_t e11 = FloatToHalf(std::ldexp(1.0f, -11));
  for (int threads : {1, 2}) {
    EXPECT_EQ(
        GemmDense<uint16_t>(DataType::kFP16, 1, 1, 3, {one, e11, e11}, {one, one, one}, threads)[0],
        0x3c01);
    const uint16_t bone = FloatToBFloat16(1.0f), b8 = FloatToBFloat16(std::ldexp(1.0f, -8));
    EXPECT_EQ(GemmDense<uint16_t>(DataType::kBF16, 1, 1, 3, {bone, b8, b8}, {bone, bone, bone},
                                  threads)[0],
              0x3f81);
  }
}

// --- half conversion blocks -------------------------------------------------------

TEST(HalfBlockTest, BlockConversionsMatchScalarOnesForEveryPattern) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> widened(65536);
  std::vector<uint16_t> narrowed(65536);
  for (DataType type : {DataType::kFP16, DataType::kBF16}) {
    HalfToFloatBlock(type, all.data(), widened.data(), 65536);
    FloatToHalfBlock(type, widened.data(), narrowed.data(), 65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      const float want = type == DataType::kFP16 ? HalfToFloat(all[i]) : BFloat16ToFloat(all[i]);
      ASSERT_EQ(FloatBits(widened[i]), FloatBits(want)) << DataTypeName(type) << " " << i;
      const uint16_t back =
          type == DataType::kFP16 ? FloatToHalf(widened[i]) : FloatToBFloat16(widened[i]);
      ASSERT_EQ(narrowed[i], back) << DataTypeName(type) << " " << i;
    }
  }
}

// --- the reference itself ----------------------------------------------------------

TEST(ReferenceGemmTest, ComputesKnownProducts) {
  const std::vector<double> a = {1, 2, 3, 4, 5, 6};     // 2x3
  const std::vector<double> b = {7, 8, 9, 10, 11, 12};  // 3x2
  std::vector<double> c(4);
  ReferenceGemm(DataType::kFP64, 2, 2, 3, a.data(), 3, b.data(), 2, c.data(), 2);
  EXPECT_EQ(c, (std::vector<double>{58, 64, 139, 154}));
  std::vector<int32_t> ai = {1, 2, 3, 4, 5, 6}, bi = {7, 8, 9, 10, 11, 12}, ci(4);
  ReferenceGemm(DataType::kINT32, 2, 2, 3, ai.data(), 3, bi.data(), 2, ci.data(), 2);
  EXPECT_EQ(ci, (std::vector<int32_t>{58, 64, 139, 154}));
}

TEST(ReferenceGemmTest, HalfTypesRoundOnceFromDouble) {
  // reference_gemm.h: "accumulates floating types in double ... and rounds
  // once to the output type". The exact sum 1 + 2^-11 + 2^-40 lies just above
  // the FP16 midpoint between 1 and 1 + 2^-10, so it rounds up to 0x3c01; a
  // detour through FP32 drops the 2^-40 and lands on the tie, which rounds
  // down to 0x3c00.
  const uint16_t a[] = {FloatToHalf(1.0f), FloatToHalf(std::ldexp(1.0f, -11)),
                        FloatToHalf(std::ldexp(1.0f, -20))};
  const uint16_t b[] = {FloatToHalf(1.0f), FloatToHalf(1.0f), FloatToHalf(std::ldexp(1.0f, -20))};
  uint16_t c = 0;
  ReferenceGemm(DataType::kFP16, 1, 1, 3, a, 3, b, 1, &c, 1);
  EXPECT_EQ(c, 0x3c01) << "FP16 reference rounded twice (double -> float -> half)";
  // The same for BF16: 1 + 2^-8 + 2^-40 rounds up to 0x3f81.
  const uint16_t ab[] = {FloatToBFloat16(1.0f), FloatToBFloat16(std::ldexp(1.0f, -8)),
                         FloatToBFloat16(std::ldexp(1.0f, -20))};
  const uint16_t bb[] = {FloatToBFloat16(1.0f), FloatToBFloat16(1.0f),
                         FloatToBFloat16(std::ldexp(1.0f, -20))};
  ReferenceGemm(DataType::kBF16, 1, 1, 3, ab, 3, bb, 1, &c, 1);
  EXPECT_EQ(c, 0x3f81) << "BF16 reference rounded twice (double -> float -> bfloat16)";
}

}  // namespace
}  // namespace gemmserve
