#include "server/ops/packed_weights.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/ops/kernels/panel_gemm.h"

namespace gemmserve {

bool PackedWeights::Supports(DataType type) {
  if (IsHalfPrecision(type)) return Bf16PanelsSupported();
  return type == DataType::kFP32;
}

bool PackedWeights::PackedAtLoad(DataType type) {
  if (type == DataType::kBF16) return Bf16PanelsPreferred();
  return Supports(type);
}

absl::StatusOr<int64_t> PackedWeights::BytesFor(DataType type, absl::Span<const int64_t> shape) {
  if (!Supports(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("packed weights: no panels for ", DataTypeName(type)));
  }
  if (shape.size() != 2 && shape.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("packed weights: expected [K, N] or [G, K, N], got ", ShapeToString(shape)));
  }
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("packed weights: negative dimension");
  }
  const int64_t groups = shape.size() == 3 ? shape[0] : 1;
  const int64_t k = shape[shape.size() - 2], n = shape[shape.size() - 1];
  if (IsHalfPrecision(type)) {  // BF16 pairs pad K to even
    const int64_t per_panel =
        SaturatingMul(type == DataType::kBF16 ? SaturatingAdd(k, 1) : k, kBf16PanelLanes);
    return SaturatingMul(SaturatingMul(SaturatingMul(groups, Bf16PanelCount(n)), per_panel), 2);
  }
  const PanelGeometry& g = Fp32PanelGeometry();
  const int64_t panels = (n + g.weight_lanes - 1) / g.weight_lanes;
  const int64_t per_panel = SaturatingAdd(SaturatingMul(k, g.weight_ld), 16);
  return SaturatingMul(SaturatingMul(SaturatingMul(groups, panels), per_panel), DataTypeSize(type));
}

absl::StatusOr<PackedWeights> PackedWeights::Pack(const Tensor& weights) {
  GEMMSERVE_ASSIGN_OR_RETURN(const int64_t bound, BytesFor(weights.type(), weights.shape()));
  const Shape& shape = weights.shape();
  const int64_t k = shape[shape.size() - 2], n = shape[shape.size() - 1];
  PackedWeights out;
  out.type_ = weights.type();
  out.shape_ = shape;
  const int64_t es = DataTypeSize(weights.type());
  const bool bf16 = out.type_ == DataType::kBF16;
  const bool fp16 = out.type_ == DataType::kFP16;
  out.group_bytes_ = bf16   ? Bf16PanelCount(n) * Bf16PanelStride(k) * es
                     : fp16 ? Bf16PanelCount(n) * Fp16PanelStride(k) * es
                            : PackedWeightElements(Fp32PanelGeometry(), k, n) * es;
  const int64_t bytes = out.groups() * out.group_bytes_;
  if (bytes > bound) return absl::InternalError("packed weights: size above its bound");
  GEMMSERVE_ASSIGN_OR_RETURN(out.buffer_, AlignedBuffer::Allocate(bytes));
  if (bf16) out.min_exponent_.resize(static_cast<size_t>(out.groups()));
  for (int64_t group = 0; group < out.groups(); ++group) {
    const auto* src = static_cast<const uint8_t*>(weights.raw_data()) + group * k * n * es;
    auto* dst = static_cast<uint8_t*>(out.buffer_.data()) + group * out.group_bytes_;
    if (bf16) {
      const auto* w = reinterpret_cast<const uint16_t*>(src);
      PackBf16Panels(w, n, k, n, reinterpret_cast<uint16_t*>(dst));
      out.min_exponent_[static_cast<size_t>(group)] = Bf16MinExponent(w, k * n);
      continue;
    }
    if (fp16) {
      PackFp16Panels(reinterpret_cast<const uint16_t*>(src), n, k, n,
                     reinterpret_cast<uint16_t*>(dst));
      continue;
    }
    PackWeightPanels(Fp32PanelGeometry(), reinterpret_cast<const float*>(src), n, k, n,
                     reinterpret_cast<float*>(dst));
  }
  return out;
}

}  // namespace gemmserve
