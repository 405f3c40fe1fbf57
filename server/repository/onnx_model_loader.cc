#include "server/repository/onnx_model_loader.h"

#include "server/repository/moe_layer_graph.h"
#include "server/repository/onnx_tensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <onnx/onnx_pb.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/client_text.h"
#include "server/common/model_name.h"
#include "server/common/status_macros.h"
#include "server/models/resident_models.h"
#include "server/ops/quantized_weights.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace {

constexpr char kServed[] =
    "gemmserve serves one-node graphs (MatMul or GroupedMatMul), DequantizeLinear -> MatMul "
    "or DequantizeLinear -> GroupedMatMul (weights kept quantized), and mixture-of-experts "
    "layer graphs (docs/moe_layer.md)";

// The op the graph serves (its last node), and the DequantizeLinear before it
// (nullptr for a one-node graph).
struct ServedNodes {
  const onnx::NodeProto* op = nullptr;
  const onnx::NodeProto* dequantize = nullptr;
};

absl::StatusOr<ServedNodes> FindServedNodes(const onnx::GraphProto& graph, const Context& ctx) {
  if (graph.node_size() != 1 && graph.node_size() != 2) {
    return ctx.Invalid(absl::StrCat("the graph has ", graph.node_size(), " nodes; ", kServed));
  }
  ServedNodes nodes;
  // With two nodes, the first dequantizes the second's weights.
  if (graph.node_size() == 2) {
    nodes.dequantize = &graph.node(0);
    if (nodes.dequantize->op_type() != "DequantizeLinear") {
      return ctx.Invalid(absl::StrCat("the graph has 2 nodes and the first is '",
                                      ClientText(nodes.dequantize->op_type()),
                                      "', not DequantizeLinear; ", kServed));
    }
  }
  const onnx::NodeProto& node = graph.node(graph.node_size() - 1);
  nodes.op = &node;
  if (!node.domain().empty() && node.domain() != "ai.onnx") {
    return ctx.Invalid(absl::StrCat("node '", ClientText(node.name()), "' is in domain '",
                                    ClientText(node.domain()),
                                    "'; only the default ONNX domain is served"));
  }
  if (node.op_type() != "MatMul" && node.op_type() != "GroupedMatMul") {
    return ctx.Invalid(absl::StrCat("unknown op '", ClientText(node.op_type()), "'; ", kServed));
  }
  if (node.output_size() != 1 || node.output(0).empty()) {
    return ctx.Invalid(absl::StrCat("node '", ClientText(node.name()), "' must have one output"));
  }
  if (absl::Status valid = ValidateTensorName(node.output(0)); !valid.ok()) {
    return ctx.Invalid(absl::StrCat("node output: ", valid.message()));
  }
  return nodes;
}

// The dequantized weights feed the op's weights (input 1) and nothing else.
absl::Status CheckDequantizedFeedsWeights(const onnx::GraphProto& graph, const ServedNodes& nodes,
                                          const Context& ctx) {
  const onnx::NodeProto& dequantize = *nodes.dequantize;
  const onnx::NodeProto& node = *nodes.op;
  if (dequantize.output_size() != 1 || dequantize.output(0).empty()) {
    return ctx.Invalid("DequantizeLinear must have one output");
  }
  const std::string& dequantized = dequantize.output(0);
  for (int i = 0; i < node.input_size(); ++i) {
    if (node.input(i) == dequantized && i != 1) {
      return ctx.Invalid(absl::StrCat("DequantizeLinear output '", ClientText(dequantized),
                                      "' feeds ", node.op_type(), " input ", i,
                                      "; it must be the weights (input 1) and only them"));
    }
  }
  if (node.input_size() < 2 || node.input(1) != dequantized) {
    return ctx.Invalid(absl::StrCat("DequantizeLinear output '", ClientText(dequantized),
                                    "' does not feed ", node.op_type(), "'s weights (input 1); ",
                                    kServed));
  }
  for (const auto& out : graph.output()) {
    if (out.name() == dequantized) {
      return ctx.Invalid(absl::StrCat("DequantizeLinear output '", ClientText(dequantized),
                                      "' is a graph output; it must only feed the weights"));
    }
  }
  return absl::OkStatus();
}

