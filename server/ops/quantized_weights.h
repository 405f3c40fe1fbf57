// Resident weights stored as ONNX DequantizeLinear's inputs (issue 17): 8- or
// 4-bit integers [G, K, N] (or [K, N], one group), a scale and an optional
// zero point per tensor, per channel along one axis, or blocked along K. They
// stay quantized; each group is described once as the QuantizedMatrix the
// fused kernel reads (kernels/quantized_gemm.h), and the dequantized weights
// are never materialised.
//
// Make validates the layout against what the kernel will index: the axis,
// the block size, the scale's and zero point's shapes, finite scales, and
// the data's size, so a model file cannot make the kernel read outside them.
//
//   QuantizedWeights::Layout layout;
//   layout.type = QuantizedType::kInt4; layout.shape = {g, k, n};
//   layout.axis = 1; layout.block_size = 32; layout.scale_shape = {g, (k + 31) / 32, n};
//   layout.value_type = DataType::kBF16;
//   GEMMSERVE_ASSIGN_OR_RETURN(QuantizedWeights w,
//       QuantizedWeights::Make(layout, std::move(bytes), std::move(scales), {}));
#ifndef GEMMSERVE_SERVER_OPS_QUANTIZED_WEIGHTS_H_
#define GEMMSERVE_SERVER_OPS_QUANTIZED_WEIGHTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/ops/kernels/quantized_gemm.h"
#include "server/tensor/shape.h"
#include "server/tensor/tensor.h"

namespace gemmserve {

// "INT8", "UINT8", "INT4", "UINT4".
const char* QuantizedTypeName(QuantizedType type);
int QuantizedBits(QuantizedType type);

class QuantizedWeights {
 public:
  struct Layout {
    QuantizedType type = QuantizedType::kInt8;
    Shape shape;             // [G, K, N] or [K, N]
    int64_t axis = 1;        // DequantizeLinear's axis (negative counts from the end)
    int64_t block_size = 0;  // 0: per tensor or per channel
    Shape scale_shape;       // [] or [1]; [shape[axis]]; or blocked: shape with K blocked
    DataType value_type = DataType::kFP32;  // FP32, FP16 or BF16: the output of DequantizeLinear
  };

  QuantizedWeights() = default;
  QuantizedWeights(QuantizedWeights&&) = default;
  QuantizedWeights& operator=(QuantizedWeights&&) = default;

  // `data` holds QuantizedBytes(type, elements) bytes (at least); `scale`
  // and `zero_point` (none: empty) the elements of scale_shape, the zero
  // points as the integers of `type` in floats. INVALID_ARGUMENT naming
  // `weights`, `scale`, `zero_point`, `axis` or `block_size` when they
  // disagree.
  static absl::StatusOr<QuantizedWeights> Make(const Layout& layout, AlignedBuffer data,
                                               std::vector<float> scale,
                                               std::vector<float> zero_point);

  QuantizedType type() const { return layout_.type; }
  DataType value_type() const { return layout_.value_type; }
  const Shape& shape() const { return layout_.shape; }
  const Layout& layout() const { return layout_; }
  int64_t groups() const { return static_cast<int64_t>(groups_.size()); }
  const QuantizedMatrix& group(int64_t g) const { return groups_[static_cast<size_t>(g)]; }
  bool has_zero_point() const { return !zero_point_.empty(); }
  // "per_tensor", "per_channel" or "blocked".
  std::string granularity() const;
  // Bytes a call reads per group it uses: the integers, and the group's
  // scales and zero points as held (FP32).
  int64_t group_bytes() const { return group_bytes_; }
  // Bytes held: the integers, the scales and zero points as FP32, and the
  // integers' copy for 8-bit activations if made.
  int64_t bytes() const;

  // For a model with accuracy_level 4: the integers copied once into the
  // layout of the AVX512-VNNI and AVX-VNNI kernels of 8-bit activations
  // (PackInt8Weights), where one of them runs and the copy costs at most the
  // integers' own size again (Int8PackingCostsLittle); each group's
  // QuantizedMatrix then points at its part. The row-major integers stay
  // (the portable build and the memory accounting read them). Returns
  // whether it packed; RESOURCE_EXHAUSTED if the copy cannot be allocated.
  absl::StatusOr<bool> PackForInt8Activations();
  // The integers, held.
  const AlignedBuffer& data() const { return data_; }

 private:
  Layout layout_;
  AlignedBuffer data_;
  std::vector<float> scale_, zero_point_;
  std::vector<QuantizedMatrix> groups_;
  int64_t group_bytes_ = 0;
  AlignedBuffer int8_packed_;  // PackForInt8Activations's copy
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_QUANTIZED_WEIGHTS_H_
