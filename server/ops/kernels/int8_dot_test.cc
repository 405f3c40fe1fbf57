// Integer dot products on 8-bit activations (int8_dot.h): the quantization
// of activations (round half to even, symmetric, zero and non-finite
// blocks), the kernel against a float64 evaluation of the same arithmetic
// over every weight type and layout, K slices and gathered rows, the int32
// bound at its edge, the accuracy against DequantizeLinear-then-op, and each
// faster build (AVX512-VNNI, AVX-VNNI, AVX2) bit for bit against the portable
// one.
#include "server/ops/kernels/int8_dot.h"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/ops/gemm_scheduler.h"
#include "server/ops/kernels/cpu_features.h"
#include "server/ops/kernels/kernel_set.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

TEST(QuantizeInt8RowsTest, SymmetricRoundHalfToEvenWithTheBlockSums) {
  // amax 127: the step is 1, so the halves show how rounding goes.
  const std::vector<float> a = {127.0f,  63.5f, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f,
                                -127.0f, 0.0f,  0.0f, 0.0f,  0.0f};  // second block: all zeros
  Int8Rows rows;
  QuantizeInt8Rows(DataType::kFP32, a.data(), 12, 1, 12, 8, &rows);
  EXPECT_EQ(rows.blocks, 2);
  EXPECT_EQ(rows.ld, 16);
  const std::vector<int8_t> want = {127, 64, 0, 0, 2, 2, -2, -127, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(rows.q, want);
  EXPECT_EQ(rows.scale[0], 1.0f);
  EXPECT_EQ(rows.scale[1], 0.0f);
  EXPECT_EQ(rows.sum[0], 127 + 64 + 2 + 2 - 2 - 127);
  EXPECT_EQ(rows.sum[1], 0);
}

TEST(QuantizeInt8RowsTest, NonFiniteBlocksGetANanScaleAndHalfTypesAreRead) {
  const std::vector<float> a = {1.0f, NAN, 2.0f, 3.0f, INFINITY, 1.0f};
  Int8Rows rows;
  QuantizeInt8Rows(DataType::kFP32, a.data(), 6, 1, 6, 2, &rows);
  EXPECT_TRUE(std::isnan(rows.scale[0]));
  EXPECT_EQ(rows.scale[1], 3.0f / 127.0f);
  EXPECT_TRUE(std::isnan(rows.scale[2]));
  const std::vector<uint16_t> half = {FloatToBFloat16(-4.0f), FloatToBFloat16(2.0f)};
  QuantizeInt8Rows(DataType::kBF16, half.data(), 2, 1, 2, 32, &rows);
  EXPECT_EQ(rows.q[0], -127);
  EXPECT_EQ(rows.q[1], 64);  // 63.5 to even
}

// How the scales (and zero points) are addressed: [blocks, N] as held,
// [N, blocks] (a column's scales apart: gathered), or one per block for
// every column (column stride 0).
enum class Scales { kRowMajor, kTransposed, kShared };

// Weights of one type and layout with their integers, scales and zero points.
struct Weights {
  QuantizedType type;
  int64_t k, n, block;  // block 0: per column
  bool zero_point;
  std::vector<uint8_t> data;
  std::vector<int32_t> q;  // [k, n]
  std::vector<float> scale, zp;
  QuantizedMatrix m;

  Weights(QuantizedType t, int64_t k_, int64_t n_, int64_t block_, bool zp_, uint64_t seed)
      : type(t), k(k_), n(n_), block(block_), zero_point(zp_) {
    std::mt19937_64 rng(seed);
    const bool four = t == QuantizedType::kInt4 || t == QuantizedType::kUint4;
    const bool is_signed = t == QuantizedType::kInt8 || t == QuantizedType::kInt4;
    const int lo = is_signed ? (four ? -8 : -128) : 0;
    const int hi = four ? (is_signed ? 7 : 15) : (is_signed ? 127 : 255);
    std::uniform_int_distribution<int> value(lo, hi);
    data.assign(static_cast<size_t>(QuantizedBytes(t, k * n)), 0);
    for (int64_t e = 0; e < k * n; ++e) {
      const int v = value(rng);
      q.push_back(v);
      if (four) {
        data[e / 2] |= static_cast<uint8_t>((v & 15) << ((e & 1) * 4));
      } else {
        data[e] = static_cast<uint8_t>(v);
      }
    }
    const int64_t rows_of_scales = block > 0 ? (k + block - 1) / block : 1;
    std::uniform_real_distribution<float> s(0.001f, 0.01f);
    for (int64_t i = 0; i < rows_of_scales * n; ++i) {
      scale.push_back(s(rng));
      if (zero_point) zp.push_back(static_cast<float>(is_signed ? value(rng) / 2 : hi / 2));
    }
    m.type = t;
    m.data = data.data();
    m.k = k;
    m.n = n;
    m.scale = scale.data();
    m.zero_point = zero_point ? zp.data() : nullptr;
    m.block_rows = block > 0 ? block : k;
    m.scale_row_stride = n;
    m.scale_col_stride = 1;
  }
  int64_t ScaleIndex(int64_t t, int64_t j) const { return (block > 0 ? t / block : 0) * n + j; }
  // The same scales read through other strides (ScaleIndex no longer holds;
  // for tests of one build against another).
  void LayOutScales(Scales s) {
    const int64_t rows_of_scales = static_cast<int64_t>(scale.size()) / n;
    if (s == Scales::kTransposed) {
      m.scale_row_stride = 1;
      m.scale_col_stride = rows_of_scales;
    } else if (s == Scales::kShared) {
      m.scale_col_stride = 0;
    }
  }
  // The same weights as expert `g` of a [G, K, N] tensor held in `storage`,
  // after `g` experts of other values: a kernel that ignored
  // QuantizedMatrix::first would read those (a 4-bit expert of odd K * N
  // starts mid-byte).
  QuantizedMatrix AsExpert(int64_t g, std::vector<uint8_t>* storage) const {
    const bool four = type == QuantizedType::kInt4 || type == QuantizedType::kUint4;
    const int64_t first = g * k * n;
    storage->assign(static_cast<size_t>(QuantizedBytes(type, first + k * n)), 0);
    auto put = [&](int64_t e, int v) {
      if (four) {
        (*storage)[e / 2] |= static_cast<uint8_t>((v & 15) << ((e & 1) * 4));
      } else {
        (*storage)[e] = static_cast<uint8_t>(v);
      }
    };
    for (int64_t e = 0; e < first; ++e) put(e, static_cast<int>(e * 7 + 3) % (four ? 8 : 100) + 1);
    for (int64_t e = 0; e < k * n; ++e) put(first + e, q[e]);
    QuantizedMatrix expert = m;
    expert.data = storage->data();
    expert.first = first;
    return expert;
  }
};

// The kernel's arithmetic in float64: integer sums exact, then the scales;
// *magnitude gets the sum of the terms' magnitudes (FP32's rounding scales
// with it, not with a sum that cancels).
std::vector<double> SameArithmetic(const Int8Rows& a, const std::vector<int64_t>& rows,
                                   const Weights& w, int64_t k_begin, int64_t k_end,
                                   std::vector<double>* magnitude) {
  std::vector<double> c(rows.size() * w.n, 0.0);
  magnitude->assign(c.size(), 0.0);
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t t0 = k_begin; t0 < k_end; t0 += a.block) {
      const int64_t b = t0 / a.block, t1 = std::min(t0 + a.block, k_end);
      for (int64_t j = 0; j < w.n; ++j) {
        int64_t dot = 0;
        for (int64_t t = t0; t < t1; ++t)
          dot += a.q[rows[i] * a.ld + t] * int64_t{w.q[t * w.n + j]};
        const int64_t s = w.ScaleIndex(t0, j);
        const int64_t z = w.zero_point ? static_cast<int64_t>(w.zp[s]) : 0;
        const double term = double{a.scale[rows[i] * a.blocks + b]} * w.scale[s] *
                            static_cast<double>(dot - z * a.sum[rows[i] * a.blocks + b]);
        c[i * w.n + j] += term;
        (*magnitude)[i * w.n + j] += std::fabs(term);
      }
    }
  }
  return c;
}

