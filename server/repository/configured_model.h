// ConfiguredModel: a model served as its ModelConfig (Triton's, validated by
// CheckConfig) says, and the config the ModelConfig RPC answers.
//
//  - The config's tensors are held against the model's (CheckDeclaredTensors):
//    each declared input and output is one of the model's, of a datatype it
//    accepts, with dimensions that agree. A declared dimension narrows one
//    the model leaves variable, so requests are held to the config's dims.
//  - max_batch_size > 0 is Triton's implicit batch dimension: dims name each
//    tensor without its first dimension, which must be variable in the model
//    and is reported as -1; a request's first dimension is its batch size,
//    the same for every input and at most max_batch_size, and the dynamic
//    batcher counts batches in it (PreparedInference::rows).
//  - The answer is the config as loaded, completed with what the model says
//    (Triton's auto-complete): platform and backend, the version policy, the
//    tensors not declared and the datatypes not given, the instance group,
//    the model file and the model's parameters. Completing it again changes
//    nothing, so it loads back to an equal config.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Model> served,
//                              ConfiguredModel::Make(std::move(model), config, "model.onnx"));
//   const inference::ModelConfig* answer = LoadedConfig(*served);
#ifndef GEMMSERVE_SERVER_REPOSITORY_CONFIGURED_MODEL_H_
#define GEMMSERVE_SERVER_REPOSITORY_CONFIGURED_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model_config.pb.h"
#include "server/core/model.h"

namespace gemmserve {

// What Make checks of the config's tensors, on its own (for tests and
// tools): OK when every declared input and output is one of the model's, with a
// datatype it accepts (TYPE_INVALID: any) and dimensions that agree (-1 on
// either side matches any; with max_batch_size > 0 the dims follow a batch
// dimension the model must leave variable, for every tensor), and an input
// declared optional is one the model can go without; INVALID_ARGUMENT naming
// the first that is not.
absl::Status CheckDeclaredTensors(const inference::ModelConfig& config,
                                  const ModelMetadata& metadata);

class ConfiguredModel final : public Model {
 public:
  // `inner` served as `config` (CheckConfig passed) says; INVALID_ARGUMENT
  // when its tensors do not fit the model's (CheckDeclaredTensors).
  // `model_file` is the file it was loaded from ("" for a built-in model).
  // The answer's name is the model's.
  static absl::StatusOr<std::unique_ptr<ConfiguredModel>> Make(std::unique_ptr<Model> inner,
                                                               inference::ModelConfig config,
                                                               absl::string_view model_file);

  const ModelMetadata& metadata() const override { return metadata_; }
  // With max_batch_size > 0, INVALID_ARGUMENT for inputs whose first
  // dimensions differ or pass it; then the model's own checks.
  absl::StatusOr<std::unique_ptr<PreparedInference>> Prepare(
      const BoundInputs& inputs) const override;
  // `batch` holds what this model's Prepare made (with max_batch_size > 0,
  // its wrappers, unwrapped here for the inner model).
  std::vector<InferOutputs> RunBatch(absl::Span<PreparedInference* const> batch,
                                     int threads) const override;
  void TouchResident() const override { inner_->TouchResident(); }
  absl::Status Available() const override { return inner_->Available(); }
  std::vector<std::pair<std::string, std::string>> parameters() const override {
    return inner_->parameters();
  }

  // The config as loaded, completed (above).
  const inference::ModelConfig& config() const { return config_; }

 private:
  ConfiguredModel(std::unique_ptr<Model> inner, ModelMetadata metadata,
                  inference::ModelConfig config);

  std::unique_ptr<Model> inner_;
  ModelMetadata metadata_;
  inference::ModelConfig config_;
};

// The completed config of a model installed as a ConfiguredModel; null for
// any other.
const inference::ModelConfig* LoadedConfig(const Model& model);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_REPOSITORY_CONFIGURED_MODEL_H_
