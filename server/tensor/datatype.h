// Element datatypes of the KServe v2 protocol that gemmserve computes with.
//
// The protocol names datatypes by string ("FP32", "BF16", ...). ParseDataType
// tells apart a name that is not a KServe datatype at all from one that is
// valid on the wire but that gemmserve does not compute with (e.g. "INT8"), so
// that error messages can say which.
//
//   absl::StatusOr<DataType> t = ParseDataType("FP16");
//   int64_t bytes = DataTypeSize(*t);  // 2
#ifndef GEMMSERVE_SERVER_TENSOR_DATATYPE_H_
#define GEMMSERVE_SERVER_TENSOR_DATATYPE_H_

#include <cstdint>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace gemmserve {

enum class DataType : uint8_t {
  kBF16,
  kFP16,
  kFP32,
  kFP64,
  kINT32,
  kINT64,
  kUINT32,
  kUINT64,
};

inline constexpr DataType kAllDataTypes[] = {
    DataType::kBF16,  DataType::kFP16,  DataType::kFP32,   DataType::kFP64,
    DataType::kINT32, DataType::kINT64, DataType::kUINT32, DataType::kUINT64,
};

// The KServe name: "BF16", "FP32", ...
absl::string_view DataTypeName(DataType t);

// Bytes per element.
int64_t DataTypeSize(DataType t);

// Bytes of one element written as shortest round-trip decimal text (JSON)
// with its separator, at most: "-2147483648," is 12 for INT32; FP32 and the
// half types (written as the float they widen to) 16; FP64 25.
int64_t MaxDecimalTextBytes(DataType t);

bool IsFloatingPoint(DataType t);
bool IsHalfPrecision(DataType t);  // FP16 or BF16

// INVALID_ARGUMENT for a string that is no KServe datatype, and for a KServe
// datatype gemmserve does not support (the message says which).
absl::StatusOr<DataType> ParseDataType(absl::string_view name);

// Maps a C++ element type to its DataType (floating and integer types only;
// the half types are stored as uint16_t bits and have no mapping).
template <typename T>
struct DataTypeOf;
template <>
struct DataTypeOf<float> {
  static constexpr DataType value = DataType::kFP32;
};
template <>
struct DataTypeOf<double> {
  static constexpr DataType value = DataType::kFP64;
};
template <>
struct DataTypeOf<int32_t> {
  static constexpr DataType value = DataType::kINT32;
};
template <>
struct DataTypeOf<int64_t> {
  static constexpr DataType value = DataType::kINT64;
};
template <>
struct DataTypeOf<uint32_t> {
  static constexpr DataType value = DataType::kUINT32;
};
template <>
struct DataTypeOf<uint64_t> {
  static constexpr DataType value = DataType::kUINT64;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_TENSOR_DATATYPE_H_
