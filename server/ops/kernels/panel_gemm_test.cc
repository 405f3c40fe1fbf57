#include "server/ops/kernels/panel_gemm.h"

#include "server/ops/kernels/bf16_panel_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/process/compute_environment.h"
#include "server/ops/kernels/gemm_testing.h"
#include "server/ops/kernels/kernel_set.h"
#include "server/ops/packed_weights.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

using ops_testing::ExactGemm;
using ops_testing::FillRandom;
using ops_testing::WithinTolerance;

// 64-byte aligned storage of T, as the packed operands want.
template <typename T>
struct Aligned {
  explicit Aligned(int64_t n) : storage(static_cast<size_t>(n) + 64) {
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

// Zeros, ones, primes, and the edges of weight panels of w columns, token
// panels of t rows and K blocks of kc.
std::vector<Case> EdgeCases(int64_t w, int64_t t, int64_t kc) {
  return {
      {1, 1, 1, false},
      {1, 0, 5, false},
      {0, 3, 5, false},
      {3, 5, 0, false},
      {7, 13, 29, true},
      {t, 31, w, false},
      {t - 1, 17, w + 1, true},
      {t + 1, 64, w - 1, true},
      {2 * t + 1, kc, 3 * w, true},
      {5, kc + 1, 2 * w + 3, true},
      {11, kc - 1, 37, false},
      {64, 2 * kc + 7, 4 * w + 1, true},
      {97, 257, 131, true},
      {128, 512, 256, false},
      {4, 99, 40, true},
      {2, 3 * kc + 1, 70, false},
      {3, 2, 33, true},
  };
}

// ... for the micro-kernel BLIS runs here.
std::vector<Case> Cases(const PanelGeometry& g) {
  return EdgeCases(g.weight_lanes, g.token_lanes, g.kc);
}

void CheckCase(const Case& c, std::mt19937_64& rng) {
  using T = float;
  constexpr DataType type = DataType::kFP32;
  const PanelGeometry& g = Fp32PanelGeometry();
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
  PackWeightPanels(g, w.data(), c.n, c.k, c.n, packed.data);
  Aligned<T> scratch(PanelGemmScratchElements(g, c.m, c.k));
  const T sentinel = static_cast<T>(-7.25);
  std::vector<T> out(static_cast<size_t>(c.m * ldc + 1), sentinel);

  // All panels at once, then two halves as a scheduler's column tiles would.
  const int64_t panels = PanelCount(g, c.n), half = panels / 2;
  PanelGemm(g, c.m, c.k, c.n, x.data(), ldx, c.gathered ? rows.data() : nullptr, packed.data, 0,
            half, out.data(), ldc, scratch.data);
  const int64_t split = std::min(c.n, half * g.weight_lanes);
  PanelGemm(g, c.m, c.k, c.n, x.data(), ldx, c.gathered ? rows.data() : nullptr, packed.data, half,
            panels, out.data() + split, ldc, scratch.data);

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
      ASSERT_TRUE(
          WithinTolerance(type, got, exact.value[i * c.n + j], exact.abs_dot[i * c.n + j], c.k))
          << where << " at (" << i << ", " << j << "): " << got << " vs "
          << exact.value[i * c.n + j];
    }
  }
  ASSERT_EQ(out[c.m * ldc], sentinel) << where << ": wrote past the last row";
}

TEST(PanelGemmTest, Fp32MatchesTheExactProductOverEdgeShapes) {
  std::mt19937_64 rng(15);
  for (const Case& c : Cases(Fp32PanelGeometry())) {
    CheckCase(c, rng);
    if (HasFailure()) return;
  }
}

TEST(PanelGemmTest, GeometryIsTheMicroKernelBlisRunsHere) {
  {
    const PanelGeometry& g = Fp32PanelGeometry();
    SCOPED_TRACE(absl::StrCat("sgemm on BLIS ", BlisArchitecture()));
    EXPECT_NE(g.kernel, nullptr);
    EXPECT_GE(g.weight_lanes, 1);
    EXPECT_GE(g.token_lanes, 1);
    EXPECT_GE(g.weight_ld, g.weight_lanes);
    EXPECT_GE(g.token_ld, g.token_lanes);
    EXPECT_GE(g.kc, 1);
    EXPECT_EQ(g.a_block % (g.weights_are_a ? g.weight_lanes : g.token_lanes), 0);
    EXPECT_EQ(PanelStrideElements(g, 37) * 4 % 64, 0) << "panels start on cache lines";
    EXPECT_GE(PanelStrideElements(g, 37), 37 * g.weight_ld);
  }
}

