// The scheduler on lists that mix datatypes, paths (streaming, packed side by
// side, packed one after another, direct) and gather/scatter rows, as merged
// batches will: every problem's rows must equal its own reference.
#include "server/ops/gemm_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/ops/kernels/gemm_testing.h"
#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/ops/kernels/panel_gemm.h"
#include "server/ops/packed_weights.h"
#include "server/ops/kernels/reference_gemm.h"
#include "server/tensor/tensor.h"

namespace gemmserve {
namespace {

using namespace ops_testing;

struct Owned {
  std::vector<uint8_t> a, b, c, c_before, bias;
  std::vector<int64_t> a_rows, c_rows;
  AlignedBuffer panels;
  GemmProblem p;
};

// The same problem with its B packed once into weight panels, as a resident
// model holds it (FP32 on BLIS's; BF16 on pair panels, FP16 on its
// own); p.b is cleared, so only the panels are read.
Owned WithPanels(Owned o) {
  const int64_t es = DataTypeSize(o.p.type);
  if (IsHalfPrecision(o.p.type)) {
    const bool bf16 = o.p.type == DataType::kBF16;
    const int64_t stride = bf16 ? Bf16PanelStride(o.p.k) : Fp16PanelStride(o.p.k);
    o.panels = *AlignedBuffer::Allocate(std::max<int64_t>(1, Bf16PanelCount(o.p.n) * stride * es));
    const auto* w = reinterpret_cast<const uint16_t*>(o.b.data());
    auto* out = static_cast<uint16_t*>(o.panels.data());
    if (bf16) {
      PackBf16Panels(w, o.p.n, o.p.k, o.p.n, out);
    } else {
      PackFp16Panels(w, o.p.n, o.p.k, o.p.n, out);
    }
    o.p.b_panels = o.panels.data();
    if (o.p.type == DataType::kBF16) o.p.b_panels_min_exponent = Bf16MinExponent(w, o.p.k * o.p.n);
    o.p.b = nullptr;
    o.p.ldb = 0;
    return o;
  }
  const PanelGeometry& g = Fp32PanelGeometry();
  o.panels = *AlignedBuffer::Allocate(PackedWeightElements(g, o.p.k, o.p.n) * es);
  PackWeightPanels(g, reinterpret_cast<const float*>(o.b.data()), o.p.n, o.p.k, o.p.n,
                   static_cast<float*>(o.panels.data()));
  o.p.b_panels = o.panels.data();
  o.p.b = nullptr;
  o.p.ldb = 0;
  return o;
}

// A problem over its own buffers; `gather` permutes rows of A and C, `with_bias` adds one.
Owned Make(DataType type, int64_t m, int64_t n, int64_t k, bool gather, bool with_bias,
           std::mt19937_64& rng) {
  Owned o;
  const int64_t es = DataTypeSize(type);
  const int64_t a_rows = gather ? m + 3 : m, c_rows = gather ? m + 2 : m;
  o.a.resize(std::max<int64_t>(1, a_rows * k * es));
  o.b.resize(std::max<int64_t>(1, k * n * es));
  // C starts as garbage: a kernel that accumulated into C, or skipped a row,
  // shows; rows nobody scatters to must keep it.
  o.c.assign(std::max<int64_t>(1, c_rows * n * es), 0x5a);
  FillRandom(type, o.a.data(), a_rows * k, rng);
  FillRandom(type, o.b.data(), k * n, rng);
  o.p.type = type;
  o.p.m = m;
  o.p.n = n;
  o.p.k = k;
  o.p.a = o.a.data();
  o.p.lda = k;
  o.p.b = o.b.data();
  o.p.ldb = n;
  o.p.c = o.c.data();
  o.p.ldc = n;
  if (gather) {
    for (int64_t i = 0; i < m; ++i) o.a_rows.push_back((i * 7 + 1) % a_rows);
    o.c_rows.resize(c_rows);
    std::iota(o.c_rows.begin(), o.c_rows.end(), 0);
    std::shuffle(o.c_rows.begin(), o.c_rows.end(), rng);
    o.c_rows.resize(m);
    o.p.a_rows = o.a_rows.data();
    o.p.c_rows = o.c_rows.data();
  }
  if (with_bias) {
    o.bias.resize(std::max<int64_t>(1, n * es));
    FillRandom(type, o.bias.data(), n, rng);
    o.p.bias = o.bias.data();
  }
  o.c_before = o.c;
  return o;
}

void Check(const Owned& o, const std::string& where) {
  const GemmProblem& p = o.p;
  const int64_t es = DataTypeSize(p.type);
  const int64_t c_rows = static_cast<int64_t>(o.c.size()) / std::max<int64_t>(1, p.n * es);
  for (int64_t r = 0; r < c_rows && p.n > 0; ++r) {
    const bool written =
        p.c_rows ? std::find(p.c_rows, p.c_rows + p.m, r) != p.c_rows + p.m : r < p.m;
    if (!written) {
      ASSERT_EQ(std::memcmp(o.c.data() + r * p.n * es, o.c_before.data() + r * p.n * es,
                            static_cast<size_t>(p.n * es)),
                0)
          << where << ": row " << r << " of C was written, but no row scatters to it";
    }
  }
  for (int64_t i = 0; i < p.m; ++i) {
    const int64_t ar = p.a_rows ? p.a_rows[i] : i, cr = p.c_rows ? p.c_rows[i] : i;
    for (int64_t j = 0; j < p.n; ++j) {
      double want = 0, bound = 0;
      for (int64_t q = 0; q < p.k; ++q) {
        const double x = ValueAt(p.type, o.a.data(), ar * p.k + q);
        const double y = ValueAt(p.type, o.b.data(), q * p.n + j);
        want += x * y;
        bound += std::fabs(x * y);
      }
      if (p.bias) {
        const double bv = ValueAt(p.type, o.bias.data(), j);
        want += bv;
        bound += std::fabs(bv);
      }
      const double got = ValueAt(p.type, o.c.data(), cr * p.n + j);
      if (!IsFloatingPoint(p.type)) {
        std::vector<uint8_t> exact(es);
        (void)got;
        // Integers: the reference kernel's wrapped result, bit for bit.
        std::vector<uint8_t> arow(p.k * es);
        std::memcpy(arow.data(), o.a.data() + ar * p.k * es, arow.size());
        std::vector<uint8_t> bcol(p.k * es);
        for (int64_t q = 0; q < p.k; ++q)
          std::memcpy(bcol.data() + q * es, o.b.data() + (q * p.n + j) * es, es);
        ReferenceGemm(p.type, 1, 1, p.k, arow.data(), p.k, bcol.data(), 1, exact.data(), 1);
        ASSERT_TRUE(SameBits(p.type, o.c.data(), cr * p.n + j, exact.data(), 0)) << where;
      } else {
        ASSERT_TRUE(WithinRoundingOfExact(p.type, got, want, bound, p.k + (p.bias ? 1 : 0)))
            << where << " row " << i << " col " << j << ": got " << got << " want " << want;
      }
    }
  }
}

// BF16 on row-major weights: pair panels packed per call (native and on the
// FMA path) and BLIS with B widened in its packing, each in turn.
struct HalfPath {
  bool blis, fma_only;
};

class RunGemmProblemsTest : public testing::TestWithParam<HalfPath> {
 protected:
  void SetUp() override {
    if (!GetParam().blis && !Bf16PanelsSupported()) GTEST_SKIP() << "no AVX-512: no half panels";
    if (!GetParam().fma_only && !bf16_panel_internal::HaveNativeBf16() && !GetParam().blis) {
      GTEST_SKIP() << "no AVX512-BF16: the native path is not there to test";
    }
    gemm_scheduler_internal::ForceBlisHalf(GetParam().blis);
    bf16_panel_internal::ForceFmaPath(GetParam().fma_only);
    SetBf16Panels(Bf16Panels::kOn);  // whatever vdpbf16ps's measured speed here
  }
  void TearDown() override {
    gemm_scheduler_internal::ForceBlisHalf(false);
    bf16_panel_internal::ForceFmaPath(false);
    SetBf16Panels(Bf16Panels::kAuto);
  }
};

INSTANTIATE_TEST_SUITE_P(HalfPaths, RunGemmProblemsTest,
                         testing::Values(HalfPath{false, false}, HalfPath{false, true},
                                         HalfPath{true, false}),
                         [](const testing::TestParamInfo<HalfPath>& info) {
                           return std::string(info.param.blis       ? "Blis"
                                              : info.param.fma_only ? "PanelsFma"
                                                                    : "PanelsNative");
                         });

TEST_P(RunGemmProblemsTest, MixedListsGiveEachProblemItsOwnResult) {
  for (int threads : {1, 2}) {
    std::mt19937_64 rng(99 + threads);
    std::vector<Owned> owned;
    // Streaming (<= 16 rows) of every float type, with and without gather/bias.
    owned.push_back(Make(DataType::kFP32, 1, 1030, 300, true, true, rng));
    owned.push_back(Make(DataType::kBF16, 8, 33, 131, true, false, rng));
    owned.push_back(Make(DataType::kFP16, 3, 17, 70, false, true, rng));
    owned.push_back(Make(DataType::kFP64, 2, 9, 65, true, true, rng));
    // Packed: gather/scatter of every float type, direct float and integer.
    owned.push_back(Make(DataType::kFP32, 17, 300, 70, true, true, rng));
    owned.push_back(Make(DataType::kBF16, 40, 19, 33, true, true, rng));
    owned.push_back(Make(DataType::kFP16, 17, 8, 5, true, false, rng));
    // Half types packed by our pack_fn (BLIS) or into panels per call: K over
    // several KC blocks (and K-block edges), rows and columns across
    // micro-tile and panel edges (skx 32 x 12, haswell 6 x 16; panels of 32).
    owned.push_back(Make(DataType::kBF16, 65, 37, 1100, true, true, rng));
    owned.push_back(Make(DataType::kFP16, 33, 131, 777, true, true, rng));
    owned.push_back(Make(DataType::kFP16, 97, 12, 1, false, false, rng));
    owned.push_back(Make(DataType::kBF16, 31, 65, 2 * kBf16KBlock + 1, false, true, rng));
    owned.push_back(Make(DataType::kBF16, 29, 257, 0, true, true, rng));
    owned.push_back(Make(DataType::kFP16, 24, 31, kBf16KBlock, true, false, rng));
    owned.push_back(Make(DataType::kBF16, 19, 1, 2, false, false, rng));
    owned.push_back(Make(DataType::kINT32, 33, 400, 9, false, false, rng));
    owned.push_back(Make(DataType::kFP64, 12, 7, 9, true, true, rng));
    owned.push_back(Make(DataType::kFP32, 30, 31, 29, false, false, rng));
    owned.push_back(Make(DataType::kINT64, 20, 11, 13, false, false, rng));
    owned.push_back(Make(DataType::kUINT32, 10, 5, 7, false, false, rng));
    // Gathered problems across the 512-row blocks of the packed path.
    owned.push_back(Make(DataType::kFP32, 511, 19, 13, true, true, rng));
    owned.push_back(Make(DataType::kFP32, 513, 17, 11, true, false, rng));
    owned.push_back(Make(DataType::kBF16, 1025, 9, 7, true, true, rng));
    owned.push_back(Make(DataType::kFP64, 512, 5, 3, true, true, rng));
    owned.push_back(Make(DataType::kFP32, 700, 8, 5, false, true, rng));  // bias, rows in order
    owned.push_back(
        Make(DataType::kFP16, 600, 600, 3, false, false, rng));  // direct, blocks of 512
    // B packed once (resident weights): streaming sizes, mid sizes and blocks
    // of 512 rows; K across BLIS's KC blocks, N across weight panel edges;
    // gathered with bias, and direct.
    {
      constexpr DataType type = DataType::kFP32;
      const PanelGeometry& g = Fp32PanelGeometry();
      const int64_t w = g.weight_lanes, kc = g.kc;
      owned.push_back(WithPanels(Make(type, 1, 4 * w + 3, kc + 1, true, true, rng)));
      owned.push_back(WithPanels(Make(type, 16, w - 1, 67, false, false, rng)));
      owned.push_back(WithPanels(Make(type, 17, 3 * w, 2 * kc + 5, true, true, rng)));
      owned.push_back(WithPanels(Make(type, 64, 300, 129, true, false, rng)));
      owned.push_back(WithPanels(Make(type, 100, 9 * w + 1, kc - 1, false, false, rng)));
      owned.push_back(WithPanels(Make(type, 513, 2 * w + 5, 33, true, true, rng)));
      owned.push_back(WithPanels(Make(type, 40, 5, 0, true, true, rng)));
    }
    if (Bf16PanelsSupported()) {  // BF16 pair panels, FP16 panels: decode sizes too
      const int64_t w = kBf16PanelLanes, kb = kBf16KBlock;
      for (DataType type : {DataType::kBF16, DataType::kFP16}) {
        owned.push_back(WithPanels(Make(type, 1, 4 * w + 3, kb + 1, true, true, rng)));
        owned.push_back(WithPanels(Make(type, 16, w - 1, 67, false, false, rng)));
        owned.push_back(WithPanels(Make(type, 17, 3 * w, 2 * kb + 5, true, true, rng)));
        owned.push_back(WithPanels(Make(type, 100, 9 * w + 1, kb - 1, false, true, rng)));
        owned.push_back(WithPanels(Make(type, 513, 2 * w + 5, 33, true, true, rng)));
        owned.push_back(WithPanels(Make(type, 40, 5, 0, true, true, rng)));
      }
    }
    // Degenerate sizes in the same list.
    owned.push_back(Make(DataType::kFP32, 4, 6, 0, true, true, rng));
    owned.push_back(Make(DataType::kFP32, 0, 6, 3, false, false, rng));
    std::vector<GemmProblem> problems;
    for (const Owned& o : owned) problems.push_back(o.p);
    ASSERT_TRUE(RunGemmProblems(problems, threads).ok());
    for (size_t i = 0; i < owned.size(); ++i) {
      Check(owned[i],
            absl::StrCat("problem ", i, " ", DataTypeName(owned[i].p.type), " threads=", threads));
    }
  }
}

// Tiny BF16 weights packed per call: their products are FP32 subnormals,
// which vdpbf16ps would flush, so the exponent guard (taken over the packed
// tile) must send the call to the FMA path and the sums stay exact.
TEST_P(RunGemmProblemsTest, TinyHalfWeightsPackedPerCallKeepSubnormalProducts) {
  std::mt19937_64 rng(5);
  for (int threads : {1, 2}) {
    Owned o = Make(DataType::kBF16, 20, 70, 33, true, false, rng);
    auto* a = reinterpret_cast<uint16_t*>(o.a.data());
    auto* b = reinterpret_cast<uint16_t*>(o.b.data());
    // Positive, so nothing cancels: ~2^-7 times ~2^-120 (the last column
    // only, past the first panel) gives products about FP32's smallest
    // normal, a quarter of them subnormal, and sums far above BF16's ulp.
    for (size_t i = 0; i < o.a.size() / 2; ++i) a[i] = 0x3c00 | (rng() & 0x7f);
    for (int64_t q = 0; q < o.p.k; ++q) b[q * o.p.n + o.p.n - 1] = 0x0380 | (rng() & 0x7f);
    std::vector<GemmProblem> problems = {o.p};
    ASSERT_TRUE(RunGemmProblems(problems, threads).ok());
    Check(o, absl::StrCat("tiny weights, threads=", threads));
  }
}

// GemmWorkBytes is what a request is counted at; GemmScratchBytes what the
// scheduler really allocates for a concrete list. For random lists of every
// type and path: the bound covers the list, and a batch's merged list (lists
// concatenated, as the built-in models merge; rows stacked into one problem,
// as resident models do) is covered by the sum of its parts' bounds.
TEST(GemmWorkBytesTest, BoundsWhatTheSchedulerAllocatesAlsoForMergedLists) {
  std::mt19937_64 rng(7);
  const DataType types[] = {DataType::kFP32, DataType::kFP64, DataType::kBF16, DataType::kFP16,
                            DataType::kINT32};
  const int64_t dims[] = {0, 1, 2, 15, 16, 17, 63, 64, 65, 200, 511, 512, 513, 1100};
  auto dim = [&] { return dims[rng() % (sizeof dims / sizeof dims[0])]; };
  static const int64_t kRows[1] = {0};  // gathered problems only need the lists to exist
  // Nothing is run: operands only need to be large enough for column tiles'
  // pointers to stay inside them.
  static std::vector<uint8_t> operand(1100 * 1100 * 8);
  auto describe = [](const std::vector<GemmProblem>& list) {
    GemmWorkShape w;
    w.type = list[0].type;
    w.k = list[0].k;
    w.n = list[0].n;
    w.problems = static_cast<int64_t>(list.size());
    w.min_rows = list[0].m;
    for (const GemmProblem& p : list) {
      w.rows += p.m;
      w.min_rows = std::min(w.min_rows, p.m);
      w.max_rows = std::max(w.max_rows, p.m);
      w.gathered |= p.a_rows != nullptr;
      w.panels |= p.b_panels != nullptr;
      w.quantized |= p.b_quantized != nullptr;
      w.int8_activations |= p.int8_activations;
    }
    return w;
  };
  // Quantized problems are cut into blocks of rows: their row lists must be
  // as long as their rows.
  static const std::vector<int64_t> kManyRows(2 * 1100 + 1);
  // (With BF16 values, problems of kQuantizedPanelMinRows rows or more run on
  // panels dequantized per call.)
  static const QuantizedMatrix kQuantized;
  static const QuantizedMatrix kQuantizedBf16 = [] {
    QuantizedMatrix q;
    q.value_type = DataType::kBF16;
    return q;
  }();
  for (int trial = 0; trial < 3000; ++trial) {
    const DataType type = types[rng() % 5];
    const int threads = 1 + static_cast<int>(rng() % 8);
    const int64_t k = dim(), n = dim();
    const bool gathered = IsFloatingPoint(type) && rng() % 2 == 0;
    const bool quantized = type != DataType::kFP64 && IsFloatingPoint(type) && rng() % 3 == 0;
    const bool panels = !quantized && PackedWeights::Supports(type) && rng() % 2 == 0;
    const bool int8_activations = quantized && rng() % 2 == 0;  // accuracy_level 4
    auto random_list = [&](int64_t count) {
      std::vector<GemmProblem> list(count);
      for (GemmProblem& p : list) {
        p.type = type;
        p.m = dim();
        p.k = k;
        p.n = n;
        p.a = p.b = p.c = operand.data();
        if (gathered) p.a_rows = p.c_rows = kRows;
        if (panels) p.b_panels = operand.data();
        if (quantized) {
          p.b_quantized = type == DataType::kBF16 ? &kQuantizedBf16 : &kQuantized;
          p.int8_activations = int8_activations;
          if (gathered) p.a_rows = p.c_rows = kManyRows.data();
        }
      }
      return list;
    };
    const std::vector<GemmProblem> a = random_list(1 + rng() % 6), b = random_list(1 + rng() % 6);
    const int64_t bound_a = GemmWorkBytes(describe(a), threads);
    const int64_t bound_b = GemmWorkBytes(describe(b), threads);
    EXPECT_LE(GemmScratchBytes(a, threads), bound_a) << "trial " << trial;
    std::vector<GemmProblem> merged = a;
    merged.insert(merged.end(), b.begin(), b.end());
    EXPECT_LE(GemmScratchBytes(merged, threads), bound_a + bound_b) << "trial " << trial;
    // One problem per request, their rows stacked.
    std::vector<GemmProblem> one_a = {a[0]}, one_b = {b[0]}, stacked = {a[0]};
    stacked[0].m = a[0].m + b[0].m;
    EXPECT_LE(GemmScratchBytes(stacked, threads),
              GemmWorkBytes(describe(one_a), threads) + GemmWorkBytes(describe(one_b), threads))
        << "trial " << trial;
  }
}

TEST(GemmWorkBytesTest, SaturatesInsteadOfWrapping) {
  GemmWorkShape w;
  w.problems = w.rows = w.min_rows = w.max_rows = int64_t{1} << 40;
  w.k = w.n = int64_t{1} << 60;
  w.gathered = true;
  EXPECT_EQ(GemmWorkBytes(w, 64), std::numeric_limits<int64_t>::max());
  w.min_rows = 1;  // streaming too
  EXPECT_EQ(GemmWorkBytes(w, 64), std::numeric_limits<int64_t>::max());
  w.problems = int64_t{1} << 62;
  w.n = 0;
  EXPECT_EQ(GemmWorkBytes(w, 2), std::numeric_limits<int64_t>::max());
}

TEST(GemmWeightBytesTest, CountsEachProblemsWeightsAsStored) {
  GemmProblem dense;
  dense.type = DataType::kFP16;
  dense.m = 9;
  dense.k = 3;
  dense.n = 5;
  EXPECT_EQ(GemmWeightBytes({dense}), 3 * 5 * 2);  // however many rows read it
  GemmProblem panels = dense;
  panels.type = DataType::kBF16;
  panels.b_panels = &panels;  // only its presence matters here
  const int64_t shape[2] = {3, 5};
  if (Bf16PanelsSupported()) {  // packed BF16 panels exist only where their kernels run
    EXPECT_EQ(GemmWeightBytes({panels}), *PackedWeights::BytesFor(DataType::kBF16, shape));
  }
  // INT4, K = 7, N = 3, blocks of 2 rows (4 blocks) per column, zero points:
  // 21 nibbles in 11 bytes, 12 scales and 12 zero points in FP32.
  const float scales[12] = {}, zeros[12] = {};
  QuantizedMatrix q{QuantizedType::kInt4, nullptr, 0, 7, 3, scales, zeros, 2, 3, 1};
  GemmProblem quantized = dense;
  quantized.b_quantized = &q;
  EXPECT_EQ(GemmWeightBytes({quantized}), 11 + 12 * 8);
  // INT8 with one scale for the whole matrix, no zero point.
  QuantizedMatrix per_tensor{QuantizedType::kInt8, nullptr, 0, 7, 3, scales, nullptr, 7, 0, 0};
  GemmProblem tensor_scaled = dense;
  tensor_scaled.b_quantized = &per_tensor;
  EXPECT_EQ(GemmWeightBytes({tensor_scaled}), 21 + 4);
  // A list sums its problems (two requests' B are two reads).
  EXPECT_EQ(GemmWeightBytes({dense, quantized, dense}), 30 + 107 + 30);
  EXPECT_EQ(GemmWeightBytes({}), 0);
  GemmProblem huge = dense;
  huge.k = huge.n = int64_t{1} << 40;
  EXPECT_EQ(GemmWeightBytes({huge, huge}), std::numeric_limits<int64_t>::max());
}

}  // namespace
}  // namespace gemmserve
