// Triton's JSON form of a model config, as a load's `config` parameter carries
// it (tritonclient's load_model(config=json.dumps({...})), Triton's
// RepositoryModelLoad), turned into the config gemmserve loads
// (config::ModelConfigFile, config.pbtxt's type); and the check of the
// tensors a config declares against the model's.
//
// The JSON is read into the ModelConfig proto by protobuf's own JSON parser
// (google::protobuf::util::JsonStringToMessage, the mapping Triton uses), so
// a field name or value protobuf does not know is refused with protobuf's
// message; then each Triton field is either mapped to gemmserve's, accepted
// because it changes nothing here, or refused by name because gemmserve
// cannot do what it asks. What the server reports in ModelConfig loads
// back unchanged: the parameters it reports (such as "weights_layout") are
// kept and checked against the loaded model's (CheckParameters), so a
// misspelt one is refused, never ignored.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(config::ModelConfigFile config, ParseLoadConfig(text));
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

// A load's `config` text in either form: Triton's JSON when its first
// non-blank character is '{', else config.pbtxt text. INVALID_ARGUMENT names
// the form it was read as.
absl::StatusOr<config::ModelConfigFile> ParseLoadConfig(absl::string_view text);

// Triton's JSON ModelConfig. INVALID_ARGUMENT for JSON protobuf cannot read
// into a ModelConfig, and for a field gemmserve cannot honour (named).
absl::StatusOr<config::ModelConfigFile> ConfigFromTritonJson(absl::string_view json);

// The same mapping from the proto (the gRPC form of a ModelConfig).
absl::StatusOr<config::ModelConfigFile> ConfigFromTriton(const inference::ModelConfig& triton);

// OK when max_batch_size is 0 and every declared input and output is one of
// the model's, with a datatype it accepts (TYPE_INVALID: any) and the same
// dimensions (-1 on either side matches any); INVALID_ARGUMENT naming the
// first that is not.
absl::Status CheckDeclaredTensors(const config::ModelConfigFile& config,
                                  const ModelMetadata& metadata);

// OK when every parameter of `config` is one `model` reports (its
// parameters()); INVALID_ARGUMENT naming the first that is not.
absl::Status CheckParameters(const config::ModelConfigFile& config, const Model& model);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_REPOSITORY_TRITON_CONFIG_H_
