#include "server/ops/quantized_weights.h"

#include "server/ops/kernels/int8_dot.h"
#include "server/ops/kernels/kernel_set.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/tensor/shape.h"

namespace gemmserve {

const char* QuantizedTypeName(QuantizedType type) {
  switch (type) {
    case QuantizedType::kInt8: return "INT8";
    case QuantizedType::kUint8: return "UINT8";
    case QuantizedType::kInt4: return "INT4";
    case QuantizedType::kUint4: return "UINT4";
  }
  return "?";
}

int QuantizedBits(QuantizedType type) {
  return type == QuantizedType::kInt8 || type == QuantizedType::kUint8 ? 8 : 4;
}

std::string QuantizedWeights::granularity() const {
  if (layout_.block_size > 0) return "blocked";
  return layout_.scale_shape.empty() || (layout_.scale_shape.size() == 1 && scale_.size() == 1 &&
                                         layout_.shape[layout_.axis] != 1)
             ? "per_tensor"
             : "per_channel";
}

int64_t QuantizedWeights::bytes() const {
  return data_.size() + int8_packed_.size() +
         static_cast<int64_t>((scale_.size() + zero_point_.size()) * sizeof(float));
}

absl::StatusOr<bool> QuantizedWeights::PackForInt8Activations() {
  if (int8_packed_.size() > 0) return true;  // packed already
  // The two VNNI builds read the packed copy; the others, row-major weights.
  const std::string isa = Kernels().int8_dot_isa;
  if (groups_.empty() || (isa != "avx512_vnni" && isa != "avx_vnni")) return false;
  const int64_t block = Int8ActivationBlock(groups_[0]);
  if (!Int8PackingCostsLittle(groups_[0], block)) return false;
  const int64_t per_group = Int8PackedBytes(groups_[0], block);
  GEMMSERVE_ASSIGN_OR_RETURN(int8_packed_,
                             AlignedBuffer::Allocate(SaturatingMul(per_group, groups())));
  auto* out = static_cast<uint8_t*>(int8_packed_.data());
  for (int64_t g = 0; g < groups(); ++g) {
    QuantizedMatrix& m = groups_[static_cast<size_t>(g)];
    PackInt8Weights(m, block, out + g * per_group);
    m.int8_packed = out + g * per_group;
  }
  return true;
}

namespace {

// How W[r, j] of group g finds its scale: scale[g * group + (r / block_rows)
// * row + j * col].
struct ScaleSteps {
  int64_t group = 0, row = 0, col = 0;
  int64_t block_rows = 1;
};

// Validate: the buffers against the layout (rank, value type, the data's
// size, the axis, the scales' count and values, the zero points' count).
// Returns the axis, made non-negative.
absl::StatusOr<int64_t> CheckBuffers(const QuantizedWeights::Layout& layout, int64_t data_bytes,
                                     const std::vector<float>& scale,
                                     const std::vector<float>& zero_point) {
  const Shape& w = layout.shape;
  const int64_t r = static_cast<int64_t>(w.size());
  if (r != 2 && r != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("weights: expected rank 2 [K, N] or 3 [G, K, N], got ", ShapeToString(w)));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(const int64_t elements, ElementCount(w));
  if (layout.value_type != DataType::kFP32 && layout.value_type != DataType::kFP16 &&
      layout.value_type != DataType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale: dequantized weights must be FP32, FP16 or BF16, got ",
                     DataTypeName(layout.value_type)));
  }
  const int64_t needed = QuantizedBytes(layout.type, elements);
  if (data_bytes < needed) {
    return absl::InvalidArgumentError(absl::StrCat("weights: ", ShapeToString(w), " of ",
                                                   QuantizedTypeName(layout.type), " needs ",
                                                   needed, " bytes, got ", data_bytes));
  }
  if (layout.axis < -r || layout.axis >= r) {
    return absl::InvalidArgumentError(absl::StrCat("axis ", layout.axis, " is outside [", -r, ", ",
                                                   r, ") for weights of rank ", r));
  }
  const Shape& ss = layout.scale_shape;
  GEMMSERVE_ASSIGN_OR_RETURN(const int64_t scale_count, ElementCount(ss));
  if (static_cast<int64_t>(scale.size()) != scale_count) {
    return absl::InvalidArgumentError(absl::StrCat("scale: shape ", ShapeToString(ss), " holds ",
                                                   scale_count, " values, got ", scale.size()));
  }
  if (!zero_point.empty() && zero_point.size() != scale.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("zero_point: ", zero_point.size(), " values, but scale ", ShapeToString(ss),
                     " has ", scale.size(), "; ONNX gives them one shape"));
  }
  for (size_t i = 0; i < scale.size(); ++i) {
    if (!std::isfinite(scale[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("scale: value ", i, " is not finite (", scale[i], ")"));
    }
  }
  if (layout.block_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size ", layout.block_size, " is negative"));
  }
  return layout.axis < 0 ? layout.axis + r : layout.axis;
}

