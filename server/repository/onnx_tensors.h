// Reading an ONNX model's parts with Debian's ONNX protobuf library
// (libonnx-dev), shared by the loaders of the one-node models
// (onnx_model_loader.h) and of the mixture-of-experts layer
// (moe_layer_graph.h): the model file, initializers (inline or external
// data, sizes checked against the file before anything is allocated),
// DequantizeLinear's weights kept quantized, and graph inputs as tensor
// specs. Every problem is INVALID_ARGUMENT (NOT_FOUND for a missing file)
// with a message from Context, naming the model and the file relative to
// the model directory, never an absolute path.
#ifndef GEMMSERVE_SERVER_REPOSITORY_ONNX_TENSORS_H_
#define GEMMSERVE_SERVER_REPOSITORY_ONNX_TENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include <onnx/onnx_pb.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "server/core/model.h"
#include "server/ops/quantized_weights.h"
#include "server/repository/model_files.h"
#include "server/tensor/tensor.h"

namespace gemmserve {

// Builds the messages: "model 'moe' (1/model.onnx): ...".
class Context {
 public:
  Context(std::string model, std::string file) : model_(std::move(model)), file_(std::move(file)) {}
  absl::Status Invalid(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("model '", model_, "' (", file_, "): ", what));
  }
  const std::string& model() const { return model_; }

 private:
  std::string model_, file_;
};

// ONNX TensorProto.DataType values gemmserve serves as tensors.
absl::StatusOr<DataType> FromOnnxType(int32_t t);

// The model file `filename` of version directory `version`, parsed.
absl::StatusOr<onnx::ModelProto> ReadModelProto(const ModelFiles& files, const std::string& version,
                                                const std::string& filename, const Context& ctx);

// Reads an initializer into an aligned tensor of its datatype. Its size is
// computed from its dimensions and checked against the data the file holds
// before the tensor is allocated.
absl::StatusOr<Tensor> ReadInitializer(const onnx::TensorProto& proto, const ModelFiles& files,
                                       const std::string& version, const Context& ctx);

// The default ONNX domain's opset the model imports (0: none).
int64_t DefaultOpset(const onnx::ModelProto& model);

// DequantizeLinear(x, x_scale, [x_zero_point]) of initializers, read and
// checked as weights kept quantized ([K, N] or [G, K, N]).
absl::StatusOr<QuantizedWeights> ReadDequantizeLinear(
    const onnx::NodeProto& node, int64_t opset,
    const std::map<std::string, const onnx::TensorProto*>& initializers, const ModelFiles& files,
    const std::string& version, const Context& ctx);

// A graph input as the tensor spec requests must meet: its one datatype and
// its dimensions (-1 where the graph leaves them symbolic).
absl::StatusOr<TensorSpec> GraphInputSpec(const onnx::ValueInfoProto& info, const Context& ctx);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_REPOSITORY_ONNX_TENSORS_H_
