// Reads a one-node ONNX model (MatMul or GroupedMatMul) with Debian's ONNX
// protobuf library (libonnx-dev) and turns it into a resident model: the
// node's inputs that are initializers stay on the server (MatMul's B;
// GroupedMatMul's weights and bias), the graph's inputs are what requests
// send, and the graph's and node's names name the tensors.
//
// Initializers may be stored inline (raw_data or the typed fields) or in
// external data files beside the model (ONNX's external data: location,
// offset, length), so weights beyond protobuf's 2 GB limit load. Files are
// read through ModelFiles, which keeps every path inside the version
// directory and refuses what is not a regular file; an initializer's size
// is checked against the data the file holds before it is allocated. Every
// name from the file is a tensor name (ValidateTensorName) or is escaped in
// messages.
//
// Every problem is INVALID_ARGUMENT (NOT_FOUND for a missing file) with a
// message that names the model, the file relative to the model directory and
// what was wrong, never an absolute path:
//
//   GEMMSERVE_ASSIGN_OR_RETURN(auto files, ModelFiles::InDirectory("/models", "moe"));
//   GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Model> m,
//                              LoadOnnxModel("moe", "1", *files, "model.onnx"));
#ifndef GEMMSERVE_SERVER_REPOSITORY_ONNX_MODEL_LOADER_H_
#define GEMMSERVE_SERVER_REPOSITORY_ONNX_MODEL_LOADER_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/core/model.h"
#include "server/models/sharded_layer.h"
#include "server/repository/model_files.h"

namespace gemmserve {

// What a model's config asks of its computation.
struct OnnxLoadOptions {
  // accuracy_level (triton_config.h): 4 runs quantized weights on 8-bit
  // activations; it is refused for a model whose weights are not quantized.
  int accuracy_level = 0;
  // expert_range: the model is a shard of a layer (models/sharded_layer.h).
  std::optional<ExpertRange> expert_range;
  // shards: the model is a sharded layer's router; its experts are not
  // read, and `remote_experts` (null: routers are refused) reaches them.
  std::string shards;
  RemoteExpertsFactory remote_experts;
  Metrics* metrics = nullptr;  // where a router's shard metrics go
};

// `version` is the version directory inside `files`; `filename` the model
// file inside it.
absl::StatusOr<std::unique_ptr<Model>> LoadOnnxModel(const std::string& model_name,
                                                     const std::string& version,
                                                     const ModelFiles& files,
                                                     const std::string& filename,
                                                     const OnnxLoadOptions& options = {});

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_REPOSITORY_ONNX_MODEL_LOADER_H_
