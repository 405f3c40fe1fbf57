// The model config: Triton's ModelConfig proto (inference::ModelConfig) is
// the one type a load works from, whichever form the config came in:
//  - Triton's JSON form, as a load's `config` parameter carries it
//    (tritonclient's load_model(config=json.dumps({...}))), read by
//    protobuf's own JSON parser (google::protobuf::util::JsonStringToMessage,
//    the mapping Triton uses), so a field name or value protobuf does not know
//    is refused with protobuf's message; then each field is either used,
//    accepted because it changes nothing here, or refused by name because
//    gemmserve cannot do what it asks (CheckConfig);
//  - config.pbtxt text (gemmserve's form, config::ModelConfigFile, whose
//    dynamic_batching block also holds max_batch_rows, max_queue_size,
//    default_timeout_microseconds and max_concurrent_batches), turned into
//    the same message by ConfigFromFile: the queue fields into
//    default_queue_policy, the others into parameters, as Triton's form
//    carries them, then held to the same CheckConfig.
// What the server reports in ModelConfig loads back unchanged: the
// parameters it reports (such as "weights_layout") are kept and checked
// against the loaded model's (CheckParameters), so a misspelt one is
// refused, never ignored.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(inference::ModelConfig config, ParseLoadConfig(text));
//   ... load the model ...
//   GEMMSERVE_RETURN_IF_ERROR(CheckDeclaredTensors(config, model->metadata()));
//   GEMMSERVE_RETURN_IF_ERROR(CheckParameters(config, *model));
#ifndef GEMMSERVE_SERVER_REPOSITORY_TRITON_CONFIG_H_
#define GEMMSERVE_SERVER_REPOSITORY_TRITON_CONFIG_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gemmserve_config.pb.h"
#include "model_config.pb.h"
#include "server/core/model.h"

namespace gemmserve {

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

// instance_group.count is accepted up to this (max_concurrent_batches' limit)
// and changes nothing: gemmserve runs one instance of a model.
inline constexpr int kMaxInstanceCount = 64;

// A load's `config` text in either form: Triton's JSON when its first
// non-blank character is '{', else config.pbtxt text. INVALID_ARGUMENT names
// the form it was read as.
absl::StatusOr<inference::ModelConfig> ParseLoadConfig(absl::string_view text);

// Triton's JSON ModelConfig. INVALID_ARGUMENT, before it is parsed, for JSON
// nested deeper than kMaxConfigNesting or with an array directly inside an
// array (which protobuf would flatten); for JSON protobuf cannot read into a
// ModelConfig; and for a field gemmserve cannot honour (CheckConfig).
absl::StatusOr<inference::ModelConfig> ConfigFromTritonJson(absl::string_view json);

// OK when gemmserve can do what `config` asks; INVALID_ARGUMENT naming the
// first field it cannot, without the form (the callers above add it):
// another platform, backend or runtime; GPU instances, or an instance
// group's count past kMaxInstanceCount, gpus, secondary devices, profiles,
// passive, a host policy or a rate limiter; decoupled; a version policy
// other than the latest version (num_versions 1); an input's format,
// reshape, is_shape_tensor, allow_ragged_batch or is_non_linear_format_io;
// an output's label_filename, reshape, is_shape_tensor or
// is_non_linear_format_io; per-level queue policies; the DELAY timeout
// action; an accuracy_level other than 0 and 4; a gemmserve parameter that is
// not a non-negative integer or lacks a dynamic_batching block. A field at
// its default value is accepted.
absl::Status CheckConfig(const inference::ModelConfig& config);

// config.pbtxt's form as Triton's message (above), held to CheckConfig as the
// JSON form is; INVALID_ARGUMENT starting "config.pbtxt: " naming the field.
absl::StatusOr<inference::ModelConfig> ConfigFromFile(const config::ModelConfigFile& file);

// OK when max_batch_size is 0 and every declared input and output is one of
// the model's, with a datatype it accepts (TYPE_INVALID: any) and the same
// dimensions (-1 on either side matches any), and an input declared optional
// is one the model can go without; INVALID_ARGUMENT naming the first that is
// not.
absl::Status CheckDeclaredTensors(const inference::ModelConfig& config,
                                  const ModelMetadata& metadata);

// OK when every parameter of `config` is gemmserve's (above) or one `model`
// reports (its parameters()); INVALID_ARGUMENT naming the first that is not.
absl::Status CheckParameters(const inference::ModelConfig& config, const Model& model);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_REPOSITORY_TRITON_CONFIG_H_
