// Tensor: an owned, 64-byte aligned, row-major buffer with a datatype and a
// shape. Kernels never compute on bytes where they arrived in a message (raw
// contents may sit at any offset); requests are copied into Tensors first.
//
// Allocation failure is a value, not a crash:
//
//   GEMMSERVE_ASSIGN_OR_RETURN(Tensor y, Tensor::Allocate(DataType::kFP32, {m, n}));
//   float* out = y.data<float>();
#ifndef GEMMSERVE_SERVER_TENSOR_TENSOR_H_
#define GEMMSERVE_SERVER_TENSOR_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/tensor/datatype.h"
#include "server/tensor/shape.h"

namespace gemmserve {

// 64-byte aligned heap storage; the unit of every allocation the compute path
// makes, so that an out-of-memory is reported as RESOURCE_EXHAUSTED.
// Reads one word of every cache line of [data, data + bytes), so that memory
// a model keeps resident is brought in before its first request (model
// warmup): a resident expert no request has read yet was measured ten times
// slower on its first use.
void TouchMemory(const void* data, int64_t bytes);

class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 64;

  AlignedBuffer() = default;
  // RESOURCE_EXHAUSTED when the memory cannot be had. Zero bytes is valid.
  static absl::StatusOr<AlignedBuffer> Allocate(int64_t bytes);

  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  int64_t size() const { return size_; }
  // Fewer bytes in use; the storage is kept. `bytes` must be at most size().
  void Shrink(int64_t bytes) { size_ = bytes; }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> data_;
  int64_t size_ = 0;
};

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised storage. INVALID_ARGUMENT for a bad shape, RESOURCE_EXHAUSTED
  // when memory runs out.
  static absl::StatusOr<Tensor> Allocate(DataType type, Shape shape);
  // Zero-filled storage.
  static absl::StatusOr<Tensor> Zeros(DataType type, Shape shape);

  // The same elements under another shape of equal element count (a view of
  // rows as [M, S, N], say); INVALID_ARGUMENT otherwise.
  absl::Status Reshape(Shape shape);
  // The first elements under a shape of at most as many (the rows of a batch
  // that are used); the storage is kept. INVALID_ARGUMENT for more elements.
  absl::Status Truncate(Shape shape);

  DataType type() const { return type_; }
  const Shape& shape() const { return shape_; }
  int64_t num_elements() const { return num_elements_; }
  int64_t byte_size() const { return buffer_.size(); }

  template <typename T>
  T* data() {
    return static_cast<T*>(buffer_.data());
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(buffer_.data());
  }
  void* raw_data() { return buffer_.data(); }
  const void* raw_data() const { return buffer_.data(); }

  absl::Span<const uint8_t> bytes() const {
    return {static_cast<const uint8_t*>(buffer_.data()), static_cast<size_t>(buffer_.size())};
  }

 private:
  DataType type_ = DataType::kFP32;
  Shape shape_;
  int64_t num_elements_ = 0;
  AlignedBuffer buffer_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_TENSOR_TENSOR_H_