struct Layout {
  QuantizedType type;
  int64_t block;
  bool zero_point;
  Scales scales = Scales::kRowMajor;
};

TEST(Int8DotTest, EveryTypeAndLayoutIsTheSameArithmetic) {
  const int64_t k = 77, n = 19, m = 5;  // K past whole blocks, N odd (4-bit mid-byte)
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(m * k);
  for (float& v : x) v = dist(rng);
  for (const Layout& l : std::vector<Layout>{{QuantizedType::kInt8, 0, false},
                                             {QuantizedType::kUint8, 0, true},
                                             {QuantizedType::kInt4, 16, false},
                                             {QuantizedType::kUint4, 16, true},
                                             {QuantizedType::kInt8, 5, true},
                                             {QuantizedType::kUint4, 0, true}}) {
    SCOPED_TRACE(absl::StrCat(QuantizedBytes(l.type, 2), "-byte pairs, block ", l.block,
                              l.zero_point ? ", zero points" : ""));
    Weights w(l.type, k, n, l.block, l.zero_point, 7);
    Int8Rows a;
    QuantizeInt8Rows(DataType::kFP32, x.data(), k, m, k, Int8ActivationBlock(w.m), &a);
    EXPECT_EQ(a.block, l.block > 0 ? l.block : kInt8ActivationBlock);
    const std::vector<int64_t> gather = {4, 0, 4, 2};  // rows gathered, one twice
    std::vector<float> c(gather.size() * n, 0.0f);
    Int8DotAccumulate(static_cast<int64_t>(gather.size()), gather.data(), a, 0, k, w.m, c.data(),
                      n);
    std::vector<double> magnitude;
    const std::vector<double> want = SameArithmetic(a, gather, w, 0, k, &magnitude);
    for (size_t e = 0; e < c.size(); ++e) {
      EXPECT_NEAR(c[e], want[e], 1e-6 * magnitude[e]) << e;  // a few FP32 roundings per term
    }
    // K in two slices at a block boundary adds up to the whole.
    const int64_t cut = a.block * ((k / a.block) / 2);
    std::vector<float> sliced(gather.size() * n, 0.0f);
    Int8DotAccumulate(4, gather.data(), a, 0, cut, w.m, sliced.data(), n);
    Int8DotAccumulate(4, gather.data(), a, cut, k, w.m, sliced.data(), n);
    for (size_t e = 0; e < c.size(); ++e) EXPECT_NEAR(sliced[e], c[e], 1e-6 * magnitude[e]);
  }
}

