#include "server/ops/kernels/kernel_set.h"
#include "server//ops/kernels/quantized_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/ops/kernels/kernel_builds_testing.h"
#include "server/ops/kernels/streaming_gemm.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

struct TypeRange {
  QuantizedType type;
  int lo, hi;
  const char* name;
};
const TypeRange kTypes[] = {{QuantizedType::kInt8, -128, 127, "INT8"},
                            {QuantizedType::kUint8, 0, 255, "UINT8"},
                            {QuantizedType::kInt4, -8, 7, "INT4"},
                            {QuantizedType::kUint4, 0, 15, "UINT4"}};

// Packs integers as ONNX stores them: one per byte, or two per byte with the
// even flat index in the low nibble, starting at element `first`.
std::vector<uint8_t> Pack(QuantizedType type, const std::vector<int>& values, int64_t first) {
  const bool four = type == QuantizedType::kInt4 || type == QuantizedType::kUint4;
  std::vector<uint8_t> bytes(four ? (first + values.size() + 1) / 2 + 1 : first + values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t e = first + static_cast<int64_t>(i);
    if (four) {
      const uint8_t nibble = static_cast<uint8_t>(values[i] & 15);
      bytes[e / 2] |= (e % 2 == 0) ? nibble : static_cast<uint8_t>(nibble << 4);
    } else {
      bytes[e] = static_cast<uint8_t>(values[i] & 255);
    }
  }
  return bytes;
}

// ONNX DequantizeLinear of one element into value type `t`, in double: the
// product is exact there, then rounded once to float and once to `t`.
float Dequantize(int q, double zero, float scale, DataType t) {
  const float f = static_cast<float>((q - zero) * static_cast<double>(scale));
  if (t == DataType::kBF16) return BFloat16ToFloat(FloatToBFloat16(f));
  if (t == DataType::kFP16) return HalfToFloat(FloatToHalf(f));
  return f;
}

enum class Layout { kPerColumn, kBlocked, kPerRow, kPerTensor };

using Build = KernelBuild;
const auto BuildName = KernelBuildName;
const auto Builds = KernelBuilds;
void RunBuild(Build build, int64_t rows, int64_t k_begin, int64_t k_end, const float* a,
              int64_t lda, const QuantizedMatrix& w, float* c, int64_t ldc) {
  switch (build) {
    case Build::kAvx512:
      return streaming_internal::QuantizedAvx512(rows, k_begin, k_end, a, lda, w, c, ldc);
    case Build::kAvx2:
      return streaming_internal::QuantizedAvx2(rows, k_begin, k_end, a, lda, w, c, ldc);
    case Build::kGeneric:
      return streaming_internal::QuantizedGeneric(rows, k_begin, k_end, a, lda, w, c, ldc);
  }
}

struct Case {
  int64_t rows, k, n, block;
};
// K = 1, odd K for 4-bit, blocks that do not divide K, one block, the
// four-row unroll's tails, N around the 1024-column block.
const Case kCases[] = {{1, 1, 1, 1},
                       {1, 2, 16, 2},
                       {3, 5, 17, 2},
                       {1, 7, 33, 3},
                       {2, 33, 15, 32},
                       {1, 64, 1023, 16},
                       {4, 9, 1025, 4},
                       {8, 67, 64, 67},
                       {5, 31, 2, 7},
                       {1, 128, 1024, 32},
                       // more rows than one register group (8), and 8-row steps
                       // that straddle blocks of 12
                       {12, 40, 34, 8},
                       {9, 48, 32, 12},
                       // eight-column vectors (AVX2) with and without a tail
                       {3, 24, 40, 8},
                       {16, 17, 8, 9}};