// The op's inputs by where they come from: an initializer (resident in the
// model) or a graph input (sent by each request).
class OpInputs {
 public:
  OpInputs(const onnx::GraphProto& graph, const onnx::NodeProto& node, const ModelFiles& files,
           const std::string& version, const Context& ctx)
      : node_(node), files_(files), version_(version), ctx_(ctx) {
    for (const auto& init : graph.initializer()) initializers_[init.name()] = &init;
    for (const auto& in : graph.input()) {
      if (!initializers_.count(in.name())) graph_inputs_[in.name()] = &in;
    }
  }
  const std::map<std::string, const onnx::TensorProto*>& initializers() const {
    return initializers_;
  }

  // Input `i`, read from its initializer.
  absl::StatusOr<Tensor> Resident(int i, const char* role) const {
    auto it = initializers_.find(node_.input(i));
    if (it == initializers_.end()) {
      return ctx_.Invalid(absl::StrCat(node_.op_type(), " input ", i, " ('",
                                       ClientText(node_.input(i)), "', ", role,
                                       ") must be an initializer: it is the resident weight"));
    }
    return ReadInitializer(*it->second, files_, version_, ctx_);
  }

  // Input `i`, as requests must send it.
  absl::StatusOr<TensorSpec> Sent(int i, const char* role) const {
    auto it = graph_inputs_.find(node_.input(i));
    if (it == graph_inputs_.end()) {
      return ctx_.Invalid(absl::StrCat(node_.op_type(), " input ", i, " ('",
                                       ClientText(node_.input(i)), "', ", role,
                                       ") must be a graph input: requests send it"));
    }
    return GraphInputSpec(*it->second, ctx_);
  }

 private:
  const onnx::NodeProto& node_;
  const ModelFiles& files_;
  const std::string& version_;
  const Context& ctx_;
  std::map<std::string, const onnx::TensorProto*> initializers_;
  std::map<std::string, const onnx::ValueInfoProto*> graph_inputs_;
};

absl::StatusOr<std::unique_ptr<Model>> WithContext(absl::StatusOr<std::unique_ptr<Model>> m,
                                                   const Context& ctx) {
  if (!m.ok()) return ctx.Invalid(m.status().message());
  return m;
}

absl::StatusOr<std::unique_ptr<Model>> LoadMatMul(
    const onnx::NodeProto& node, const OpInputs& inputs, std::optional<QuantizedWeights> quantized,
    const std::string& version, const OnnxLoadOptions& options, const Context& ctx) {
  if (node.input_size() != 2) return ctx.Invalid("MatMul needs two inputs, A and B");
  ResidentMatMulSpec spec;
  spec.accuracy_level = options.accuracy_level;
  spec.name = ctx.model();
  spec.version = version;
  GEMMSERVE_ASSIGN_OR_RETURN(spec.a, inputs.Sent(0, "A"));
  if (quantized) {
    spec.b_quantized = std::move(quantized);
  } else {
    GEMMSERVE_ASSIGN_OR_RETURN(spec.b, inputs.Resident(1, "B"));
  }
  spec.output_name = node.output(0);
  return WithContext(MakeResidentMatMulModel(std::move(spec)), ctx);
}

