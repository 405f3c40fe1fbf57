// Model names come from clients (requests, loads, uploads) and from the
// names of repository directories, and they end up in file paths, metric
// labels, log lines and messages. One rule for all of them, applied wherever
// a name enters (infer, metadata, load, unload, the repository scan):
//
//   1 to kMaxModelNameLength characters of A-Z a-z 0-9 _ . -, not starting
//   with '.', and not "_unknown" (the metric label of requests that name no
//   served model).
//
//   GEMMSERVE_RETURN_IF_ERROR(ValidateModelName(request.model_name));
#ifndef GEMMSERVE_SERVER_COMMON_MODEL_NAME_H_
#define GEMMSERVE_SERVER_COMMON_MODEL_NAME_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gemmserve {

inline constexpr size_t kMaxModelNameLength = 128;
inline constexpr char kUnknownModelLabel[] = "_unknown";

// INVALID_ARGUMENT naming the rule, with the name escaped and cut short.
absl::Status ValidateModelName(absl::string_view name);

// Names of the tensors of a model file (ONNX graph inputs and outputs):
// 1 to 256 printable ASCII characters without spaces, so that every message
// naming a tensor can show it as it is.
absl::Status ValidateTensorName(absl::string_view name);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_COMMON_MODEL_NAME_H_