// Per tensor ([] or [1]) or per channel ([w[axis]]), block_size 0.
absl::StatusOr<ScaleSteps> UnblockedSteps(const Shape& w, const Shape& ss, int64_t axis) {
  const int64_t r = static_cast<int64_t>(w.size());
  ScaleSteps steps;
  steps.block_rows = std::max<int64_t>(w[r - 2], 1);
  const bool per_tensor = ss.empty() || (ss.size() == 1 && ss[0] == 1 && w[axis] != 1);
  if (ss.size() == static_cast<size_t>(r)) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size 0 with scale ", ShapeToString(ss),
                     " of the weights' rank: blocked quantization needs block_size >= 1"));
  }
  if (!per_tensor && !(ss.size() == 1 && ss[0] == w[axis])) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale: shape ", ShapeToString(ss),
                     " is neither per tensor ([] or [1]) nor per channel ([", w[axis],
                     "], the weights' axis ", axis, " of ", ShapeToString(w), ")"));
  }
  if (per_tensor) return steps;
  if (axis == r - 1) {
    steps.col = 1;
  } else if (axis == r - 2) {
    steps.row = 1;
    steps.block_rows = 1;
  } else {
    steps.group = 1;  // one scale per group
  }
  return steps;
}

// Blocks of block_size rows along K: scale [G,] ceil(K / block_size), N.
absl::StatusOr<ScaleSteps> BlockedSteps(const Shape& w, const Shape& ss, int64_t axis,
                                        int64_t block_size) {
  const int64_t r = static_cast<int64_t>(w.size());
  const int64_t k = w[r - 2], n = w[r - 1];
  if (axis != r - 2) {
    return absl::InvalidArgumentError(absl::StrCat("blocked quantization along axis ", axis,
                                                   ": gemmserve serves blocks along K (axis ",
                                                   r - 2, " of ", ShapeToString(w), ")"));
  }
  if (block_size > k) {
    return absl::InvalidArgumentError(absl::StrCat("block_size ", block_size, " is above K=", k));
  }
  const int64_t blocks = (k + block_size - 1) / block_size;
  Shape want = w;
  want[axis] = blocks;
  if (ss != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale: shape ", ShapeToString(ss), " disagrees with block_size ",
                     block_size, ": weights ", ShapeToString(w), " need ", ShapeToString(want),
                     " (ceil(K / block_size) = ", blocks, ")"));
  }
  return ScaleSteps{blocks * n, n, 1, block_size};
}

}  // namespace

absl::StatusOr<QuantizedWeights> QuantizedWeights::Make(const Layout& layout, AlignedBuffer data,
                                                        std::vector<float> scale,
                                                        std::vector<float> zero_point) {
  GEMMSERVE_ASSIGN_OR_RETURN(const int64_t axis,
                             CheckBuffers(layout, data.size(), scale, zero_point));
  const Shape& w = layout.shape;
  GEMMSERVE_ASSIGN_OR_RETURN(
      const ScaleSteps steps,
      layout.block_size == 0 ? UnblockedSteps(w, layout.scale_shape, axis)
                             : BlockedSteps(w, layout.scale_shape, axis, layout.block_size));
  const int64_t r = static_cast<int64_t>(w.size());
  const int64_t g_count = r == 3 ? w[0] : 1, k = w[r - 2], n = w[r - 1];
  QuantizedWeights q;
  q.layout_ = layout;
  q.layout_.axis = axis;
  q.data_ = std::move(data);
  q.scale_ = std::move(scale);
  q.zero_point_ = std::move(zero_point);
  const int64_t scale_count = static_cast<int64_t>(q.scale_.size());
  const int64_t scales_per_group =
      steps.group == 0 ? scale_count : scale_count / std::max<int64_t>(g_count, 1);
  const int64_t zp_count = q.zero_point_.empty() ? 0 : scales_per_group;
  q.group_bytes_ = QuantizedBytes(q.layout_.type, k * n) +
                   (scales_per_group + zp_count) * static_cast<int64_t>(sizeof(float));
  const bool factorable = ScalesFactorable(q.scale_.data(), scale_count);
  const int min_exponent = ScalesMinExponent(q.scale_.data(), scale_count);
  q.groups_.resize(static_cast<size_t>(g_count));
  for (int64_t g = 0; g < g_count; ++g) {
    QuantizedMatrix& m = q.groups_[static_cast<size_t>(g)];
    m.type = q.layout_.type;
    m.data = static_cast<const uint8_t*>(q.data_.data());
    m.first = g * k * n;
    m.k = k;
    m.n = n;
    m.scale = q.scale_.data() + g * steps.group;
    m.zero_point = q.zero_point_.empty() ? nullptr : q.zero_point_.data() + g * steps.group;
    m.block_rows = steps.block_rows;
    m.scale_row_stride = steps.row;
    m.scale_col_stride = steps.col;
    m.value_type = q.layout_.value_type;
    m.scales_factorable = factorable;
    m.scales_min_exponent = min_exponent;
  }
  return q;
}

}  // namespace gemmserve
