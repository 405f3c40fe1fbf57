#include "server/ops/quantized_weights.h"

#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"

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
  return data_.size() + static_cast<int64_t>((scale_.size() + zero_point_.size()) * sizeof(float));
}

absl::StatusOr<QuantizedWeights> QuantizedWeights::Make(const Layout& layout, AlignedBuffer data,
                                                        std::vector<float> scale,
                                                        std::vector<float> zero_point) {
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
  const int64_t g_count = r == 3 ? w[0] : 1, k = w[r - 2], n = w[r - 1];
  const int64_t needed = QuantizedBytes(layout.type, elements);
  if (data.size() < needed) {
    return absl::InvalidArgumentError(absl::StrCat("weights: ", ShapeToString(w), " of ",
                                                   QuantizedTypeName(layout.type), " needs ",
                                                   needed, " bytes, got ", data.size()));
  }
  if (layout.axis < -r || layout.axis >= r) {
    return absl::InvalidArgumentError(absl::StrCat("axis ", layout.axis, " is outside [", -r, ", ",
                                                   r, ") for weights of rank ", r));
  }
  const int64_t axis = layout.axis < 0 ? layout.axis + r : layout.axis;
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

  // Where group g's scales start, and how W[r, j] steps through them.
  int64_t group_stride = 0, row_stride = 0, col_stride = 0;
  int64_t block_rows = std::max<int64_t>(k, 1);
  Layout out = layout;
  out.axis = axis;
  if (layout.block_size == 0) {
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
    if (!per_tensor) {
      if (axis == r - 1) {
        col_stride = 1;
      } else if (axis == r - 2) {
        row_stride = 1;
        block_rows = 1;
      } else {
        group_stride = 1;  // one scale per group
      }
    }
  } else {
    if (axis != r - 2) {
      return absl::InvalidArgumentError(absl::StrCat("blocked quantization along axis ", axis,
                                                     ": gemmserve serves blocks along K (axis ",
                                                     r - 2, " of ", ShapeToString(w), ")"));
    }
    if (layout.block_size > k) {
      return absl::InvalidArgumentError(
          absl::StrCat("block_size ", layout.block_size, " is above K=", k));
    }
    const int64_t blocks = (k + layout.block_size - 1) / layout.block_size;
    Shape want = w;
    want[axis] = blocks;
    if (ss != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("scale: shape ", ShapeToString(ss), " disagrees with block_size ",
                       layout.block_size, ": weights ", ShapeToString(w), " need ",
                       ShapeToString(want), " (ceil(K / block_size) = ", blocks, ")"));
    }
    block_rows = layout.block_size;
    row_stride = n;
    col_stride = 1;
    group_stride = blocks * n;
  }

  QuantizedWeights q;
  q.layout_ = std::move(out);
  q.data_ = std::move(data);
  q.scale_ = std::move(scale);
  q.zero_point_ = std::move(zero_point);
  const int64_t scales_per_group =
      group_stride == 0 ? scale_count : scale_count / std::max<int64_t>(g_count, 1);
  const int64_t zp_count = q.zero_point_.empty() ? 0 : scales_per_group;
  q.group_bytes_ = QuantizedBytes(q.layout_.type, k * n) +
                   (scales_per_group + zp_count) * static_cast<int64_t>(sizeof(float));
  const bool factorable = ScalesFactorable(q.scale_.data(), static_cast<int64_t>(q.scale_.size()));
  const int min_exponent =
      ScalesMinExponent(q.scale_.data(), static_cast<int64_t>(q.scale_.size()));
  q.groups_.resize(static_cast<size_t>(g_count));
  for (int64_t g = 0; g < g_count; ++g) {
    QuantizedMatrix& m = q.groups_[static_cast<size_t>(g)];
    m.type = q.layout_.type;
    m.data = static_cast<const uint8_t*>(q.data_.data());
    m.first = g * k * n;
    m.k = k;
    m.n = n;
    m.scale = q.scale_.data() + g * group_stride;
    m.zero_point = q.zero_point_.empty() ? nullptr : q.zero_point_.data() + g * group_stride;
    m.block_rows = block_rows;
    m.scale_row_stride = row_stride;
    m.scale_col_stride = col_stride;
    m.value_type = q.layout_.value_type;
    m.scales_factorable = factorable;
    m.scales_min_exponent = min_exponent;
  }
  return q;
}

}  // namespace gemmserve
