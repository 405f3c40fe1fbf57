#include "server/ops/kernels/kernel_set.h"
#include "server//ops/kernels/streaming_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "server/ops/kernels/kernel_builds_testing.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

struct Shape3 {
  int64_t rows, k, n;
};

// Rows at the kernel's limit, K remainders of the four-row unroll, N around
// the 1024-column block.
const Shape3 kShapes[] = {{1, 1, 1},
                          {1, 4, 16},
                          {3, 5, 17},
                          {8, 131, 33},
                          {2, 64, 1023},
                          {1, 9, 1024},
                          {4, 12, 1025},
                          {8, 67, 2049},
                          // the 1-4 row kernel: K steps of 8 with prefetch 16 ahead, tails
                          {1, 16, 1},
                          {2, 17, 33},
                          {3, 40, 15},
                          {4, 8, 47},
                          {1, 100, 300},
                          {3, 7, 1},
                          {2, 24, 16},
                          {5, 48, 31},
                          {12, 40, 33},
                          {16, 17, 100},
                          {9, 64, 16}};

// Accumulates over [k_begin, k_end) in two calls, onto C that starts nonzero,
// and compares with a double reference of the same sum.
using Build = KernelBuild;
const auto BuildName = KernelBuildName;
const auto Builds = KernelBuilds;

template <typename Widen>
void CheckFloat(DataType b_type, const Shape3& s, Widen widen, Build build) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(s.rows * s.k), c(s.rows * s.n), c0;
  for (float& v : a) v = dist(rng);
  for (float& v : c) v = dist(rng);
  c0 = c;
  std::vector<uint16_t> b16(s.k * s.n);
  std::vector<float> b32(s.k * s.n);
  for (int64_t i = 0; i < s.k * s.n; ++i) {
    const float v = dist(rng);
    b16[i] = b_type == DataType::kBF16 ? FloatToBFloat16(v) : FloatToHalf(v);
    b32[i] = b_type == DataType::kFP32 ? v : widen(b16[i]);
  }
  const void* b = b_type == DataType::kFP32 ? static_cast<const void*>(b32.data()) : b16.data();
  const int64_t mid = s.k / 2;
  for (auto [k0, k1] : {std::pair<int64_t, int64_t>{0, mid}, {mid, s.k}}) {
    if (build == Build::kAvx512) {
      streaming_internal::AccumulateAvx512(b_type, s.rows, k0, k1, s.n, a.data(), s.k, b, s.n,
                                           c.data(), s.n);
    } else if (build == Build::kAvx2) {
      streaming_internal::AccumulateAvx2(b_type, s.rows, k0, k1, s.n, a.data(), s.k, b, s.n,
                                         c.data(), s.n);
    } else {
      streaming_internal::AccumulateGeneric(b_type, s.rows, k0, k1, s.n, a.data(), s.k, b, s.n,
                                            c.data(), s.n);
    }
  }
  for (int64_t i = 0; i < s.rows; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double want = c0[i * s.n + j], bound = std::fabs(want);
      for (int64_t p = 0; p < s.k; ++p) {
        want += double{a[i * s.k + p]} * b32[p * s.n + j];
        bound += std::fabs(double{a[i * s.k + p]} * b32[p * s.n + j]);
      }
      ASSERT_NEAR(c[i * s.n + j], want, 4 * (s.k + 1) * 0x1p-24 * bound)
          << DataTypeName(b_type) << " rows=" << s.rows << " k=" << s.k << " n=" << s.n << " at "
          << i << "," << j << BuildName(build);
    }
  }
}

TEST(StreamingGemmTest, EveryBuildMatchesTheReferenceForEveryWeightType) {
  for (Build build : Builds()) {
    for (const Shape3& s : kShapes) {
      CheckFloat(
          DataType::kFP32, s, [](uint16_t) { return 0.0f; }, build);
      CheckFloat(DataType::kBF16, s, BFloat16ToFloat, build);
      CheckFloat(DataType::kFP16, s, HalfToFloat, build);
    }
  }
}

TEST(StreamingGemmTest, DoublePrecisionMatchesTheReference) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (const Shape3& s : kShapes) {
    std::vector<double> a(s.rows * s.k), b(s.k * s.n), c(s.rows * s.n, 0.0), c2(c), c3(c);
    for (double& v : a) v = dist(rng);
    for (double& v : b) v = dist(rng);
    StreamingGemmAccumulate(s.rows, 0, s.k, s.n, a.data(), s.k, b.data(), s.n, c.data(), s.n);
    streaming_internal::AccumulateGeneric(s.rows, 0, s.k, s.n, a.data(), s.k, b.data(), s.n,
                                          c2.data(), s.n);
    if (Kernels().avx2) {
      streaming_internal::AccumulateAvx2(s.rows, 0, s.k, s.n, a.data(), s.k, b.data(), s.n,
                                         c3.data(), s.n);
    } else {
      c3 = c2;
    }
    for (int64_t i = 0; i < s.rows; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        double want = 0, bound = 0;
        for (int64_t p = 0; p < s.k; ++p) {
          want += a[i * s.k + p] * b[p * s.n + j];
          bound += std::fabs(a[i * s.k + p] * b[p * s.n + j]);
        }
        ASSERT_NEAR(c[i * s.n + j], want, 4 * s.k * 0x1p-53 * bound);
        ASSERT_NEAR(c2[i * s.n + j], want, 4 * s.k * 0x1p-53 * bound);
        ASSERT_NEAR(c3[i * s.n + j], want, 4 * s.k * 0x1p-53 * bound);
      }
  }
}

TEST(StreamingGemmTest, WidenToFloatIsExactForEveryPattern) {
  std::vector<uint16_t> bits(65536);
  for (int i = 0; i < 65536; ++i) bits[i] = static_cast<uint16_t>(i);
  std::vector<float> out(65536);
  for (DataType t : {DataType::kFP16, DataType::kBF16}) {
    for (int via = 0; via < 2; ++via) {  // the dispatcher, then the AVX2 build
      if (via == 0) {
        WidenToFloat(t, bits.data(), out.data(), 65536);
      } else if (Kernels().avx2) {
        streaming_internal::WidenAvx2(t, bits.data(), out.data(), 65536);
      } else {
        continue;
      }
      for (int i = 0; i < 65536; ++i) {
        const float want = t == DataType::kBF16 ? BFloat16ToFloat(bits[i]) : HalfToFloat(bits[i]);
        ASSERT_EQ(FloatBits(out[i]), FloatBits(want))
            << DataTypeName(t) << " pattern " << i << (via ? " avx2" : "");
      }
    }
  }
}

}  // namespace
}  // namespace gemmserve