void Check(const TypeRange& tr, DataType value_type, Layout layout, bool zero_points,
           const Case& cs, int64_t first, Build build, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> qdist(tr.lo, tr.hi);
  std::uniform_real_distribution<float> fdist(-1.0f, 1.0f);
  std::vector<int> q(cs.k * cs.n);
  for (int& v : q) v = qdist(rng);
  // The extremes of the type always appear.
  q[0] = tr.lo;
  q[q.size() - 1] = tr.hi;
  const std::vector<uint8_t> bytes = Pack(tr.type, q, first);
  const int64_t blocks = (cs.k + cs.block - 1) / cs.block;
  QuantizedMatrix w;
  w.type = tr.type;
  w.data = bytes.data();
  w.first = first;
  w.k = cs.k;
  w.n = cs.n;
  w.value_type = value_type;
  int64_t scales = 1;
  switch (layout) {
    case Layout::kPerColumn:
      w.block_rows = cs.k;
      w.scale_row_stride = 0;
      w.scale_col_stride = 1;
      scales = cs.n;
      break;
    case Layout::kBlocked:
      w.block_rows = cs.block;
      w.scale_row_stride = cs.n;
      w.scale_col_stride = 1;
      scales = blocks * cs.n;
      break;
    case Layout::kPerRow:
      w.block_rows = 1;
      w.scale_row_stride = 1;
      w.scale_col_stride = 0;
      scales = cs.k;
      break;
    case Layout::kPerTensor:
      w.block_rows = cs.k;
      scales = 1;
      break;
  }
  std::vector<float> scale(scales), zero(scales);
  for (float& s : scale) {
    // Scales of the value type (DequantizeLinear's scale has the output type).
    const float v = std::ldexp(fdist(rng), -4);
    s = value_type == DataType::kBF16   ? BFloat16ToFloat(FloatToBFloat16(v))
        : value_type == DataType::kFP16 ? HalfToFloat(FloatToHalf(v))
                                        : v;
  }
  for (float& z : zero) z = static_cast<float>(qdist(rng));
  zero[0] = static_cast<float>(tr.lo);
  zero[zero.size() - 1] = static_cast<float>(tr.hi);
  w.scale = scale.data();
  w.zero_point = zero_points ? zero.data() : nullptr;
  w.scales_factorable = ScalesFactorable(scale.data(), scales);  // as QuantizedWeights sets it

  std::vector<float> a(cs.rows * cs.k), c(cs.rows * cs.n), c0;
  for (float& v : a) v = fdist(rng);
  for (float& v : c) v = fdist(rng);
  c0 = c;
  // Two calls over K, as a caller splitting the work would make.
  const int64_t mid = cs.k / 2;
  for (auto [k0, k1] : {std::pair<int64_t, int64_t>{0, mid}, {mid, cs.k}}) {
    RunBuild(build, cs.rows, k0, k1, a.data(), cs.k, w, c.data(), cs.n);
  }
  const std::string what =
      absl::StrCat(tr.name, " -> ", DataTypeName(value_type), " layout ", static_cast<int>(layout),
                   zero_points ? " zero points" : "", " rows ", cs.rows, " K ", cs.k, " N ", cs.n,
                   " block ", cs.block, " first ", first, BuildName(build));
  for (int64_t i = 0; i < cs.rows; ++i) {
    for (int64_t j = 0; j < cs.n; ++j) {
      double want = c0[i * cs.n + j], bound = std::fabs(want);
      for (int64_t r = 0; r < cs.k; ++r) {
        int64_t at = 0;
        switch (layout) {
          case Layout::kPerColumn: at = j; break;
          case Layout::kBlocked: at = (r / cs.block) * cs.n + j; break;
          case Layout::kPerRow: at = r; break;
          case Layout::kPerTensor: at = 0; break;
        }
        const double wv =
            Dequantize(q[r * cs.n + j], zero_points ? zero[at] : 0.0, scale[at], value_type);
        want += double{a[i * cs.k + r]} * wv;
        bound += std::fabs(double{a[i * cs.k + r]} * wv);
      }
      ASSERT_NEAR(c[i * cs.n + j], want, 4 * (cs.k + 1) * 0x1p-24 * bound)
          << what << " at " << i << "," << j;
    }
  }
}

TEST(QuantizedGemmTest, ElementsReadAsOnnxPacksThem) {
  for (const TypeRange& tr : kTypes) {
    std::vector<int> values;
    for (int v = tr.lo; v <= tr.hi; ++v) values.push_back(v);
    for (int64_t first : {0, 1}) {
      const std::vector<uint8_t> bytes = Pack(tr.type, values, first);
      for (size_t i = 0; i < values.size(); ++i) {
        ASSERT_EQ(QuantizedElement(tr.type, bytes.data(), first + static_cast<int64_t>(i)),
                  values[i])
            << tr.name << " element " << i << " first " << first;
      }
    }
  }
  EXPECT_EQ(QuantizedBytes(QuantizedType::kInt4, 7), 4);
  EXPECT_EQ(QuantizedBytes(QuantizedType::kUint8, 7), 7);
}

