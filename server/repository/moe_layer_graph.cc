#include "server/repository/moe_layer_graph.h"

#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"
#include "server/repository/moe_layer_walk.h"

namespace gemmserve {
namespace {

absl::Status CheckDims(const WeightSource& w, const Shape& want, const char* role,
                       const Context& ctx_) {
  if (w.dims() != want) {
    return ctx_.Invalid(absl::StrCat("mixture-of-experts layer: ", role, " '", ClientText(w.name),
                                     "' has shape ", ShapeToString(w.dims()), ", the layer needs ",
                                     ShapeToString(want)));
  }
  if (w.bias != nullptr &&
      Shape(w.bias->dims().begin(), w.bias->dims().end()) != Shape{want[0], want[2]}) {
    return ctx_.Invalid(absl::StrCat("mixture-of-experts layer: the bias of ", role, " '",
                                     ClientText(w.name), "' must be [G, N] = [", want[0], ",",
                                     want[2], "]"));
  }
  return absl::OkStatus();
}

// The element type a weight holds: T for an initializer, and for a
// DequantizeLinear's scale (its output type).
absl::Status CheckType(const WeightSource& w, DataType t, const char* role, const Context& ctx) {
  for (const onnx::TensorProto* p : {w.dense, w.bias, w.scale}) {
    if (p == nullptr) continue;
    absl::StatusOr<DataType> type = FromOnnxType(p->data_type());
    if (!type.ok() || *type != t) {
      return ctx.Invalid(absl::StrCat("mixture-of-experts layer: ", role, " '",
                                      ClientText(p->name()), "' has ONNX element type ",
                                      p->data_type(), "; the layer's x is ", DataTypeName(t)));
    }
  }
  return absl::OkStatus();
}

// K, I, G, S agree across the graph's weights and constants; checked from
// the protos' dimensions before anything is read.
absl::Status CheckShapes(const LayerGraph& l, DataType t, int64_t* g, int64_t* shared_i,
                         const Context& ctx) {
  const Shape down = l.down.dims();
  if (down.size() != 3 || down[0] < 1) {
    return ctx.Invalid(absl::StrCat("mixture-of-experts layer: the down weights '",
                                    ClientText(l.down.name),
                                    "' must be [G, I, K] with G >= 1, got ", ShapeToString(down)));
  }
  *g = down[0];
  if (l.s > *g && l.routing != MoeRouting::kGiven) {  // a shard may hold fewer than S
    return ctx.Invalid(
        absl::StrCat("mixture-of-experts layer: S=", l.s, " experts per token of G=", *g));
  }
  const int64_t k = l.k, i = l.i;
  struct Check {
    const std::optional<WeightSource>* w;
    Shape want;
    const char* role;
  };
  const std::optional<WeightSource> down_w = l.down;
  *shared_i = 0;
  if (l.shared_gate && l.shared_gate->dims().size() == 2) *shared_i = l.shared_gate->dims()[1];
  const Check checks[] = {{&l.gate_up, {*g, k, 2 * i}, "gate/up weights"},
                          {&l.gate, {*g, k, i}, "gate weights"},
                          {&l.up, {*g, k, i}, "up weights"},
                          {&down_w, {*g, i, k}, "down weights"},
                          {&l.shared_gate, {k, *shared_i}, "shared gate weights"},
                          {&l.shared_up, {k, *shared_i}, "shared up weights"},
                          {&l.shared_down, {*shared_i, k}, "shared down weights"}};
  for (const Check& c : checks) {
    if (!c.w->has_value()) continue;
    GEMMSERVE_RETURN_IF_ERROR(CheckDims(**c.w, c.want, c.role, ctx));
    GEMMSERVE_RETURN_IF_ERROR(CheckType(**c.w, t, c.role, ctx));
  }
  if (l.shared_gate && *shared_i < 1) {
    return ctx.Invalid("mixture-of-experts layer: the shared expert needs I_s >= 1");
  }
  if (l.router != nullptr) {
    WeightSource r;
    r.dense = l.router;
    r.name = l.router->name();
    GEMMSERVE_RETURN_IF_ERROR(CheckDims(r, {k, *g}, "router", ctx));
    GEMMSERVE_RETURN_IF_ERROR(CheckType(r, t, "router", ctx));
  }
  return absl::OkStatus();
}

// A projection's weights read: the initializer, or the DequantizeLinear's
// integers kept quantized; and its bias.
absl::StatusOr<MoeWeightsSpec> ReadWeights(
    const WeightSource& w, const onnx::ModelProto& model,
    const std::map<std::string, const onnx::TensorProto*>& inits, const ModelFiles& files,
    const std::string& version, const Context& ctx) {
  MoeWeightsSpec spec;
  if (w.dense != nullptr) {
    GEMMSERVE_ASSIGN_OR_RETURN(spec.dense, ReadInitializer(*w.dense, files, version, ctx));
  } else {
    GEMMSERVE_ASSIGN_OR_RETURN(
        spec.quantized,
        ReadDequantizeLinear(*w.dequantize, DefaultOpset(model), inits, files, version, ctx));
  }
  if (w.bias != nullptr) {
    GEMMSERVE_ASSIGN_OR_RETURN(spec.bias, ReadInitializer(*w.bias, files, version, ctx));
  }
  return spec;
}

absl::StatusOr<TensorSpec> InputSpec(const onnx::GraphProto& graph, const std::string& name,
                                     const Context& ctx) {
  for (const auto& in : graph.input()) {
    if (in.name() == name) return GraphInputSpec(in, ctx);
  }
  return ctx.Invalid(
      absl::StrCat("mixture-of-experts layer: '", ClientText(name), "' must be a graph input"));
}

}  // namespace

absl::StatusOr<MoeLayerSpec> ReadMoeLayerGraph(const onnx::ModelProto& model,
                                               const ModelFiles& files, const std::string& version,
                                               const Context& ctx, bool read_experts) {
  const onnx::GraphProto& graph = model.graph();
  GEMMSERVE_ASSIGN_OR_RETURN(LayerGraph l, WalkMoeLayerGraph(graph, ctx));
  MoeLayerSpec spec;
  spec.name = ctx.model();
  spec.version = version;
  GEMMSERVE_ASSIGN_OR_RETURN(spec.x, InputSpec(graph, l.x, ctx));
  if (l.routing == MoeRouting::kGiven) {
    GEMMSERVE_ASSIGN_OR_RETURN(spec.ids, InputSpec(graph, l.ids, ctx));
    GEMMSERVE_ASSIGN_OR_RETURN(spec.w, InputSpec(graph, l.w, ctx));
  }
  const DataType t = spec.x.datatypes[0];
  int64_t shared_i = 0;
  GEMMSERVE_RETURN_IF_ERROR(CheckShapes(l, t, &l.g, &shared_i, ctx));
  static_cast<MoeLayerForm&>(spec) = l;
  spec.output_name = l.output;
  std::map<std::string, const onnx::TensorProto*> inits;
  for (const auto& init : graph.initializer()) inits[init.name()] = &init;
  auto read = [&](const std::optional<WeightSource>& from,
                  std::optional<MoeWeightsSpec>* to) -> absl::Status {
    if (!from) return absl::OkStatus();
    GEMMSERVE_ASSIGN_OR_RETURN(*to, ReadWeights(*from, model, inits, files, version, ctx));
    return absl::OkStatus();
  };
  if (read_experts) {
    GEMMSERVE_RETURN_IF_ERROR(read(l.gate_up, &spec.gate_up));
    GEMMSERVE_RETURN_IF_ERROR(read(l.gate, &spec.gate));
    GEMMSERVE_RETURN_IF_ERROR(read(l.up, &spec.up));
    GEMMSERVE_ASSIGN_OR_RETURN(spec.down, ReadWeights(l.down, model, inits, files, version, ctx));
  }
  GEMMSERVE_RETURN_IF_ERROR(read(l.shared_gate, &spec.shared_gate));
  GEMMSERVE_RETURN_IF_ERROR(read(l.shared_up, &spec.shared_up));
  GEMMSERVE_RETURN_IF_ERROR(read(l.shared_down, &spec.shared_down));
  if (l.router != nullptr) {
    GEMMSERVE_ASSIGN_OR_RETURN(spec.router, ReadInitializer(*l.router, files, version, ctx));
  }
  return spec;
}

}  // namespace gemmserve
