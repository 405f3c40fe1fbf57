#include "server/ops/kernels/panel_gemm.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/ops/kernels/compute_environment.h"
#include "server/ops/kernels/gemm_testing.h"

namespace gemmserve {
namespace {

using ops_testing::ExactGemm;
using ops_testing::FillRandom;
using ops_testing::WithinTolerance;

// 64-byte aligned storage of T, as the packed operands want.
template <typename T>
struct Aligned {
  explicit Aligned(int64_t n) : storage(static_cast<size_t>(n) + 16) {
    auto at = reinterpret_cast<uintptr_t>(storage.data());
    data = reinterpret_cast<T*>((at + 63) / 64 * 64);
  }
  std::vector<T> storage;
  T* data;
};

struct Case {
  int64_t m, k, n;
  bool gathered;
};

// Zeros, ones, primes, and the edges of the weight and token panels and of
// the K block of the micro-kernel BLIS runs here.
std::vector<Case> Cases(const PanelGeometry& g) {
  const int64_t w = g.weight_lanes, t = g.token_lanes, kc = g.kc;
  std::vector<Case> cases = {
      {1, 1, 1, false},      {1, 0, 5, false},          {0, 3, 5, false},
      {3, 5, 0, false},      {7, 13, 29, true},         {t, 31, w, false},
      {t - 1, 17, w + 1, true}, {t + 1, 64, w - 1, true}, {2 * t + 1, kc, 3 * w, true},
      {5, kc + 1, 2 * w + 3, true}, {11, kc - 1, 37, false}, {64, 2 * kc + 7, 4 * w + 1, true},
      {97, 257, 131, true},  {128, 512, 256, false},
  };
  return cases;
}

template <typename T>
void CheckCase(DataType type, const Case& c, std::mt19937_64& rng) {
  const PanelGeometry& g = PanelGeometryFor(type);
  const int64_t source_rows = c.gathered ? c.m + 3 : c.m;
  const int64_t ldx = c.k + 3, ldc = c.n + 5;
  std::vector<T> x(static_cast<size_t>(source_rows * ldx + 1));
  std::vector<T> w(static_cast<size_t>(c.k * c.n + 1));
  FillRandom(type, x.data(), static_cast<int64_t>(x.size()), rng);
  FillRandom(type, w.data(), static_cast<int64_t>(w.size()), rng);
  std::vector<int64_t> rows(static_cast<size_t>(c.m));
  for (int64_t i = 0; i < c.m; ++i) {  // repeats and out-of-order rows
    rows[i] = c.gathered ? static_cast<int64_t>(rng() % source_rows) : i;
  }
  Aligned<T> packed(PackedWeightElements(g, c.k, c.n));
  PackWeightPanels<T>(g, w.data(), c.n, c.k, c.n, packed.data);
  Aligned<T> scratch(PanelGemmScratchElements(g, c.m, c.k));
  const T sentinel = static_cast<T>(-7.25);
  std::vector<T> out(static_cast<size_t>(c.m * ldc + 1), sentinel);

  // All panels at once, then two halves as a scheduler's column tiles would.
  const int64_t panels = PanelCount(g, c.n), half = panels / 2;
  PanelGemm<T>(g, c.m, c.k, c.n, x.data(), ldx, c.gathered ? rows.data() : nullptr, packed.data,
               0, half, out.data(), ldc, scratch.data);
  const int64_t split = std::min(c.n, half * g.weight_lanes);
  PanelGemm<T>(g, c.m, c.k, c.n, x.data(), ldx, c.gathered ? rows.data() : nullptr, packed.data,
               half, panels, out.data() + split, ldc, scratch.data);

  std::vector<T> dense(static_cast<size_t>(std::max<int64_t>(c.m * c.k, 1)));
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t p = 0; p < c.k; ++p) dense[i * c.k + p] = x[rows[i] * ldx + p];
  const auto exact = ExactGemm(type, c.m, c.n, c.k, dense.data(), c.k, w.data(), c.n);
  const std::string where = absl::StrCat(DataTypeName(type), " m=", c.m, " k=", c.k, " n=", c.n,
                                         c.gathered ? " gathered" : "");
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const T got = out[i * ldc + j];
      if (j >= c.n) {
        ASSERT_EQ(got, sentinel) << where << ": wrote past the row at (" << i << ", " << j << ")";
        continue;
      }
      ASSERT_TRUE(WithinTolerance(type, got, exact.value[i * c.n + j], exact.abs_dot[i * c.n + j],
                                  c.k))
          << where << " at (" << i << ", " << j << "): " << got << " vs "
          << exact.value[i * c.n + j];
    }
  }
  ASSERT_EQ(out[c.m * ldc], sentinel) << where << ": wrote past the last row";
}

TEST(PanelGemmTest, Fp32MatchesTheExactProductOverEdgeShapes) {
  std::mt19937_64 rng(15);
  for (const Case& c : Cases(PanelGeometryFor(DataType::kFP32))) {
    CheckCase<float>(DataType::kFP32, c, rng);
    if (HasFailure()) return;
  }
}

TEST(PanelGemmTest, Fp64MatchesTheExactProductOverEdgeShapes) {
  std::mt19937_64 rng(16);
  for (const Case& c : Cases(PanelGeometryFor(DataType::kFP64))) {
    CheckCase<double>(DataType::kFP64, c, rng);
    if (HasFailure()) return;
  }
}

TEST(PanelGemmTest, GeometryIsTheMicroKernelBlisRunsHere) {
  for (DataType type : {DataType::kFP32, DataType::kFP64}) {
    const PanelGeometry& g = PanelGeometryFor(type);
    SCOPED_TRACE(absl::StrCat(DataTypeName(type), " on BLIS ", BlisArchitecture()));
    EXPECT_NE(g.kernel, nullptr);
    EXPECT_GE(g.weight_lanes, 1);
    EXPECT_GE(g.token_lanes, 1);
    EXPECT_GE(g.weight_ld, g.weight_lanes);
    EXPECT_GE(g.token_ld, g.token_lanes);
    EXPECT_GE(g.kc, 1);
    EXPECT_EQ(g.a_block % (g.weights_are_a ? g.weight_lanes : g.token_lanes), 0);
    const int64_t size = type == DataType::kFP64 ? 8 : 4;
    EXPECT_EQ(PanelStrideElements(g, 37) * size % 64, 0) << "panels start on cache lines";
    EXPECT_GE(PanelStrideElements(g, 37), 37 * g.weight_ld);
  }
}

TEST(PanelGemmTest, PackedPanelsHoldTheWeightsZeroPadded) {
  const PanelGeometry& g = PanelGeometryFor(DataType::kFP32);
  const int64_t k = 3, n = g.weight_lanes + 2;
  std::vector<float> w(static_cast<size_t>(k * n));
  for (int64_t i = 0; i < k * n; ++i) w[i] = static_cast<float>(i + 1);
  Aligned<float> packed(PackedWeightElements(g, k, n));
  PackWeightPanels<float>(g, w.data(), n, k, n, packed.data);
  const int64_t stride = PanelStrideElements(g, k);
  for (int64_t p = 0; p < PanelCount(g, n); ++p)
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t lane = 0; lane < g.weight_ld; ++lane) {
        const int64_t j = p * g.weight_lanes + lane;
        const float want = lane < g.weight_lanes && j < n ? w[kk * n + j] : 0.0f;
        ASSERT_EQ(packed.data[p * stride + kk * g.weight_ld + lane], want)
            << "panel " << p << " k " << kk << " lane " << lane;
      }
}

}  // namespace
}  // namespace gemmserve