TEST(QuantizedGemmTest, EveryBuildEqualsDequantizeThenMultiplyInDouble) {
  uint64_t seed = 1;
  for (Build build : Builds()) {
    for (const TypeRange& tr : kTypes) {
      const bool four = tr.type == QuantizedType::kInt4 || tr.type == QuantizedType::kUint4;
      for (DataType vt : {DataType::kFP32, DataType::kFP16, DataType::kBF16}) {
        for (Layout layout :
             {Layout::kPerColumn, Layout::kBlocked, Layout::kPerRow, Layout::kPerTensor}) {
          for (bool zp : {false, true}) {
            for (const Case& cs : kCases) {
              for (int64_t first : four ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0}) {
                Check(tr, vt, layout, zp, cs, first, build, seed++);
              }
            }
          }
        }
      }
    }
  }
}

TEST(QuantizedGemmTest, TheDispatcherUsesABuildThatMatches) {
  // Through the public entry point: INT4 blocked, BF16, 1 row (decode).
  const TypeRange tr = kTypes[2];
  Check(tr, DataType::kBF16, Layout::kBlocked, true, {1, 128, 1024, 32}, 0, Builds().back(), 99);
  std::vector<uint8_t> packed(64 * 16 / 2, 0x97);  // low nibble 7, high nibble -7
  std::vector<float> scale(16, 0.5f), a(64, 1.0f), c(16, 0.0f);
  QuantizedMatrix w{QuantizedType::kInt4, packed.data(), 0, 64, 16, scale.data(), nullptr, 64, 0, 1,
                    DataType::kFP32};
  QuantizedGemmAccumulate(1, 0, 64, a.data(), 64, w, c.data(), 16);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(c[j], 64 * 0.5f * (j % 2 == 0 ? 7 : -7)) << j;
}

TEST(QuantizedGemmTest, PanelsHoldDequantizeLinearRoundedToBf16) {
  struct PanelBuild {
    const char* name;
    decltype(KernelSet::dequantize_bf16_panels) dequantize;
  };
  std::vector<PanelBuild> builds = {{"generic", streaming_internal::DequantizeBf16PanelsGeneric}};
  if (Kernels().avx512)
    builds.push_back({"avx512", streaming_internal::DequantizeBf16PanelsAvx512});
  if (Kernels().avx512_bf16) {
    builds.push_back({"avx512_bf16", streaming_internal::DequantizeBf16PanelsAvx512Bf16});
  }
  struct PanelCase {
    int64_t k, n, block, j0, width, k_begin, k_end;
  };
  // K odd (a padding row) and even, tiles of part of a panel, of a panel
  // and a half, at column 0 and past it; all of K and K blocks past row 0.
  const PanelCase cases[] = {
      {1, 2, 1, 0, 2, 0, 1},       {5, 34, 2, 0, 34, 0, 5},     {7, 96, 3, 32, 40, 0, 7},
      {64, 64, 32, 0, 64, 0, 64},  {33, 70, 32, 32, 38, 0, 33}, {16, 48, 16, 0, 17, 0, 16},
      {40, 64, 8, 32, 32, 16, 40}, {33, 70, 32, 0, 70, 32, 33}, {21, 34, 4, 0, 34, 5, 14}};
  std::mt19937_64 rng(7);
  for (const PanelBuild& build : builds) {
    for (const TypeRange& tr : kTypes) {
      for (bool per_column : {true, false}) {
        for (bool zp : {false, true}) {
          for (bool factorable : {false, true})
            for (const PanelCase& pc : cases) {
              std::uniform_int_distribution<int> qdist(tr.lo, tr.hi);
              std::vector<int> q(pc.k * pc.n);
              for (int& v : q) v = qdist(rng);
              const std::vector<uint8_t> bytes = Pack(tr.type, q, 0);
              const int64_t blocks = (pc.k + pc.block - 1) / pc.block;
              std::vector<float> scale(per_column ? blocks * pc.n : 1), zero(scale.size());
              std::uniform_real_distribution<float> fdist(-1.0f, 1.0f);
              for (float& v : scale)
                v = BFloat16ToFloat(FloatToBFloat16(std::ldexp(fdist(rng), -3)));
              for (float& v : zero) v = static_cast<float>(qdist(rng));
              QuantizedMatrix w{tr.type,
                                bytes.data(),
                                0,
                                pc.k,
                                pc.n,
                                scale.data(),
                                zp ? zero.data() : nullptr,
                                per_column ? pc.block : pc.k,
                                per_column ? pc.n : 0,
                                per_column ? 1 : 0,
                                DataType::kBF16};
              // Both roundings of the AVX512-BF16 build: vcvtne2ps2bf16 where
              // the scales allow it, the AVX-512 build's integer arithmetic
              // where not.
              w.scales_factorable = factorable && ScalesFactorable(scale.data(), scale.size());
              const int64_t kb = pc.k_end - pc.k_begin;
              const int64_t stride = Bf16PanelStride(kb), panels = Bf16PanelCount(pc.width);
              std::vector<uint16_t> out(stride * panels, 0xdead);
              build.dequantize(w, pc.k_begin, pc.k_end, pc.j0, pc.width, out.data());
              for (int64_t p = 0; p < panels; ++p) {
                for (int64_t rr = 0; rr < (kb + 1) / 2 * 2; ++rr) {
                  for (int64_t l = 0; l < kBf16PanelLanes; ++l) {
                    const int64_t j = p * kBf16PanelLanes + l, col = pc.j0 + j, r = pc.k_begin + rr;
                    uint16_t want = 0;
                    if (rr < kb && j < pc.width) {
                      const int64_t at = per_column ? (r / pc.block) * pc.n + col : 0;
                      want = FloatToBFloat16(Dequantize(q[r * pc.n + col], zp ? zero[at] : 0.0,
                                                        scale[at], DataType::kBF16));
                    }
                    const uint16_t got = out[p * stride + (rr / 2) * 64 + 2 * l + rr % 2];
                    ASSERT_EQ(got, want)
                        << tr.name << " " << build.name << (per_column ? " blocked" : " per tensor")
                        << (zp ? " zero points" : "") << (w.scales_factorable ? " factorable" : "")
                        << " K " << pc.k << " N " << pc.n << " j0 " << pc.j0 << " width "
                        << pc.width << " rows " << pc.k_begin << "-" << pc.k_end << " at row " << r
                        << " column " << j;
                  }
                }
              }
            }
        }
      }
    }
  }
}