absl::StatusOr<std::unique_ptr<Model>> LoadGroupedMatMul(
    const onnx::NodeProto& node, const OpInputs& inputs, std::optional<QuantizedWeights> quantized,
    const std::string& version, const OnnxLoadOptions& options, const Context& ctx) {
  if (node.input_size() < 3 || node.input_size() > 4) {
    return ctx.Invalid("GroupedMatMul needs 3 or 4 inputs: input, weights, group_indices, [bias]");
  }
  ResidentGroupedMatMulSpec spec;
  spec.accuracy_level = options.accuracy_level;
  spec.name = ctx.model();
  spec.version = version;
  GEMMSERVE_ASSIGN_OR_RETURN(spec.input, inputs.Sent(0, "input"));
  if (quantized) {
    spec.weights_quantized = std::move(quantized);
  } else {
    GEMMSERVE_ASSIGN_OR_RETURN(spec.weights, inputs.Resident(1, "weights"));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(spec.group_indices, inputs.Sent(2, "group_indices"));
  if (node.input_size() == 4 && !node.input(3).empty()) {
    GEMMSERVE_ASSIGN_OR_RETURN(spec.bias, inputs.Resident(3, "bias"));
  }
  spec.output_name = node.output(0);
  return WithContext(MakeResidentGroupedMatMulModel(std::move(spec)), ctx);
}

// A layer graph: the whole layer, a shard of it, or a sharded layer's
// router (its shards reached through options.remote_experts).
absl::StatusOr<std::unique_ptr<Model>> LoadMoeLayer(const onnx::ModelProto& proto,
                                                    const ModelFiles& files,
                                                    const std::string& version,
                                                    const OnnxLoadOptions& options,
                                                    const Context& ctx) {
  const bool router = !options.shards.empty();
  GEMMSERVE_ASSIGN_OR_RETURN(MoeLayerSpec spec,
                             ReadMoeLayerGraph(proto, files, version, ctx, !router));
  spec.accuracy_level = options.accuracy_level;
  spec.expert_range = options.expert_range;
  if (router) {
    if (options.expert_range) {
      return ctx.Invalid("parameters 'shards' and 'expert_range': a layer is a router or a shard");
    }
    ShardedLayerPlan plan;
    plan.model = ctx.model();
    plan.version = version;
    plan.k = spec.k;
    plan.s = spec.s;
    plan.g = spec.g;
    plan.type = spec.x.datatypes[0];
    plan.metrics = options.metrics;
    absl::StatusOr<std::vector<ShardSpec>> shards = ParseShards(options.shards, spec.g);
    if (!shards.ok())
      return ctx.Invalid(absl::StrCat("parameter 'shards': ", shards.status().message()));
    plan.shards = *std::move(shards);
    if (!options.remote_experts) {
      return ctx.Invalid("parameter 'shards': this server was built without a shard client");
    }
    GEMMSERVE_ASSIGN_OR_RETURN(spec.remote, options.remote_experts(plan));
    spec.shards = options.shards;
  }
  return WithContext(MakeMoeLayerModel(std::move(spec)), ctx);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadOnnxModel(const std::string& model_name,
                                                     const std::string& version,
                                                     const ModelFiles& files,
                                                     const std::string& filename,
                                                     const OnnxLoadOptions& options) {
  const Context ctx(model_name, absl::StrCat(version, "/", ClientText(filename)));
  GEMMSERVE_ASSIGN_OR_RETURN(onnx::ModelProto proto, ReadModelProto(files, version, filename, ctx));
  const onnx::GraphProto& graph = proto.graph();
  if (graph.node_size() > 2) {  // a mixture-of-experts layer, or nothing served
    return LoadMoeLayer(proto, files, version, options, ctx);
  }
  if (options.expert_range || !options.shards.empty()) {
    return ctx.Invalid(
        "parameters 'expert_range' and 'shards' shard a mixture-of-experts layer; this model "
        "is one operator");
  }
  GEMMSERVE_ASSIGN_OR_RETURN(ServedNodes nodes, FindServedNodes(graph, ctx));
  if (nodes.dequantize != nullptr) {
    GEMMSERVE_RETURN_IF_ERROR(CheckDequantizedFeedsWeights(graph, nodes, ctx));
  }
  const OpInputs inputs(graph, *nodes.op, files, version, ctx);
  std::optional<QuantizedWeights> quantized;
  if (nodes.dequantize != nullptr) {
    GEMMSERVE_ASSIGN_OR_RETURN(quantized,
                               ReadDequantizeLinear(*nodes.dequantize, DefaultOpset(proto),
                                                    inputs.initializers(), files, version, ctx));
  }
  if (nodes.op->op_type() == "MatMul") {
    return LoadMatMul(*nodes.op, inputs, std::move(quantized), version, options, ctx);
  }
  return LoadGroupedMatMul(*nodes.op, inputs, std::move(quantized), version, options, ctx);
}

}  // namespace gemmserve
