// QuantizedWeights::Make: every layout ONNX allows that the kernel serves
// gives each group the scales and zero points DequantizeLinear means, and
// every disagreement is refused with a message naming it, before the kernel
// could index outside what the file held.
#include "server/ops/quantized_weights.h"

#include <gtest/gtest.h>

#include <vector>

#include "absl/strings/match.h"

namespace gemmserve {
namespace {

AlignedBuffer Bytes(int64_t n) {
  absl::StatusOr<AlignedBuffer> b = AlignedBuffer::Allocate(n);
  EXPECT_TRUE(b.ok());
  return *std::move(b);
}

QuantizedWeights::Layout Layout(QuantizedType type, Shape shape, int64_t axis, int64_t block,
                                Shape scale_shape) {
  QuantizedWeights::Layout l;
  l.type = type;
  l.shape = std::move(shape);
  l.axis = axis;
  l.block_size = block;
  l.scale_shape = std::move(scale_shape);
  l.value_type = DataType::kBF16;
  return l;
}

// The scale W[g, r, j] gets, through the group's description.
float ScaleOf(const QuantizedMatrix& m, int64_t r, int64_t j) {
  return m.scale[(r / m.block_rows) * m.scale_row_stride + j * m.scale_col_stride];
}

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i + 1);
  return v;
}

TEST(QuantizedWeightsTest, EachLayoutAddressesTheScalesOnnxMeans) {
  const int64_t g = 3, k = 7, n = 5;
  struct Case {
    int64_t axis, block;
    Shape scale_shape;
    std::function<int64_t(int64_t, int64_t, int64_t)> index;  // of scale for (g, r, j)
    const char* granularity;
  };
  const Case cases[] = {
      {1, 0, {}, [](int64_t, int64_t, int64_t) { return 0; }, "per_tensor"},
      {2, 0, {1}, [](int64_t, int64_t, int64_t) { return 0; }, "per_tensor"},
      {-1, 0, {n}, [](int64_t, int64_t, int64_t j) { return j; }, "per_channel"},
      {1, 0, {k}, [](int64_t, int64_t r, int64_t) { return r; }, "per_channel"},
      {0, 0, {g}, [](int64_t gg, int64_t, int64_t) { return gg; }, "per_channel"},
      {1,
       3,
       {g, 3, n},
       [](int64_t gg, int64_t r, int64_t j) { return (gg * 3 + r / 3) * n + j; },
       "blocked"},
      {-2, 7, {g, 1, n}, [](int64_t gg, int64_t, int64_t j) { return gg * n + j; }, "blocked"},
      {1,
       1,
       {g, k, n},
       [](int64_t gg, int64_t r, int64_t j) { return (gg * k + r) * n + j; },
       "blocked"},
  };
  for (const Case& c : cases) {
    int64_t count = 1;
    for (int64_t d : c.scale_shape) count *= d;
    absl::StatusOr<QuantizedWeights> q = QuantizedWeights::Make(
        Layout(QuantizedType::kInt4, {g, k, n}, c.axis, c.block, c.scale_shape),
        Bytes((g * k * n + 1) / 2), Iota(count), Iota(count));
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_EQ(q->granularity(), c.granularity) << ShapeToString(c.scale_shape);
    for (int64_t gg = 0; gg < g; ++gg) {
      const QuantizedMatrix& m = q->group(gg);
      EXPECT_EQ(m.first, gg * k * n);
      for (int64_t r = 0; r < k; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(ScaleOf(m, r, j), static_cast<float>(c.index(gg, r, j) + 1))
              << "axis " << c.axis << " block " << c.block << " at " << gg << "," << r << "," << j;
        }
      }
    }
  }
}

TEST(QuantizedWeightsTest, DisagreementsAreRefusedByName) {
  const Shape w = {2, 8, 4};
  struct Case {
    QuantizedWeights::Layout layout;
    int64_t bytes, scales, zero_points;
    const char* message;
  };
  auto layout = [&](int64_t axis, int64_t block, Shape ss) {
    return Layout(QuantizedType::kInt8, w, axis, block, std::move(ss));
  };
  QuantizedWeights::Layout fp64 = layout(2, 0, {4});
  fp64.value_type = DataType::kFP64;
  const Case cases[] = {
      {layout(2, 0, {4}), 63, 4, 0, "needs 64 bytes, got 63"},
      {layout(3, 0, {4}), 64, 4, 0, "axis 3 is outside [-3, 3)"},
      {layout(-4, 0, {4}), 64, 4, 0, "axis -4 is outside"},
      {layout(2, 0, {5}), 64, 5, 0, "neither per tensor"},
      {layout(1, 0, {2, 8, 4}), 64, 64, 0, "blocked quantization needs block_size >= 1"},
      {layout(1, -1, {4}), 64, 4, 0, "block_size -1 is negative"},
      {layout(1, 9, {2, 1, 4}), 64, 8, 0, "block_size 9 is above K=8"},
      {layout(1, 3, {2, 2, 4}), 64, 16, 0, "disagrees with block_size 3"},
      {layout(2, 2, {2, 8, 2}), 64, 32, 0, "gemmserve serves blocks along K"},
      {layout(2, 0, {4}), 64, 4, 3, "zero_point: 3 values"},
      {layout(2, 0, {4}), 64, 3, 0, "holds 4 values, got 3"},
      {fp64, 64, 4, 0, "must be FP32, FP16 or BF16"},
      {Layout(QuantizedType::kInt8, {8}, 0, 0, {}), 8, 1, 0, "expected rank 2"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<QuantizedWeights> q =
        QuantizedWeights::Make(c.layout, Bytes(c.bytes), std::vector<float>(c.scales, 1.0f),
                               std::vector<float>(c.zero_points, 0.0f));
    ASSERT_FALSE(q.ok()) << c.message;
    EXPECT_TRUE(absl::StrContains(q.status().message(), c.message)) << q.status();
  }
  std::vector<float> nan(4, 1.0f);
  nan[2] = std::numeric_limits<float>::quiet_NaN();
  absl::StatusOr<QuantizedWeights> q =
      QuantizedWeights::Make(layout(2, 0, {4}), Bytes(64), nan, {});
  ASSERT_FALSE(q.ok());
  EXPECT_TRUE(absl::StrContains(q.status().message(), "value 2 is not finite")) << q.status();
}

TEST(QuantizedWeightsTest, EveryGroupSaysWhetherItsScalesCanLeaveTheSum) {
  const QuantizedWeights::Layout l = Layout(QuantizedType::kInt8, {2, 8, 4}, 2, 0, {4});
  struct Case {
    std::vector<float> scales;
    bool factorable;
    int min_exponent;  // the smallest nonzero scale's biased exponent
  };
  for (const Case& c : {Case{{1, 2, 0, -3}, true, 127}, Case{{1, 2, 0x1p-127f, 3}, false, 0},
                        Case{{1, 0x1p101f, 0.75f, 3}, false, 126}, Case{{0, 0, 0, 0}, true, 255}}) {
    absl::StatusOr<QuantizedWeights> q = QuantizedWeights::Make(l, Bytes(64), c.scales, {});
    ASSERT_TRUE(q.ok()) << q.status();
    for (int64_t g = 0; g < 2; ++g) {
      EXPECT_EQ(q->group(g).scales_factorable, c.factorable) << c.scales[1];
      EXPECT_EQ(q->group(g).scales_min_exponent, c.min_exponent) << c.scales[1];
    }
  }
}

}  // namespace
}  // namespace gemmserve
