// The walk over a mixture-of-experts layer graph (moe_layer_graph.h has the
// forms): back from the graph's output, every node checked against the form
// and marked, the first that does not fit named with why. What it finds is
// where each piece comes from; moe_layer_graph.cc then checks the weights'
// shapes and types and reads them.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(LayerGraph layer, WalkMoeLayerGraph(model.graph(), ctx));
#ifndef GEMMSERVE_SERVER_REPOSITORY_MOE_LAYER_WALK_H_
#define GEMMSERVE_SERVER_REPOSITORY_MOE_LAYER_WALK_H_

#include <optional>
#include <string>

#include <onnx/onnx_pb.h>

#include "absl/status/statusor.h"
#include "server/models/moe_layer_model.h"
#include "server/repository/onnx_tensors.h"
#include "server/tensor/shape.h"

namespace gemmserve {

// Where a projection's weights come from: an initializer of T, or a
// DequantizeLinear of initializers; and its optional bias initializer.
struct WeightSource {
  const onnx::TensorProto* dense = nullptr;
  const onnx::NodeProto* dequantize = nullptr;
  const onnx::TensorProto* quantized = nullptr;  // the DequantizeLinear's x
  const onnx::TensorProto* scale = nullptr;      // and its x_scale (of T)
  const onnx::TensorProto* bias = nullptr;
  std::string name;  // as the graph names it

  Shape dims() const {
    const onnx::TensorProto* t = dense ? dense : quantized;
    return Shape(t->dims().begin(), t->dims().end());
  }
};

// The walk's findings: the form (G from the weights' shapes, by CheckShapes)
// and where each piece comes from.
struct LayerGraph : MoeLayerForm {
  std::string x, ids, w, output;
  std::optional<WeightSource> gate_up, gate, up, shared_gate, shared_up, shared_down;
  WeightSource down;
  const onnx::TensorProto* router = nullptr;
};

// The layer `graph` holds, or INVALID_ARGUMENT naming the first node that
// does not fit a form (or a node that belongs to none). Pointers into
// `graph`, which must outlive the result.
absl::StatusOr<LayerGraph> WalkMoeLayerGraph(const onnx::GraphProto& graph, const Context& ctx);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_REPOSITORY_MOE_LAYER_WALK_H_