TEST(PanelGemmTest, PackedPanelsHoldTheWeightsZeroPadded) {
  const PanelGeometry& g = Fp32PanelGeometry();
  const int64_t k = 3, n = g.weight_lanes + 2;
  std::vector<float> w(static_cast<size_t>(k * n));
  for (int64_t i = 0; i < k * n; ++i) w[i] = static_cast<float>(i + 1);
  Aligned<float> packed(PackedWeightElements(g, k, n));
  PackWeightPanels(g, w.data(), n, k, n, packed.data);
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

namespace gemmserve {
namespace {

// BF16 on pair panels or FP16 on its own, over one case: every operand
// times `scale`, gathered rows, the panels in two column tiles as the
// scheduler cuts them; FP32 results against the exact product, nothing
// written past a row or the last row.
void CheckHalfPanels(DataType type, const Case& c, double scale, std::mt19937_64& rng) {
  const bool bf16 = type == DataType::kBF16;
  const int64_t source_rows = c.gathered ? c.m + 3 : c.m;
  const int64_t ldx = c.k + 3, ldc = c.n + 5;
  std::vector<uint16_t> x(static_cast<size_t>(source_rows * ldx + 1));
  std::vector<uint16_t> w(static_cast<size_t>(c.k * c.n + 1));
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  auto half = [&] {
    const float v = static_cast<float>(dist(rng) * scale);
    return bf16 ? FloatToBFloat16(v) : FloatToHalf(v);
  };
  for (auto& v : x) v = half();
  for (auto& v : w) v = half();
  std::vector<int64_t> rows(static_cast<size_t>(c.m));
  for (int64_t i = 0; i < c.m; ++i) rows[i] = c.gathered ? rng() % source_rows : i;
  Aligned<uint16_t> panels(Bf16PanelCount(c.n) *
                           (bf16 ? Bf16PanelStride(c.k) : Fp16PanelStride(c.k)));
  (bf16 ? PackBf16Panels : PackFp16Panels)(w.data(), c.n, c.k, c.n, panels.data);
  const int ew = Bf16MinExponent(w.data(), c.k * c.n);
  Aligned<uint32_t> scratch(bf16 ? Bf16PanelScratchWords(c.m, c.k)
                                 : Fp16PanelScratchWords(c.m, c.k));
  const float sentinel = -7.25f;
  std::vector<float> out(static_cast<size_t>(c.m * ldc + 1), sentinel);
  const int64_t panel_count = Bf16PanelCount(c.n), first = panel_count / 2;
  const int64_t* r = c.gathered ? rows.data() : nullptr;
  auto run = [&](int64_t begin, int64_t end, float* dst) {
    if (bf16) {
      Bf16PanelGemm(c.m, c.k, c.n, x.data(), ldx, r, panels.data, ew, begin, end, dst, ldc,
                    scratch.data);
    } else {
      Fp16PanelGemm(c.m, c.k, c.n, x.data(), ldx, r, panels.data, begin, end, dst, ldc,
                    scratch.data);
    }
  };
  run(0, first, out.data());
  run(first, panel_count, out.data() + std::min(c.n, first * kBf16PanelLanes));
  std::vector<uint16_t> dense(static_cast<size_t>(std::max<int64_t>(c.m * c.k, 1)));
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t p = 0; p < c.k; ++p) dense[i * c.k + p] = x[rows[i] * ldx + p];
  const auto exact = ExactGemm(type, c.m, c.n, c.k, dense.data(), c.k, w.data(), c.n);
  const std::string where = absl::StrCat(DataTypeName(type), " ", bf16 ? Bf16PanelIsa() : "",
                                         " m=", c.m, " k=", c.k, " n=", c.n, " scale=", scale);
  // The FP32 accumulation is checked before the one rounding to the half
  // type; a BF16 one subnormal in FP32 (tiny scales) as the BF16 output.
  const bool tiny = bf16 && scale < 0x1p-60;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = out[i * ldc + j];
      if (j >= c.n) {
        ASSERT_EQ(got, sentinel) << where << ": wrote past the row at (" << i << ", " << j << ")";
        continue;
      }
      const double value = tiny ? BFloat16ToFloat(FloatToBFloat16(got)) : got;
      ASSERT_TRUE(WithinTolerance(tiny ? DataType::kBF16 : DataType::kFP32, value,
                                  exact.value[i * c.n + j], exact.abs_dot[i * c.n + j], c.k))
          << where << " at (" << i << ", " << j << "): " << got << " vs "
          << exact.value[i * c.n + j];
    }
  }
  ASSERT_EQ(out[c.m * ldc], sentinel) << where << ": wrote past the last row";
}

