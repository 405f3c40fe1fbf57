// Recognises a mixture-of-experts layer graph (issue 41; the forms are in
// docs/moe_layer.md) in an ONNX model and reads it into a MoeLayerSpec:
//
//   experts   GroupedMatMul(x, W_gu, ids) -> Split, or GroupedMatMul(x, W_g, ids)
//             and GroupedMatMul(x, W_u, ids); Mul(Mul(g, Sigmoid(g)), u) or
//             Mul(Gelu(g), u); Reshape(a, [-1, I]), Reshape(ids, [-1, 1]),
//             GroupedMatMul(a2, W_d, ids2), Reshape(y, [-1, S, K])
//   combine   ReduceSum(Mul(y3, Unsqueeze(w, [2])), [1], keepdims=0)
//   routing   given (inputs ids, w), or MatMul(x, W_r) then Softmax -> TopK
//             (optionally Div by the ReduceSum of the top-S) or TopK -> Softmax
//   shared    optionally: + MatMul(Mul(Mul(sg, Sigmoid(sg)), su), Ws_d)
//
// The graph is walked back from its output; the first node that does not fit
// is named with why (INVALID_ARGUMENT), and every node must belong to the
// form. Every constant and every weight's dimensions and element type are
// checked against K, I, G and S before any weight is read; weights are
// initializers of T or DequantizeLinear of initializers.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(MoeLayerSpec spec,
//                              ReadMoeLayerGraph(proto, files, version, ctx));
#ifndef GEMMSERVE_SERVER_REPOSITORY_MOE_LAYER_GRAPH_H_
#define GEMMSERVE_SERVER_REPOSITORY_MOE_LAYER_GRAPH_H_

#include <string>

#include <onnx/onnx_pb.h>

#include "absl/status/statusor.h"
#include "server/models/moe_layer_model.h"
#include "server/repository/model_files.h"
#include "server/repository/onnx_tensors.h"

namespace gemmserve {

// The spec's name and version are ctx.model() and `version`. Without
// `read_experts` (a sharded layer's router, whose experts are on its shards)
// the routed experts' weights are checked from the protos' dimensions and
// types but not read: their data may be absent.
absl::StatusOr<MoeLayerSpec> ReadMoeLayerGraph(const onnx::ModelProto& model,
                                               const ModelFiles& files, const std::string& version,
                                               const Context& ctx, bool read_experts = true);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_REPOSITORY_MOE_LAYER_GRAPH_H_
