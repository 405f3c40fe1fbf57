#include "server/core/inference_request.h"

namespace gemmserve {

absl::string_view ContentsKindName(ContentsKind kind) {
  switch (kind) {
    case ContentsKind::kNone: return "no contents";
    case ContentsKind::kRaw: return "raw_input_contents";
    case ContentsKind::kBool: return "bool_contents";
    case ContentsKind::kInt32: return "int_contents";
    case ContentsKind::kInt64: return "int64_contents";
    case ContentsKind::kUint32: return "uint_contents";
    case ContentsKind::kUint64: return "uint64_contents";
    case ContentsKind::kFp32: return "fp32_contents";
    case ContentsKind::kFp64: return "fp64_contents";
    case ContentsKind::kBytes: return "bytes_contents";
  }
  return "?";
}

}  // namespace gemmserve