TEST(Int8DotTest, TheLargestBlockSumsStayExactInInt32) {
  // Every activation at 127 (a constant row) against UINT8 255 with a zero
  // point of 0, and INT8 -128 with a zero point of 127, in a block of
  // kInt8MaxBlock rows: the extreme sums 127 * 255 * 4096 and
  // 127 * (-128 - 127) * 4096, exact, then scaled in FP32.
  const int64_t k = kInt8MaxBlock + 1, n = 2;
  std::vector<float> x(k, 3.0f);
  for (bool unsigned_weights : {true, false}) {
    Weights w(unsigned_weights ? QuantizedType::kUint8 : QuantizedType::kInt8, k, n, kInt8MaxBlock,
              true, 1);
    std::fill(w.data.begin(), w.data.end(), unsigned_weights ? 255 : 0x80);
    std::fill(w.zp.begin(), w.zp.end(), unsigned_weights ? 0.0f : 127.0f);
    std::fill(w.scale.begin(), w.scale.end(), 1.0f);
    Int8Rows a;
    QuantizeInt8Rows(DataType::kFP32, x.data(), k, 1, k, Int8ActivationBlock(w.m), &a);
    ASSERT_EQ(a.block, kInt8MaxBlock);
    std::vector<float> c(n, 0.0f);
    Int8DotAccumulate(1, nullptr, a, 0, kInt8MaxBlock, w.m, c.data(), n);
    const int64_t dot = int64_t{127} * (unsigned_weights ? 255 : -128 - 127) * kInt8MaxBlock;
    EXPECT_EQ(c[0], std::fma(a.scale[0], static_cast<float>(dot), 0.0f)) << unsigned_weights;
    EXPECT_EQ(c[1], c[0]);
  }
}

