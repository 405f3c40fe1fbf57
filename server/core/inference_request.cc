#include "server/core/inference_request.h"

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

}  // namespace gemmserve
