// Reads a one-node ONNX model (MatMul or GroupedMatMul) with Debian's ONNX
// protobuf library (libonnx-dev) and turns it into a resident model: the
// node's inputs that are initializers stay on the server (MatMul's B;
// GroupedMatMul's weights and bias), the graph's inputs are what requests
// send, and the graph's and node's names name the tensors.
//
// Initializers may be stored inline (raw_data or the typed fields) or in
// external data files beside the model (ONNX's external data: location,
// offset, length), so weights beyond protobuf's 2 GB limit load. External
// locations must stay inside the version directory.
//
// Every problem is INVALID_ARGUMENT (NOT_FOUND for a missing file) with a
// message that names the model, the file relative to the model directory and
// what was wrong, never an absolute path:
//
//   GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Model> m,
//                              LoadOnnxModel("moe", "1", "/models/moe/1", "model.onnx"));
#ifndef GEMMSERVE_SERVER_REPOSITORY_ONNX_MODEL_LOADER_H_
#define GEMMSERVE_SERVER_REPOSITORY_ONNX_MODEL_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/core/model.h"

namespace gemmserve {

absl::StatusOr<std::unique_ptr<Model>> LoadOnnxModel(const std::string& model_name,
                                                     const std::string& version,
                                                     const std::string& version_dir,
                                                     const std::string& filename);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_REPOSITORY_ONNX_MODEL_LOADER_H_