// BF16 on pair panels: the native vdpbf16ps path where the CPU has it and the
// FMA path, forced in turn, over the same edge shapes (odd K for the pairs,
// the 256-deep K blocks, 32-column panels, 12-row token panels).
class Bf16PanelGemmTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!Bf16PanelsSupported()) GTEST_SKIP() << "no AVX-512 here: BF16 panels unused";
    if (!GetParam() && !bf16_panel_internal::HaveNativeBf16()) {
      GTEST_SKIP() << "no AVX512-BF16 here: the native path is not used";
    }
    bf16_panel_internal::ForceFmaPath(GetParam());
  }
  void TearDown() override { bf16_panel_internal::ForceFmaPath(false); }

  // `scale` multiplies every operand: 2^-70 makes products subnormal in FP32.
  void Check(const Case& c, double scale, std::mt19937_64& rng) {
    CheckHalfPanels(DataType::kBF16, c, scale, rng);
  }
};

std::vector<Case> Bf16Cases() { return EdgeCases(kBf16PanelLanes, kBf16TokenRows, kBf16KBlock); }

TEST_P(Bf16PanelGemmTest, MatchesTheExactProductOverEdgeShapes) {
  std::mt19937_64 rng(17);
  for (const Case& c : Bf16Cases()) {
    Check(c, 1.0, rng);
    if (HasFailure()) return;
  }
}