TEST(QuantizedGemmTest, ScalesLeaveTheSumOnlyWhereThatEqualsTheGraph) {
  EXPECT_TRUE(ScalesFactorable(std::vector<float>{0.0f, -0x1p-126f, 0x1p100f, 3.0f}.data(), 4));
  EXPECT_FALSE(ScalesFactorable(std::vector<float>{1.0f, 0x1p-127f}.data(), 2));
  EXPECT_FALSE(ScalesFactorable(std::vector<float>{0x1p101f}.data(), 1));
  EXPECT_FALSE(ScalesFactorable(std::vector<float>{std::nanf("")}.data(), 1));
  // FP32 values, INT8 127 with scale 2^-100, against activations of
  // 1.5 * 2^126: each product is 190.5 * 2^26, but a * q alone would be
  // infinite. The scale may be taken out of the sum only when no such
  // a * (q - z) overflows, so these activations take the per-weight path
  // and the answer stays finite, on every build.
  for (Build build : Builds()) {
    for (int64_t k : {8, 16, 13}) {
      const int64_t n = 32;
      std::vector<uint8_t> q(k * n, 127);
      std::vector<float> scale(n, 0x1p-100f), a(k, std::ldexp(1.5f, 126)), c(n, 0.0f);
      a[0] = 1.0f;  // every row of A is checked, not only its first value
      QuantizedMatrix w{QuantizedType::kInt8, q.data(), 0, k, n, scale.data(), nullptr, k, 0, 1,
                        DataType::kFP32};
      w.scales_factorable = ScalesFactorable(scale.data(), n);
      ASSERT_TRUE(w.scales_factorable);
      RunBuild(build, 1, 0, k, a.data(), k, w, c.data(), n);
      const double wv = 127 * 0x1p-100, want = (1.0 + (k - 1) * std::ldexp(1.5, 126)) * wv;
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_TRUE(std::isfinite(c[j])) << "K " << k << " column " << j << BuildName(build);
        ASSERT_NEAR(c[j], want, 4 * (k + 1) * 0x1p-24 * want) << "K " << k << " column " << j;
      }
    }
  }
}

}  // namespace
}  // namespace gemmserve
