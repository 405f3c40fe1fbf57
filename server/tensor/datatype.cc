#include "server/tensor/datatype.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/client_text.h"

namespace gemmserve {

absl::string_view DataTypeName(DataType t) {
  switch (t) {
    case DataType::kBF16: return "BF16";
    case DataType::kFP16: return "FP16";
    case DataType::kFP32: return "FP32";
    case DataType::kFP64: return "FP64";
    case DataType::kINT32: return "INT32";
    case DataType::kINT64: return "INT64";
    case DataType::kUINT32: return "UINT32";
    case DataType::kUINT64: return "UINT64";
  }
  return "?";
}

int64_t DataTypeSize(DataType t) {
  switch (t) {
    case DataType::kBF16:
    case DataType::kFP16: return 2;
    case DataType::kFP32:
    case DataType::kINT32:
    case DataType::kUINT32: return 4;
    case DataType::kFP64:
    case DataType::kINT64:
    case DataType::kUINT64: return 8;
  }
  return 0;
}

int64_t MaxDecimalTextBytes(DataType t) {
  switch (t) {
    case DataType::kINT32:
    case DataType::kUINT32: return 12;
    case DataType::kINT64:
    case DataType::kUINT64: return 21;
    case DataType::kFP64: return 25;  // -2.2250738585072014e-308,
    case DataType::kBF16:
    case DataType::kFP16:
    case DataType::kFP32: return 16;  // -1.17549435e-38,
  }
  return 25;
}

bool IsFloatingPoint(DataType t) {
  return t == DataType::kBF16 || t == DataType::kFP16 || t == DataType::kFP32 ||
         t == DataType::kFP64;
}

bool IsHalfPrecision(DataType t) { return t == DataType::kBF16 || t == DataType::kFP16; }

absl::StatusOr<DataType> ParseDataType(absl::string_view name) {
  for (DataType t : kAllDataTypes) {
    if (DataTypeName(t) == name) return t;
  }
  // Valid in the KServe v2 protocol, but not computed by gemmserve.
  static constexpr absl::string_view kOtherKServeTypes[] = {"BOOL", "UINT8", "UINT16",
                                                            "INT8", "INT16", "BYTES"};
  for (absl::string_view other : kOtherKServeTypes) {
    if (other == name) {
      return absl::InvalidArgumentError(
          absl::StrCat("datatype ", name, " is not supported by gemmserve"));
    }
  }
  // Do not echo arbitrary client bytes at length.
  return absl::InvalidArgumentError(
      absl::StrCat("unknown datatype \"", ClientText(name, 16), "\"",
                   "; expected one of BF16, FP16, FP32, FP64, INT32, INT64, UINT32, UINT64"));
}

}  // namespace gemmserve
