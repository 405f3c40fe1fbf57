#include "client/cpp/random_tensor.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"

namespace gemmserve::client {
namespace {

template <typename T>
void Store(int64_t index, T value, std::string* bytes) {
  std::memcpy(bytes->data() + index * static_cast<int64_t>(sizeof(T)), &value, sizeof value);
}

void StoreFloat(DataType type, int64_t index, double value, std::string* bytes) {
  switch (type) {
    case DataType::kBF16: return Store(index, FloatToBFloat16(static_cast<float>(value)), bytes);
    case DataType::kFP16: return Store(index, FloatToHalf(static_cast<float>(value)), bytes);
    case DataType::kFP32: return Store(index, static_cast<float>(value), bytes);
    default: return Store(index, value, bytes);
  }
}

void StoreInt(DataType type, int64_t index, int64_t value, std::string* bytes) {
  switch (type) {
    case DataType::kINT32: return Store(index, static_cast<int32_t>(value), bytes);
    case DataType::kUINT32: return Store(index, static_cast<uint32_t>(value), bytes);
    case DataType::kUINT64: return Store(index, static_cast<uint64_t>(value), bytes);
    default: return Store(index, value, bytes);
  }
}

// One past the largest index `type` can hold.
int64_t IndexLimit(DataType type) {
  switch (type) {
    case DataType::kINT32: return int64_t{1} << 31;
    case DataType::kUINT32: return int64_t{1} << 32;
    default: return INT64_MAX;
  }
}

}  // namespace

absl::StatusOr<HostTensor> RandomTensor(std::string name, DataType type, std::vector<int64_t> shape,
                                        std::mt19937_64& rng, int64_t groups) {
  GEMMSERVE_ASSIGN_OR_RETURN(const int64_t bytes, ByteSize(shape, type));
  if (bytes > kMaxRandomTensorBytes) {
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "': ", bytes,
                                                   " bytes of random data is over the limit of ",
                                                   kMaxRandomTensorBytes));
  }
  if (groups < 0 || (groups > 0 && (IsFloatingPoint(type) || groups > IndexLimit(type)))) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", name, "': ", groups, " groups do not fit ", DataTypeName(type)));
  }
  const int64_t count = bytes / DataTypeSize(type);
  HostTensor tensor{std::move(name), std::string(DataTypeName(type)), std::move(shape), ""};
  tensor.bytes.resize(bytes);
  if (groups > 0) {
    std::uniform_int_distribution<int64_t> index(0, groups - 1);
    for (int64_t i = 0; i < count; ++i) StoreInt(type, i, index(rng), &tensor.bytes);
  } else if (IsFloatingPoint(type)) {
    std::uniform_real_distribution<double> real(-1.0, 1.0);
    for (int64_t i = 0; i < count; ++i) StoreFloat(type, i, real(rng), &tensor.bytes);
  } else {
    const bool is_signed = type == DataType::kINT32 || type == DataType::kINT64;
    std::uniform_int_distribution<int64_t> small(is_signed ? -8 : 0, 8);
    for (int64_t i = 0; i < count; ++i) StoreInt(type, i, small(rng), &tensor.bytes);
  }
  return tensor;
}

}  // namespace gemmserve::client
