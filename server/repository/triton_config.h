// The model config is Triton's ModelConfig (inference::ModelConfig,
// proto/model_config.proto, field for field Triton's), in whichever form it
// comes:
//  - config.pbtxt, its protobuf text format, as Triton writes it, read by
//    protobuf's TextFormat parser (ParseModelConfigFile);
//  - Triton's JSON form, as a load's `config` parameter carries it
//    (tritonclient's load_model(config=json.dumps({...}))), read by
//    protobuf's JSON parser (JsonStringToMessage, the mapping Triton uses).
// A field protobuf does not know is refused with protobuf's message naming
// it; then each field is either used, accepted because it changes nothing
// here, or refused by name because gemmserve cannot do what it asks
// (CheckConfig; docs/models.md has the table). gemmserve's own settings
// (max_batch_rows, max_concurrent_batches, accuracy_level, a layer's) are
// `parameters`, as Triton's backends keep theirs.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(inference::ModelConfig config, ParseLoadConfig(text));
//   GEMMSERVE_ASSIGN_OR_RETURN(std::vector<int64_t> versions,
//                              ServedVersions(config, files.Versions(file)));
//   ... load each version (configured_model.h checks it against the model) ...
#ifndef GEMMSERVE_SERVER_REPOSITORY_TRITON_CONFIG_H_
#define GEMMSERVE_SERVER_REPOSITORY_TRITON_CONFIG_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model_config.pb.h"
#include "server/core/model.h"

namespace gemmserve {

// A model config (config.pbtxt, or a load's `config`) is a few lines;
// anything far larger is not one.
inline constexpr int64_t kMaxModelConfigBytes = int64_t{1} << 20;

// gemmserve's settings among a config's parameters (string values of
// non-negative integers, with a dynamic_batching block): the rows of one
// kernel call (0: no limit) and the batches of the model run at once.
inline constexpr char kMaxBatchRowsParameter[] = "max_batch_rows";
inline constexpr char kMaxConcurrentBatchesParameter[] = "max_concurrent_batches";

// One of those settings as its number; 0 when absent. INVALID_ARGUMENT when
// it is not a non-negative integer.
absl::StatusOr<uint64_t> SettingParameter(const inference::ModelConfig& config, const char* key);

// ONNX Runtime's setting of quantized weights (MatMulNBits, QMoE), under its
// name: "0" (or absent), exact, DequantizeLinear then the op; "4", the
// activations quantized to 8 bits per row and K block and multiplied by
// integer dot products (issue 42). Needs no dynamic_batching block.
inline constexpr char kAccuracyLevelParameter[] = "accuracy_level";

// The config's accuracy_level: 0 or 4. INVALID_ARGUMENT naming it for any
// other value.
absl::StatusOr<int> AccuracyLevel(const inference::ModelConfig& config);

// The deepest nesting of arrays and objects a JSON config may have. Triton's
// ModelConfig needs 6 (a warmup input's dims); protobuf's JSON parser bounds
// objects only, at 100.
inline constexpr int kMaxConfigNesting = 64;

// instance_group's count (all groups together) is how many batches of the
// model may run at once (max_concurrent_batches), up to this.
inline constexpr int kMaxInstanceCount = 64;

// The largest max_batch_size (the batcher's limit on rows, 2^24).
inline constexpr int32_t kMaxBatchSize = int32_t{1} << 24;

// The most versions of one model a version policy may serve at once (each
// holds its own weights).
inline constexpr int kMaxServedVersions = 16;

// The most preferred batch sizes dynamic_batching may list.
inline constexpr int kMaxPreferredBatchSizes = 64;

// The batches of the model that may run at once: instance_group's counts
// added up (a group of count 0 counts 1, as in Triton), or the
// max_concurrent_batches parameter; 1 when neither is set. INVALID_ARGUMENT
// when both are set and differ, or the parameter is over kMaxInstanceCount
// (CheckConfig bounds the groups, and calls this).
absl::StatusOr<int> ConcurrentBatches(const inference::ModelConfig& config);

// The versions `config`'s version_policy serves, ascending, out of those
// `available` (ascending): latest { num_versions } the highest ones (1 when
// no policy is set), all {} every one, specific { versions } exactly those.
// NOT_FOUND when none is available or a specific version is not;
// INVALID_ARGUMENT when the policy would serve more than kMaxServedVersions.
absl::StatusOr<std::vector<int64_t>> ServedVersions(const inference::ModelConfig& config,
                                                    const std::vector<int64_t>& available);

// Parses config.pbtxt text (protobuf's text format of Triton's ModelConfig)
// and holds it to CheckConfig. INVALID_ARGUMENT starting "config.pbtxt: "
// with the parser's line and column, or naming the field; a field of
// gemmserve's old dynamic_batching spelling is named with its Triton form.
absl::StatusOr<inference::ModelConfig> ParseModelConfigFile(absl::string_view text);

// A load's `config` text in either form: Triton's JSON when its first
// non-blank character is '{', else config.pbtxt text. INVALID_ARGUMENT names
// the form it was read as. At most kMaxModelConfigBytes.
absl::StatusOr<inference::ModelConfig> ParseLoadConfig(absl::string_view text);

// Triton's JSON ModelConfig. INVALID_ARGUMENT, before it is parsed, for JSON
// nested deeper than kMaxConfigNesting or with an array directly inside an
// array (which protobuf would flatten); for JSON protobuf cannot read into a
// ModelConfig; and for a field gemmserve cannot honour (CheckConfig).
absl::StatusOr<inference::ModelConfig> ConfigFromTritonJson(absl::string_view json);

// OK when gemmserve can do what `config` asks; INVALID_ARGUMENT naming the
// first field it cannot, without the form (the callers above add it):
// another platform, backend or runtime; sequence_batching or
// ensemble_scheduling; GPU instances, an instance group's gpus, secondary
// devices, profiles, passive, host policy or rate limiter, or counts past
// kMaxInstanceCount; decoupled; a version policy of no version or past
// kMaxServedVersions; batch_input, batch_output, model_operations or
// model_repository_agents; an input's format, reshape, is_shape_tensor,
// allow_ragged_batch or is_non_linear_format_io; an output's label_filename,
// reshape, is_shape_tensor or is_non_linear_format_io; a negative
// max_batch_size; preferred batch sizes that are not positive, pass
// max_batch_size or are too many; per-level queue policies; the DELAY
// timeout action; an accuracy_level other than 0 and 4; a gemmserve
// parameter that is not a non-negative integer, or max_batch_rows or
// max_concurrent_batches without a dynamic_batching block. A field at its default
// value is accepted, and so are those that change nothing here
// (optimization, response_cache, cc_model_filenames, metric_tags,
// model_metrics, preserve_ordering).
absl::Status CheckConfig(const inference::ModelConfig& config);

// OK when every parameter of `config` is gemmserve's (above) or one `model`
// reports (its parameters()) with the value it reports; INVALID_ARGUMENT
// naming the first that is not.
absl::Status CheckParameters(const inference::ModelConfig& config, const Model& model);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_REPOSITORY_TRITON_CONFIG_H_
