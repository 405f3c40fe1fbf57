// What the resident models (resident_models.h, moe_layer_model.h) share:
// their platform name, the packing of weights at load, the model parameters
// of quantized weights, and the bookkeeping of a batch's rows.
#ifndef GEMMSERVE_SERVER_MODELS_RESIDENT_COMMON_H_
#define GEMMSERVE_SERVER_MODELS_RESIDENT_COMMON_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/core/model.h"
#include "server/ops/packed_weights.h"
#include "server/ops/quantized_weights.h"
#include "server/tensor/tensor.h"

namespace gemmserve {

// ModelMetadata::platform of every model loaded from an ONNX file.
inline constexpr char kResidentPlatform[] = "gemmserve_onnx";

// Hands request i its own consecutive rows of `all` (row_bytes per row),
// shaped as it planned: parts[i] = (rows, output shape). The rows were sized
// from the same plans, so a part that does not fit is a fault of ours
// (INTERNAL), never a read past `all`. A lone request takes `all` itself.
absl::Status SplitRows(Tensor all, int64_t row_bytes,
                       const std::vector<std::pair<int64_t, Shape>>& parts,
                       const std::string& output_name, std::vector<InferOutputs>* results);

// A request against resident weights holds its rows of the batch's
// concatenated input, and its output rows twice: in the batch's output and in
// its own copy of them (SplitRows), plus its share of the work.
int64_t ResidentHeldBytes(int64_t input_bytes, int64_t output_bytes, int64_t work_bytes);

// Runs `together`, which answers each request of the batch in its slot of
// the results (an output, or an error of that request's own). If it fails as
// a whole (or memory is denied), every request it has not answered gets that
// status; a request left unanswered after success gets INTERNAL.
std::vector<InferOutputs> RunRowsTogether(
    size_t batch_size, const std::function<absl::Status(std::vector<InferOutputs>*)>& together);

// The request's indices, INT32 or INT64 at any alignment on the wire, as
// int64 at `dst` (count of them).
void WidenIndices(const BoundInput& indices, int64_t count, int64_t* dst);

// The quantization of resident weights, as model parameters (ModelConfig
// and ModelMetadata): "quantization" INT4, "bits" 4, "block_size" 32 (0 when
// not blocked), "granularity", "zero_point", and "weight_bytes_per_group",
// the bytes one call reads for each group it uses.
void AddQuantizationParameters(const QuantizedWeights& q,
                               std::vector<std::pair<std::string, std::string>>* p);

// accuracy_level 4 (8-bit activations) for weights `quantized` (null: not
// quantized), named `what` in messages: INVALID_ARGUMENT unless they are
// quantized in blocks of at most kInt8MaxBlock rows (or per channel). 0 is
// always OK.
absl::Status CheckAccuracyLevel(int level, const QuantizedWeights* quantized, const char* what);

// The model parameter reporting it, for quantized weights.
std::pair<std::string, std::string> AccuracyLevelParameter(int level);

// Resident weights that the micro-kernels can read from panels, packed once
// at load (requests then pack only their own rows); none where they stay
// row-major, or where panels would hold over half as much again as the
// row-major tensor (N much narrower than a panel). The time packing took is
// logged (a measurement of the load, not a fact of the model).
absl::StatusOr<std::optional<PackedWeights>> PackAtLoad(const Tensor& weights);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_MODELS_RESIDENT_COMMON_H_