TEST(Int8DotTest, CloseToDequantizeThenMatMul) {
  const int64_t k = 256, n = 64, m = 3;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(m * k);
  for (float& v : x) v = dist(rng);
  Weights w(QuantizedType::kInt4, k, n, 32, false, 5);
  Int8Rows a;
  QuantizeInt8Rows(DataType::kFP32, x.data(), k, m, k, Int8ActivationBlock(w.m), &a);
  std::vector<float> c(m * n, 0.0f);
  Int8DotAccumulate(m, nullptr, a, 0, k, w.m, c.data(), n);
  double max_err = 0, max_ref = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0;
      for (int64_t t = 0; t < k; ++t) {
        exact += double{x[r * k + t]} * w.q[t * n + j] * w.scale[w.ScaleIndex(t, j)];
      }
      max_ref = std::max(max_ref, std::fabs(exact));
      max_err = std::max(max_err, std::fabs(c[r * n + j] - exact));
    }
  }
  // Normal activations in blocks of 32: about half a step of max|a|/127 each.
  EXPECT_LT(max_err / max_ref, 2e-2);
  EXPECT_GT(max_err, 0.0);  // not the exact path by accident
}

// The faster builds of the kernel (KernelSet::int8_dot), each with the
// features it needs and whether it reads the packed copy (PackInt8Weights).
using Int8DotBuild = void (*)(int64_t, const int64_t*, const Int8Rows&, int64_t, int64_t,
                              const QuantizedMatrix&, float*, int64_t);
struct FastBuild {
  const char* name;
  Int8DotBuild run;
  bool reads_packed;
  bool (*runs_on)(const CpuFeatures&);
  const char* needs;
};

const FastBuild kFastBuilds[] = {
    {"avx512_vnni", int8_dot_internal::Int8DotAvx512Vnni, true,
     [](const CpuFeatures& f) { return f.Avx512Build() && f.avx512_vnni; },
     "AVX-512 (F, BW, VL, DQ) and AVX512-VNNI"},
    {"avx_vnni", int8_dot_internal::Int8DotAvxVnni, true,
     [](const CpuFeatures& f) { return f.Avx2Build() && f.avx_vnni; },
     "AVX2, FMA, F16C and AVX-VNNI"},
    {"avx2", int8_dot_internal::Int8DotAvx2, false,
     [](const CpuFeatures& f) { return f.Avx2Build(); }, "AVX2, FMA and F16C"},
};

// A build by its name in gtest's messages.
void PrintTo(const FastBuild& build, std::ostream* os) { *os << build.name; }

class Int8DotBuildTest : public ::testing::TestWithParam<FastBuild> {};

