// Overflow-checked shape arithmetic. Every dimension that arrives from the wire
// is an int64_t and goes through these helpers before anything is sized or
// allocated from it, so a hostile shape yields INVALID_ARGUMENT, never a wrapped
// count or an oversized allocation.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(int64_t n, ElementCount(shape));
//   GEMMSERVE_ASSIGN_OR_RETURN(int64_t bytes, ByteSize(shape, DataType::kFP32));
#ifndef GEMMSERVE_SERVER_TENSOR_SHAPE_H_
#define GEMMSERVE_SERVER_TENSOR_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/tensor/datatype.h"

namespace gemmserve {

using Shape = std::vector<int64_t>;

// numpy's own limit on the number of dimensions; longer shapes are rejected
// before any per-dimension work.
inline constexpr int64_t kMaxRank = 32;

// a * b for non-negative operands; INVALID_ARGUMENT on int64 overflow.
absl::StatusOr<int64_t> CheckedMul(int64_t a, int64_t b);
absl::StatusOr<int64_t> CheckedAdd(int64_t a, int64_t b);

// a * b and a + b for non-negative operands, saturating at INT64_MAX: for
// costs and counters, where a value too large to count is over every limit.
int64_t SaturatingMul(int64_t a, int64_t b);
int64_t SaturatingAdd(int64_t a, int64_t b);
// SaturatingMul(elements, DataTypeSize(t)).
int64_t SaturatingBytes(int64_t elements, DataType t);

// Product of the dimensions. INVALID_ARGUMENT for a rank over kMaxRank, a
// negative dimension or a product that overflows int64.
absl::StatusOr<int64_t> ElementCount(absl::Span<const int64_t> shape);

// ElementCount(shape) * DataTypeSize(t), overflow-checked.
absl::StatusOr<int64_t> ByteSize(absl::Span<const int64_t> shape, DataType t);

// "[2,3,4]"; long shapes are abbreviated.
std::string ShapeToString(absl::Span<const int64_t> shape);

// numpy broadcasting of two shapes (right-aligned, 1 stretches). Returns
// INVALID_ARGUMENT naming both shapes when they do not broadcast.
absl::StatusOr<Shape> BroadcastShapes(absl::Span<const int64_t> a, absl::Span<const int64_t> b);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_TENSOR_SHAPE_H_
