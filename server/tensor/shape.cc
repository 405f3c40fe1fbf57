#include "server/tensor/shape.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"

namespace gemmserve {

absl::StatusOr<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t out;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &out)) {
    return absl::InvalidArgumentError(absl::StrCat("size ", a, " x ", b, " overflows int64"));
  }
  return out;
}

absl::StatusOr<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t out;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &out)) {
    return absl::InvalidArgumentError(absl::StrCat("size ", a, " + ", b, " overflows int64"));
  }
  return out;
}

int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) return std::numeric_limits<int64_t>::max();
  return out;
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_add_overflow(a, b, &out)) return std::numeric_limits<int64_t>::max();
  return out;
}

int64_t SaturatingBytes(int64_t elements, DataType t) {
  return SaturatingMul(elements, DataTypeSize(t));
}

absl::StatusOr<int64_t> ElementCount(absl::Span<const int64_t> shape) {
  if (static_cast<int64_t>(shape.size()) > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", shape.size(), " exceeds the maximum rank ", kMaxRank));
  }
  int64_t count = 1;
  bool zero = false;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension ", d, " in shape ", ShapeToString(shape)));
    }
    if (d == 0) zero = true;
  }
  // A shape with a zero dimension has no elements however large the others
  // are, but the others must still fit: numpy rejects [0, 2^62, 2^62] too.
  for (int64_t d : shape) {
    if (d == 0) continue;
    if (__builtin_mul_overflow(count, d, &count)) {
      return absl::InvalidArgumentError(
          absl::StrCat("element count of shape ", ShapeToString(shape), " overflows int64"));
    }
  }
  return zero ? 0 : count;
}

absl::StatusOr<int64_t> ByteSize(absl::Span<const int64_t> shape, DataType t) {
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t count, ElementCount(shape));
  int64_t bytes;
  if (__builtin_mul_overflow(count, DataTypeSize(t), &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte size of shape ", ShapeToString(shape), " overflows int64"));
  }
  return bytes;
}

std::string ShapeToString(absl::Span<const int64_t> shape) {
  constexpr size_t kShown = 8;
  if (shape.size() <= kShown) return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
  return absl::StrCat("[", absl::StrJoin(shape.subspan(0, kShown), ","), ",... (", shape.size(),
                      " dims)]");
}

absl::StatusOr<Shape> BroadcastShapes(absl::Span<const int64_t> a, absl::Span<const int64_t> b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Right-aligned: position i of the result is a[i - (rank - a.size())].
    const int64_t da = i + a.size() >= rank ? a[i + a.size() - rank] : 1;
    const int64_t db = i + b.size() >= rank ? b[i + b.size() - rank] : 1;
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("batch dimensions ", ShapeToString(a), " and ",
                                                     ShapeToString(b), " do not broadcast"));
    }
  }
  return out;
}

}  // namespace gemmserve