// Values so small that their products are subnormal in FP32, and subnormal
// BF16 operands: vdpbf16ps would flush them, so the call takes the FMA path
// and stays exact.
TEST_P(Bf16PanelGemmTest, TinyAndSubnormalOperandsStayExact) {
  std::mt19937_64 rng(18);
  for (double scale : {0x1p-70, 0x1p-127, 0x1p-130}) {
    for (const Case& c : {Case{13, 70, 40, true}, Case{1, 9, 3, false}}) {
      Check(c, scale, rng);
      if (HasFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, Bf16PanelGemmTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Fma") : std::string("Native");
                         });

// FP16 on its [K][32] panels: widened exactly in registers, FP32 FMA, over
// the same edge shapes, and with FP16 subnormal operands (2^-20 is below FP16's
// smallest normal, 2^-14), which the widening keeps.
TEST(Fp16PanelGemmTest, MatchesTheExactProductOverEdgeShapesAndSubnormals) {
  if (!Bf16PanelsSupported()) GTEST_SKIP() << "no AVX-512 here: FP16 panels unused";
  std::mt19937_64 rng(19);
  for (const Case& c : Bf16Cases()) {
    CheckHalfPanels(DataType::kFP16, c, 1.0, rng);
    if (HasFailure()) return;
  }
  for (const Case& c : {Case{13, 70, 40, true}, Case{1, 9, 3, false}}) {
    CheckHalfPanels(DataType::kFP16, c, 0x1p-20, rng);
    if (HasFailure()) return;
  }
}

// The AVX-512 packing of BF16 weights (where the CPU has it) writes the
// portable one's panels, padding included, over odd K, partial panels and a
// row stride past N.
TEST(Bf16PanelGemmTest, EveryPackingBuildWritesThePortablePanels) {
  if (!Kernels().avx512) GTEST_SKIP() << "no AVX-512 here: the portable packing alone";
  std::mt19937_64 rng(20);
  for (const Case& c : Bf16Cases()) {
    const int64_t ldw = c.n + 3;
    std::vector<uint16_t> w(static_cast<size_t>(std::max<int64_t>(c.k * ldw, 1)));
    for (uint16_t& v : w) v = static_cast<uint16_t>(rng());
    const int64_t size = Bf16PanelCount(c.n) * Bf16PanelStride(c.k);
    Aligned<uint16_t> portable(size), avx512(size);
    std::fill(portable.data, portable.data + size, uint16_t{0xdead});
    std::fill(avx512.data, avx512.data + size, uint16_t{0xbeef});
    bf16_panel_internal::PackBf16PanelsGeneric(w.data(), ldw, c.k, c.n, portable.data);
    bf16_panel_internal::PackBf16PanelsAvx512(w.data(), ldw, c.k, c.n, avx512.data);
    ASSERT_TRUE(std::equal(portable.data, portable.data + size, avx512.data))
        << "k=" << c.k << " n=" << c.n;
  }
}

TEST(Bf16PanelGemmTest, MinExponentSeesSubnormalsAndIgnoresZeros) {
  const uint16_t values[] = {0x0000, 0x8000, 0x3f80 /* 1 */, 0x0001 /* subnormal */};
  EXPECT_EQ(Bf16MinExponent(values, 3), 127);
  EXPECT_EQ(Bf16MinExponent(values, 4), 0);
  EXPECT_EQ(Bf16MinExponent(values, 2), 255);
}

// --bf16_panels: on and off as asked (where the panels exist at all), auto
// by the start-up probe's measured speed-up, and resident BF16 weights
// packed at load exactly when the panels are preferred.
TEST(Bf16PanelsPolicyTest, ModesParseAndDecideTheLayout) {
  Bf16Panels mode = Bf16Panels::kAuto;
  ASSERT_TRUE(ParseBf16Panels("on", &mode));
  EXPECT_EQ(mode, Bf16Panels::kOn);
  ASSERT_TRUE(ParseBf16Panels("off", &mode));
  EXPECT_EQ(mode, Bf16Panels::kOff);
  ASSERT_TRUE(ParseBf16Panels("auto", &mode));
  EXPECT_EQ(mode, Bf16Panels::kAuto);
  for (const char* bad : {"", "On", "yes", "1", "auto "}) {
    EXPECT_FALSE(ParseBf16Panels(bad, &mode)) << bad;
  }
  const double speedup = Bf16NativeSpeedup();
  if (bf16_panel_internal::HaveNativeBf16()) {
    EXPECT_GT(speedup, 0.05);  // a rate, measured: not a constant
    EXPECT_LT(speedup, 20.0);
  } else {
    EXPECT_EQ(speedup, 0.0);
  }
  SetBf16Panels(Bf16Panels::kOn);
  EXPECT_EQ(Bf16PanelsPreferred(), Bf16PanelsSupported());
  EXPECT_EQ(PackedWeights::PackedAtLoad(DataType::kBF16), Bf16PanelsSupported());
  SetBf16Panels(Bf16Panels::kOff);
  EXPECT_FALSE(Bf16PanelsPreferred());
  EXPECT_FALSE(PackedWeights::PackedAtLoad(DataType::kBF16));
  EXPECT_EQ(Bf16PanelsChoice().rfind("row-major", 0), 0u) << Bf16PanelsChoice();
  SetBf16Panels(Bf16Panels::kAuto);
  const bool fast = Bf16PanelsSupported() && speedup >= kBf16NativeMinSpeedup;
  EXPECT_EQ(Bf16PanelsPreferred(), fast);
  EXPECT_EQ(PackedWeights::PackedAtLoad(DataType::kBF16), fast);
  EXPECT_EQ(PackedWeights::PackedAtLoad(DataType::kFP32), true);  // not BF16's switch
}

}  // namespace
}  // namespace gemmserve
