// Weights that never change (a resident model's), packed once into the
// panels the GEMM micro-kernel reads (kernels/panel_gemm.h), group by group:
// [G, K, N] for a GroupedMatMul, [K, N] (one group) for a MatMul. Requests
// then pack only their own rows. The packed copy replaces the original: the
// caller drops the row-major tensor once Pack succeeds.
//
//   if (PackedWeights::Supports(w.type())) {
//     GEMMSERVE_ASSIGN_OR_RETURN(PackedWeights packed, PackedWeights::Pack(w));
//   }
#ifndef GEMMSERVE_SERVER_OPS_PACKED_WEIGHTS_H_
#define GEMMSERVE_SERVER_OPS_PACKED_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/tensor/datatype.h"
#include "server/tensor/shape.h"
#include "server/tensor/tensor.h"

namespace gemmserve {

class PackedWeights {
 public:
  PackedWeights() = default;

  // The types with panels in this process: FP32 (BLIS's sgemm
  // micro-kernel), BF16 and FP16 where the CPU has AVX-512
  // (bf16_panel_gemm.h). Not FP64: on BLIS's FP64 micro-kernel, which has
  // no tiles of ours for partial token panels, FP64 ran at 0.48-0.85x of
  // the row-major kernels at M <= 64 in one gemmserve-bench run (1.0-1.5x
  // from M = 256), so FP64 experts stay row-major.
  static bool Supports(DataType type);

  // The types whose resident weights are packed at load: those of
  // Supports, BF16 only where its panels are preferred
  // (Bf16PanelsPreferred: vdpbf16ps measured fast, or --bf16_panels=on).
  static bool PackedAtLoad(DataType type);

  // Bytes Pack allocates for weights of `shape` ([G, K, N] or [K, N]),
  // saturating; INVALID_ARGUMENT for another rank or type.
  static absl::StatusOr<int64_t> BytesFor(DataType type, absl::Span<const int64_t> shape);

  // RESOURCE_EXHAUSTED if the packed copy cannot be allocated.
  static absl::StatusOr<PackedWeights> Pack(const Tensor& weights);

  DataType type() const { return type_; }
  const Shape& shape() const { return shape_; }  // as given: [G, K, N] or [K, N]
  int64_t groups() const { return shape_.size() == 3 ? shape_[0] : 1; }
  int64_t bytes() const { return buffer_.size(); }
  const void* data() const { return buffer_.data(); }
  // The panels of group g, in [0, groups()).
  const void* group(int64_t g) const {
    return static_cast<const uint8_t*>(buffer_.data()) + g * group_bytes_;
  }
  // BF16: Bf16MinExponent of group g's weights (the native path's guard).
  int min_exponent(int64_t g) const {
    return min_exponent_.empty() ? 0 : min_exponent_[static_cast<size_t>(g)];
  }

 private:
  DataType type_ = DataType::kFP32;
  Shape shape_;
  int64_t group_bytes_ = 0;
  AlignedBuffer buffer_;
  std::vector<int> min_exponent_;  // BF16 only
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_PACKED_WEIGHTS_H_
