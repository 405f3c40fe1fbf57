// perf_analyzer's input data file (`gemmserve-cli perf --input_data=FILE.json`):
//
//   {"data": [
//     {"A": [1, 2, 3, 4, 5, 6], "B": {"content": [1, 0, 0, 1], "shape": [2, 2]}},
//     {"A": {"b64": "AACAPwAAAEA...", "shape": [1, 2]}, "B": [[1, 0], [0, 1]]}
//   ]}
//
// Each entry of "data" is one request, sent in turn. An input's value is its
// elements row-major (a flat or nested array of JSON numbers), an object with
// "content" (such an array) and an optional "shape", or an object with "b64"
// (its raw little-endian bytes, base64) and an optional "shape". Without a
// "shape", an input's shape is --shape's for it, else the model's with its
// one variable dimension set from the element count.
//
// Checked against the model's metadata and config, before anything large is
// allocated: every required input present in every entry and no unknown one;
// numbers of the input's datatype (integers in range for the integer types);
// the element count equal to the shape's; at most 100000 entries and
// kPerfPoolMaxBytes of tensors in all. "validation_data" (outputs to check)
// is refused: perf does not read answers. INVALID_ARGUMENT naming the entry,
// the input and the fault.
#ifndef GEMMSERVE_CLIENT_CLI_PERF_INPUT_DATA_H_
#define GEMMSERVE_CLIENT_CLI_PERF_INPUT_DATA_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cli/perf.h"
#include "client/cpp/host_tensor.h"
#include "grpc_service.pb.h"
#include "model_config.pb.h"

namespace gemmserve::client {

inline constexpr int64_t kPerfMaxInputDataEntries = 100000;
// The file itself: JSON text of up to 1 GiB.
inline constexpr int64_t kPerfMaxInputDataFileBytes = int64_t{1} << 30;

// The requests of `json` (the file's text), one per entry, in order.
// `config` may be null.
absl::StatusOr<std::vector<std::vector<HostTensor>>> ParsePerfInputData(
    absl::string_view json, const inference::ModelMetadataResponse& metadata,
    const inference::ModelConfig* config, const PerfOptions& options);

// Reads the file at `path` (at most kPerfMaxInputDataFileBytes) and parses
// it. NOT_FOUND or PERMISSION_DENIED for a file that cannot be read.
absl::StatusOr<std::vector<std::vector<HostTensor>>> ReadPerfInputData(
    const std::string& path, const inference::ModelMetadataResponse& metadata,
    const inference::ModelConfig* config, const PerfOptions& options);

}  // namespace gemmserve::client

#endif  // GEMMSERVE_CLIENT_CLI_PERF_INPUT_DATA_H_
