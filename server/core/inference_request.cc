#include "server/core/inference_request.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gemmserve {

absl::string_view ContentsKindName(ContentsKind kind) {
  switch (kind) {
    case ContentsKind::kNone: return "no contents";
    case ContentsKind::kRaw: return "raw contents";
    case ContentsKind::kBool: return "BOOL contents";
    case ContentsKind::kInt32: return "INT32 contents";
    case ContentsKind::kInt64: return "INT64 contents";
    case ContentsKind::kUint32: return "UINT32 contents";
    case ContentsKind::kUint64: return "UINT64 contents";
    case ContentsKind::kFp32: return "FP32 contents";
    case ContentsKind::kFp64: return "FP64 contents";
    case ContentsKind::kBytes: return "BYTES contents";
  }
  return "?";
}

absl::string_view ContentsName(const InferRequestView& request, ContentsKind kind) {
  return request.contents_name != nullptr ? request.contents_name(kind) : ContentsKindName(kind);
}

absl::StatusOr<std::optional<SharedMemoryRef>> SharedMemoryOf(const SharedMemoryParameters& p,
                                                              absl::string_view what) {
  if (!p.region && !p.byte_size) {
    if (p.offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " has shared_memory_offset without shared_memory_region and byte size"));
    }
    return std::nullopt;
  }
  if (!p.region || !p.byte_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " needs both shared_memory_region and shared_memory_byte_size"));
  }
  return std::optional<SharedMemoryRef>(
      SharedMemoryRef{*p.region, p.offset.value_or(0), *p.byte_size});
}

absl::Status CheckOutputParameter(absl::string_view key) {
  if (key == "classification") {
    return absl::InvalidArgumentError("output parameter 'classification' is not supported");
  }
  return absl::OkStatus();
}

}  // namespace gemmserve