// Each build against the portable one, bit for bit: the integer sums are
// exact and each block is folded with the same FP32 operations in the same
// order. Every weight type with and without zero points, per column and
// blocked (5: blocks ending mid-quad, 16, 32), scales row-major, transposed
// (gathered) and shared by every column (stride 0); N not a multiple of the
// lanes, lines or chunks; 1 to 9 rows (each row group, and remainders);
// K ending in a partial block, in two slices on a block boundary; row-major
// weights, and the packed copy for the builds that read it; the weights as
// the first expert of a [G, K, N] tensor and as later ones
// (QuantizedMatrix::first, mid-byte for 4-bit experts of odd K * N).
TEST_P(Int8DotBuildTest, EqualsThePortableOneBitForBit) {
  const FastBuild& build = GetParam();
  if (!build.runs_on(Cpu())) {
    GTEST_SKIP() << build.name << " needs " << build.needs
                 << ", which this CPU (under GEMMSERVE_MAX_CPU_ISA, if set) does not have";
  }
  std::mt19937_64 rng(31);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const Layout& l : std::vector<Layout>{{QuantizedType::kInt8, 0, false},
                                             {QuantizedType::kInt8, 5, true, Scales::kTransposed},
                                             {QuantizedType::kUint8, 16, true},
                                             {QuantizedType::kUint8, 32, false, Scales::kShared},
                                             {QuantizedType::kInt4, 16, false},
                                             {QuantizedType::kInt4, 32, true, Scales::kTransposed},
                                             {QuantizedType::kUint4, 0, true, Scales::kShared},
                                             {QuantizedType::kUint4, 5, false}}) {
    for (int64_t n : {1, 7, 38, 65, 130}) {
      const int64_t k = 131, m = 7;
      SCOPED_TRACE(absl::StrCat(build.name, ": type ", static_cast<int>(l.type), " block ", l.block,
                                l.zero_point ? " zero points" : "", " scales ",
                                static_cast<int>(l.scales), " n ", n));
      std::vector<float> x(m * k);
      for (float& v : x) v = dist(rng);
      Weights w(l.type, k, n, l.block, l.zero_point, 13 + n);
      w.LayOutScales(l.scales);
      Int8Rows a;
      QuantizeInt8Rows(DataType::kFP32, x.data(), k, m, k, Int8ActivationBlock(w.m), &a);
      const int64_t cut = a.block * std::max<int64_t>(1, (k / a.block) / 2);
      // Each build reads the weights as experts 0, 1 and 2 of a [G, K, N]
      // tensor, row-major and (where it reads one) packed.
      std::vector<std::vector<uint8_t>> storage(3), repacked(3);
      std::vector<QuantizedMatrix> weights;
      for (int64_t g = 0; g < 3; ++g) {
        const QuantizedMatrix expert = w.AsExpert(g, &storage[g]);
        weights.push_back(expert);
        if (!build.reads_packed) continue;
        repacked[g].resize(static_cast<size_t>(Int8PackedBytes(expert, a.block)));
        PackInt8Weights(expert, a.block, repacked[g].data());
        weights.push_back(expert);
        weights.back().int8_packed = repacked[g].data();
      }
      const int64_t gather[] = {6, 1, 1, 3, 0, 5, 2, 4, 6};  // rows gathered, some twice
      for (int64_t rows = 1; rows <= 9; ++rows) {
        // The portable build on the matrix alone (first 0).
        std::vector<float> portable(rows * n, 0.5f);
        for (auto [k0, k1] : {std::pair<int64_t, int64_t>{0, cut}, {cut, k}}) {
          int8_dot_internal::Int8DotGeneric(rows, gather, a, k0, k1, w.m, portable.data(), n);
        }
        for (const QuantizedMatrix& on : weights) {
          std::vector<float> fast(rows * n, 0.5f), generic(rows * n, 0.5f);
          for (auto [k0, k1] : {std::pair<int64_t, int64_t>{0, cut}, {cut, k}}) {
            build.run(rows, gather, a, k0, k1, on, fast.data(), n);
            int8_dot_internal::Int8DotGeneric(rows, gather, a, k0, k1, on, generic.data(), n);
          }
          // The portable build reads a later expert as it reads the matrix alone.
          ASSERT_EQ(generic, portable) << "portable build, expert " << on.first / (k * n);
          for (size_t e = 0; e < portable.size(); ++e) {
            ASSERT_EQ(FloatBits(fast[e]), FloatBits(portable[e]))
                << (on.int8_packed == nullptr ? "row-major" : "packed") << ", expert "
                << on.first / (k * n) << ", " << rows << " rows, " << e << ": " << fast[e] << " vs "
                << portable[e];
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryBuild, Int8DotBuildTest, ::testing::ValuesIn(kFastBuilds),
                         [](const ::testing::TestParamInfo<FastBuild>& info) {
                           return std::string(info.param.name);
                         });

// A level-4 problem: rows of A (`type`, [m, k]) times `w` into C ([m, n]).
GemmProblem Level4Problem(DataType type, int64_t m, int64_t k, int64_t n, const void* a, void* c,
                          const QuantizedMatrix& w) {
  GemmProblem p;
  p.type = type;
  p.m = m;
  p.k = k;
  p.n = n;
  p.a = a;
  p.lda = k;
  p.c = c;
  p.ldc = n;
  p.b_quantized = &w;
  p.int8_activations = true;
  return p;
}

// Problems with int8_activations through the scheduler: rows gathered from
// one A (quantized once), scattered to their rows of C with a bias, K cut into
// slices across threads, more than one block of rows: each output as the
// kernel computes it on its own, within FP32's reordering of the K slices.
TEST(Int8DotTest, ThroughTheSchedulerEachProblemGetsItsRows) {
  const int64_t k = 200, n = 24, m = 70;
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(m * k), bias(n);
  for (float& v : a) v = dist(rng);
  for (float& v : bias) v = dist(rng);
  Weights w(QuantizedType::kUint4, k, n, 16, true, 9);
  std::vector<int64_t> rows1, rows2, out1, out2;
  for (int64_t i = 0; i < m; ++i) {  // every token twice: two "experts"
    rows1.push_back(m - 1 - i);
    out1.push_back(2 * i);
    rows2.push_back(i);
    out2.push_back(2 * i + 1);
  }
  std::vector<float> c(2 * m * n, NAN);
  const GemmProblem p = Level4Problem(DataType::kFP32, m, k, n, a.data(), c.data(), w.m);
  GemmProblem p1 = p, p2 = p;
  p1.a_rows = rows1.data();
  p1.c_rows = out1.data();
  p2.a_rows = rows2.data();
  p2.c_rows = out2.data();
  p2.bias = bias.data();
  ASSERT_TRUE(RunGemmProblems({p1, p2}, 3).ok());
  Int8Rows q;
  QuantizeInt8Rows(DataType::kFP32, a.data(), k, m, k, Int8ActivationBlock(w.m), &q);
  std::vector<float> want(2 * m * n, 0.0f);
  Int8DotAccumulate(m, rows1.data(), q, 0, k, w.m, want.data(), 2 * n);      // even rows
  Int8DotAccumulate(m, rows2.data(), q, 0, k, w.m, want.data() + n, 2 * n);  // odd rows
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) want[(2 * i + 1) * n + j] += bias[j];
  }
  for (size_t e = 0; e < c.size(); ++e) {
    EXPECT_NEAR(c[e], want[e], 1e-5 * (std::fabs(want[e]) + 1.0)) << e;
  }
}

// Half-precision problems: activations read as FP16 or BF16, the result
// rounded once to the type, as the kernel's FP32 result rounds.
TEST(Int8DotTest, HalfTypesReadTheirActivationsAndRoundTheResultOnce) {
  const int64_t k = 96, n = 40, m = 3;
  std::mt19937_64 rng(41);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Weights w(QuantizedType::kInt4, k, n, 32, false, 3);
  for (DataType type : {DataType::kFP16, DataType::kBF16}) {
    SCOPED_TRACE(DataTypeName(type));
    std::vector<uint16_t> a(m * k), c(m * n, 0);
    for (uint16_t& v : a) {
      const float f = dist(rng);
      v = type == DataType::kFP16 ? FloatToHalf(f) : FloatToBFloat16(f);
    }
    w.m.value_type = type;
    ASSERT_TRUE(RunGemmProblems({Level4Problem(type, m, k, n, a.data(), c.data(), w.m)}, 2).ok());
    Int8Rows q;
    QuantizeInt8Rows(type, a.data(), k, m, k, Int8ActivationBlock(w.m), &q);
    std::vector<float> want(m * n, 0.0f);
    Int8DotAccumulate(m, nullptr, q, 0, k, w.m, want.data(), n);
    for (size_t e = 0; e < c.size(); ++e) {
      const float got = type == DataType::kFP16 ? HalfToFloat(c[e]) : BFloat16ToFloat(c[e]);
      const uint16_t rounded =
          type == DataType::kFP16 ? FloatToHalf(want[e]) : FloatToBFloat16(want[e]);
      const float expected =
          type == DataType::kFP16 ? HalfToFloat(rounded) : BFloat16ToFloat(rounded);
      // One rounding of a sum the scheduler may add in another order: at most an ulp apart.
      EXPECT_NEAR(got, expected,
                  std::fabs(expected) * (type == DataType::kFP16 ? 1e-3 : 8e-3) + 1e-6)
          << e;
    }
  }
}

}  // namespace
}  // namespace gemmserve
