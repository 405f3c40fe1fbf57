#include "server/tensor/tensor.h"

#include <cstring>
#include <new>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/allocation.h"
#include "server/common/status_macros.h"

namespace gemmserve {

namespace {
// Where TouchMemory's sum goes, so the reads cannot be optimised away.
volatile uint8_t touch_sink;
}  // namespace

void TouchMemory(const void* data, int64_t bytes) {
  const auto* p = static_cast<const volatile uint8_t*>(data);
  uint8_t sum = 0;
  for (int64_t i = 0; i < bytes; i += 64) sum = static_cast<uint8_t>(sum + p[i]);
  touch_sink = sum;
}

absl::StatusOr<AlignedBuffer> AlignedBuffer::Allocate(int64_t bytes) {
  AlignedBuffer buffer;
  if (bytes < 0) return absl::InvalidArgumentError("negative allocation size");
  if (bytes == 0) return buffer;
  // aligned_alloc wants a multiple of the alignment.
  const int64_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < bytes) return absl::ResourceExhaustedError("allocation size overflows");
  void* p = std::aligned_alloc(kAlignment, static_cast<size_t>(rounded));
  if (p == nullptr) {
    return OutOfMemoryError(absl::StrCat("out of memory allocating ", bytes, " bytes"));
  }
  buffer.data_.reset(p);
  buffer.size_ = bytes;
  return buffer;
}

absl::StatusOr<Tensor> Tensor::Allocate(DataType type, Shape shape) {
  Tensor t;
  GEMMSERVE_ASSIGN_OR_RETURN(t.num_elements_, ElementCount(shape));
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t bytes, ByteSize(shape, type));
  GEMMSERVE_ASSIGN_OR_RETURN(t.buffer_, AlignedBuffer::Allocate(bytes));
  t.type_ = type;
  t.shape_ = std::move(shape);
  return t;
}

absl::Status Tensor::Reshape(Shape shape) {
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t elements, ElementCount(shape));
  if (elements != num_elements_) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape ", ShapeToString(shape_), " to ", ShapeToString(shape)));
  }
  shape_ = std::move(shape);
  return absl::OkStatus();
}

absl::Status Tensor::Truncate(Shape shape) {
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t elements, ElementCount(shape));
  if (elements > num_elements_) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot truncate ", ShapeToString(shape_), " to ", ShapeToString(shape)));
  }
  buffer_.Shrink(elements * DataTypeSize(type_));
  num_elements_ = elements;
  shape_ = std::move(shape);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Tensor::Zeros(DataType type, Shape shape) {
  GEMMSERVE_ASSIGN_OR_RETURN(Tensor t, Allocate(type, std::move(shape)));
  if (t.byte_size() > 0) std::memset(t.raw_data(), 0, static_cast<size_t>(t.byte_size()));
  return t;
}

}  // namespace gemmserve
