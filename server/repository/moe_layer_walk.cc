#include "server/repository/moe_layer_walk.h"

#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"

namespace gemmserve {
namespace {

constexpr char kForms[] = "the layer forms are in docs/moe_layer.md";
// K, I and S from the graph's constants are held below this before any
// arithmetic on them (2I, G*K*2I), so no product of them overflows; no layer
// is near it.
constexpr int64_t kMaxLayerDimension = int64_t{1} << 31;

class Walker {
 public:
  Walker(const onnx::GraphProto& graph, const Context& ctx) : graph_(graph), ctx_(ctx) {}

  absl::StatusOr<LayerGraph> Walk();

 private:
  absl::Status Index();
  absl::Status WalkCombine(const onnx::NodeProto& reduce);
  absl::Status WalkDown(const onnx::NodeProto& reshape_back);
  absl::Status WalkActivation(const onnx::NodeProto& mul);
  absl::Status WalkGateUp(const std::string& g, const std::string& u, const onnx::NodeProto& at);
  absl::Status WalkRouting(const onnx::NodeProto& at);
  absl::Status WalkComputedWeights(const onnx::NodeProto& topk, bool softmax_first);
  absl::Status WalkShared(const onnx::NodeProto& matmul);
  absl::StatusOr<std::string> SiluInput(const onnx::NodeProto& mul);
  absl::StatusOr<const onnx::NodeProto*> GroupedMatMul(const std::string& tensor,
                                                       const onnx::NodeProto& consumer,
                                                       WeightSource* weights);
  absl::StatusOr<WeightSource> Weights(const onnx::NodeProto& node, int input, bool bias_too);

  // The node producing `tensor`, marked as part of the layer; a failure of
  // `consumer` unless it is one of `ops`.
  absl::StatusOr<const onnx::NodeProto*> From(const std::string& tensor,
                                              const onnx::NodeProto& consumer,
                                              std::vector<const char*> ops, const char* role);
  // An INT64 constant initializer's values.
  absl::StatusOr<std::vector<int64_t>> Ints(const onnx::NodeProto& node, int input,
                                            const char* role);
  absl::StatusOr<int64_t> IntAttribute(const onnx::NodeProto& node, const char* name,
                                       int64_t absent) const;
  absl::Status Inputs(const onnx::NodeProto& node, int min, int max, int outputs) const;
  absl::Status Fail(const onnx::NodeProto& node, absl::string_view why) const;
  bool LastAxis(int64_t axis, int64_t rank) const { return axis == -1 || axis == rank - 1; }

  const onnx::GraphProto& graph_;
  const Context& ctx_;
  std::map<std::string, const onnx::NodeProto*> producer_;
  std::map<std::string, const onnx::TensorProto*> inits_;
  std::set<std::string> graph_inputs_;
  std::set<const onnx::NodeProto*> used_;
  LayerGraph layer_;
};

std::string Describe(const onnx::NodeProto& node) {
  std::string out = node.name().empty() ? "" : absl::StrCat("'", ClientText(node.name()), "' ");
  absl::StrAppend(&out, "(", ClientText(node.op_type()));
  if (node.output_size() > 0) absl::StrAppend(&out, " -> '", ClientText(node.output(0)), "'");
  return out + ")";
}

absl::Status Walker::Fail(const onnx::NodeProto& node, absl::string_view why) const {
  return ctx_.Invalid(absl::StrCat("not a mixture-of-experts layer: node ", Describe(node), ": ",
                                   why, "; ", kForms));
}

absl::Status Walker::Index() {
  for (const auto& init : graph_.initializer()) inits_[init.name()] = &init;
  for (const auto& in : graph_.input()) {
    if (!inits_.count(in.name())) graph_inputs_.insert(in.name());
  }
  for (const auto& node : graph_.node()) {
    if (!node.domain().empty() && node.domain() != "ai.onnx") {
      return Fail(node, absl::StrCat("domain '", ClientText(node.domain()),
                                     "'; only the default ONNX domain is served"));
    }
    for (const std::string& out : node.output()) {
      if (out.empty()) continue;
      if (!producer_.emplace(out, &node).second || inits_.count(out) || graph_inputs_.count(out)) {
        return Fail(node, absl::StrCat("output '", ClientText(out), "' is defined twice"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const onnx::NodeProto*> Walker::From(const std::string& tensor,
                                                    const onnx::NodeProto& consumer,
                                                    std::vector<const char*> ops,
                                                    const char* role) {
  auto it = producer_.find(tensor);
  const std::string want = absl::StrJoin(ops, " or ");
  if (it == producer_.end()) {
    return Fail(consumer,
                absl::StrCat(role, " '", ClientText(tensor), "' must come from ", want, ", it is ",
                             inits_.count(tensor) ? "an initializer" : "a graph input"));
  }
  for (const char* op : ops) {
    if (it->second->op_type() == op) {
      used_.insert(it->second);
      return it->second;
    }
  }
  return Fail(consumer, absl::StrCat(role, " '", ClientText(tensor), "' must come from ", want,
                                     ", it comes from ", Describe(*it->second)));
}

absl::Status Walker::Inputs(const onnx::NodeProto& node, int min, int max, int outputs) const {
  if (node.input_size() < min || node.input_size() > max) {
    return Fail(node, absl::StrCat("expected ", min == max ? "" : absl::StrCat(min, " to "), max,
                                   " inputs, got ", node.input_size()));
  }
  if (node.output_size() != outputs) {
    return Fail(node, absl::StrCat("expected ", outputs, " outputs, got ", node.output_size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> Walker::Ints(const onnx::NodeProto& node, int input,
                                                  const char* role) {
  auto it = node.input_size() > input ? inits_.find(node.input(input)) : inits_.end();
  if (it == inits_.end()) {
    return Fail(node, absl::StrCat(role, " must be a constant initializer"));
  }
  const onnx::TensorProto& t = *it->second;
  if (t.data_type() != onnx::TensorProto::INT64 || t.dims_size() != 1 || t.dims(0) > 8 ||
      t.data_location() == onnx::TensorProto::EXTERNAL) {
    return Fail(node, absl::StrCat(role,
                                   " must be an inline 1-D INT64 initializer of at most 8 "
                                   "values"));
  }
  std::vector<int64_t> v;
  if (t.has_raw_data()) {
    if (static_cast<int64_t>(t.raw_data().size()) != t.dims(0) * 8) {
      return Fail(node, absl::StrCat(role, ": raw data of ", t.raw_data().size(), " bytes for ",
                                     t.dims(0), " values"));
    }
    v.resize(static_cast<size_t>(t.dims(0)));
    if (!v.empty()) std::memcpy(v.data(), t.raw_data().data(), v.size() * 8);
  } else {
    if (t.int64_data_size() != t.dims(0)) {
      return Fail(node, absl::StrCat(role, ": ", t.int64_data_size(), " values for ", t.dims(0)));
    }
    v.assign(t.int64_data().begin(), t.int64_data().end());
  }
  return v;
}

absl::StatusOr<int64_t> Walker::IntAttribute(const onnx::NodeProto& node, const char* name,
                                             int64_t absent) const {
  for (const auto& attr : node.attribute()) {
    if (attr.name() != name) continue;
    if (attr.type() != onnx::AttributeProto::INT) {
      return Fail(node, absl::StrCat("attribute '", name, "' must be an INT"));
    }
    return attr.i();
  }
  return absent;
}

// Attributes outside `known` are refused rather than ignored.
absl::Status KnownAttributes(const onnx::NodeProto& node, std::vector<const char*> known);

absl::StatusOr<LayerGraph> Walker::Walk() {
  GEMMSERVE_RETURN_IF_ERROR(Index());
  if (graph_.output_size() != 1) {
    return ctx_.Invalid(absl::StrCat("not a mixture-of-experts layer: the graph has ",
                                     graph_.output_size(), " outputs, a layer has one; ", kForms));
  }
  layer_.output = graph_.output(0).name();
  auto it = producer_.find(layer_.output);
  if (it == producer_.end()) {
    return ctx_.Invalid("not a mixture-of-experts layer: no node computes the graph's output");
  }
  const onnx::NodeProto& last = *it->second;
  used_.insert(&last);
  if (last.op_type() == "Add") {  // the experts' sum plus the shared expert
    GEMMSERVE_RETURN_IF_ERROR(Inputs(last, 2, 2, 1));
    const bool reduce_first =
        producer_.count(last.input(0)) && producer_.at(last.input(0))->op_type() == "ReduceSum";
    GEMMSERVE_ASSIGN_OR_RETURN(
        const onnx::NodeProto* reduce,
        From(last.input(reduce_first ? 0 : 1), last, {"ReduceSum"}, "the experts' sum"));
    GEMMSERVE_ASSIGN_OR_RETURN(
        const onnx::NodeProto* shared,
        From(last.input(reduce_first ? 1 : 0), last, {"MatMul"}, "the shared expert"));
    GEMMSERVE_RETURN_IF_ERROR(WalkCombine(*reduce));
    GEMMSERVE_RETURN_IF_ERROR(WalkShared(*shared));
  } else if (last.op_type() == "ReduceSum") {
    GEMMSERVE_RETURN_IF_ERROR(WalkCombine(last));
  } else {
    return Fail(last,
                "the output must come from ReduceSum (the combine) or Add (the combine "
                "and a shared expert)");
  }
  for (const auto& node : graph_.node()) {
    if (!used_.count(&node)) return Fail(node, "is not part of the layer's form");
  }
  return layer_;
}

// ReduceSum(Mul(y3, Unsqueeze(w, [2])), [1], keepdims=0)
absl::Status Walker::WalkCombine(const onnx::NodeProto& reduce) {
  GEMMSERVE_RETURN_IF_ERROR(Inputs(reduce, 2, 2, 1));
  GEMMSERVE_RETURN_IF_ERROR(KnownAttributes(reduce, {"keepdims", "noop_with_empty_axes"}));
  GEMMSERVE_ASSIGN_OR_RETURN(std::vector<int64_t> axes, Ints(reduce, 1, "axes"));
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t keepdims, IntAttribute(reduce, "keepdims", 1));
  if (axes != std::vector<int64_t>{1} || keepdims != 0) {
    return Fail(reduce, "the combine sums over the slots: axes [1], keepdims=0");
  }
  GEMMSERVE_ASSIGN_OR_RETURN(const onnx::NodeProto* mul,
                             From(reduce.input(0), reduce, {"Mul"}, "the weighted outputs"));
  GEMMSERVE_RETURN_IF_ERROR(Inputs(*mul, 2, 2, 1));
  const bool reshape_first =
      producer_.count(mul->input(0)) && producer_.at(mul->input(0))->op_type() == "Reshape";
  GEMMSERVE_ASSIGN_OR_RETURN(
      const onnx::NodeProto* back,
      From(mul->input(reshape_first ? 0 : 1), *mul, {"Reshape"}, "the experts' outputs [M, S, K]"));
  GEMMSERVE_ASSIGN_OR_RETURN(const onnx::NodeProto* unsqueeze,
                             From(mul->input(reshape_first ? 1 : 0), *mul, {"Unsqueeze"},
                                  "the routing weights [M, S, 1]"));
  GEMMSERVE_RETURN_IF_ERROR(Inputs(*unsqueeze, 2, 2, 1));
  GEMMSERVE_ASSIGN_OR_RETURN(std::vector<int64_t> w_axes, Ints(*unsqueeze, 1, "axes"));
  if (w_axes != std::vector<int64_t>{2} && w_axes != std::vector<int64_t>{-1}) {
    return Fail(*unsqueeze, "the routing weights are unsqueezed at axis 2");
  }
  layer_.w = unsqueeze->input(0);
  return WalkDown(*back);
}

// Reshape(GroupedMatMul(Reshape(a, [-1, I]), W_d, Reshape(ids, [-1, 1])), [-1, S, K])
absl::Status Walker::WalkDown(const onnx::NodeProto& back) {
  GEMMSERVE_RETURN_IF_ERROR(Inputs(back, 2, 2, 1));
  GEMMSERVE_RETURN_IF_ERROR(KnownAttributes(back, {"allowzero"}));
  GEMMSERVE_ASSIGN_OR_RETURN(std::vector<int64_t> shape, Ints(back, 1, "shape"));
  if (shape.size() != 3 || shape[0] != -1 || shape[1] < 1 || shape[2] < 1 ||
      shape[1] >= kMaxLayerDimension || shape[2] >= kMaxLayerDimension) {
    return Fail(back, "the experts' outputs are reshaped to [-1, S, K] with 1 <= S, K < 2^31");
  }
  layer_.s = shape[1];
  layer_.k = shape[2];
  GEMMSERVE_ASSIGN_OR_RETURN(const onnx::NodeProto* down,
                             From(back.input(0), back, {"GroupedMatMul"}, "the down projection"));
  GEMMSERVE_RETURN_IF_ERROR(Inputs(*down, 3, 4, 1));
  GEMMSERVE_ASSIGN_OR_RETURN(layer_.down, Weights(*down, 1, true));
  GEMMSERVE_ASSIGN_OR_RETURN(const onnx::NodeProto* rows,
                             From(down->input(0), *down, {"Reshape"}, "the activations [M*S, I]"));
  GEMMSERVE_ASSIGN_OR_RETURN(const onnx::NodeProto* ids2,
                             From(down->input(2), *down, {"Reshape"}, "the ids [M*S, 1]"));
  for (const onnx::NodeProto* r : {rows, ids2}) {
    GEMMSERVE_RETURN_IF_ERROR(Inputs(*r, 2, 2, 1));
    GEMMSERVE_RETURN_IF_ERROR(KnownAttributes(*r, {"allowzero"}));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(std::vector<int64_t> rows_shape, Ints(*rows, 1, "shape"));
  if (rows_shape.size() != 2 || rows_shape[0] != -1 || rows_shape[1] < 1 ||
      rows_shape[1] >= kMaxLayerDimension) {
    return Fail(*rows, "the activations are reshaped to [-1, I] with 1 <= I < 2^31");
  }
  layer_.i = rows_shape[1];
  GEMMSERVE_ASSIGN_OR_RETURN(std::vector<int64_t> ids_shape, Ints(*ids2, 1, "shape"));
  if (ids_shape != std::vector<int64_t>{-1, 1}) {
    return Fail(*ids2, "the ids are reshaped to [-1, 1]");
  }
  layer_.ids = ids2->input(0);
  GEMMSERVE_ASSIGN_OR_RETURN(const onnx::NodeProto* act,
                             From(rows->input(0), *rows, {"Mul"}, "the activations"));
  GEMMSERVE_RETURN_IF_ERROR(WalkActivation(*act));
  return WalkRouting(*ids2);
}

// The input g of Mul(g, Sigmoid(g)) (either order).
absl::StatusOr<std::string> Walker::SiluInput(const onnx::NodeProto& mul) {
  GEMMSERVE_RETURN_IF_ERROR(Inputs(mul, 2, 2, 1));
  for (int side : {0, 1}) {
    auto it = producer_.find(mul.input(1 - side));
    if (it == producer_.end() || it->second->op_type() != "Sigmoid") continue;
    const onnx::NodeProto& sigmoid = *it->second;
    GEMMSERVE_RETURN_IF_ERROR(Inputs(sigmoid, 1, 1, 1));
    if (sigmoid.input(0) != mul.input(side)) continue;
    used_.insert(&sigmoid);
    return mul.input(side);
  }
  return Fail(mul, "SiLU is Mul(g, Sigmoid(g)) of one tensor g");
}

// Mul(act(g), u), act SiLU or Gelu, either order.
absl::Status Walker::WalkActivation(const onnx::NodeProto& mul) {
  GEMMSERVE_RETURN_IF_ERROR(Inputs(mul, 2, 2, 1));
  for (int side : {0, 1}) {
    auto it = producer_.find(mul.input(side));
    if (it == producer_.end()) continue;
    const onnx::NodeProto& act = *it->second;
    std::string g;
    if (act.op_type() == "Gelu") {
      GEMMSERVE_RETURN_IF_ERROR(Inputs(act, 1, 1, 1));
      GEMMSERVE_RETURN_IF_ERROR(KnownAttributes(act, {"approximate"}));
      layer_.activation = MoeActivation::kGelu;
      for (const auto& attr : act.attribute()) {
        if (attr.s() == "tanh") {
          layer_.activation = MoeActivation::kGeluTanh;
        } else if (attr.s() != "none") {
          return Fail(act, "approximate is 'none' or 'tanh'");
        }
      }
      g = act.input(0);
    } else if (act.op_type() == "Mul") {
      absl::StatusOr<std::string> silu = SiluInput(act);
      if (!silu.ok()) continue;  // perhaps the other operand is the activation
      g = *silu;
    } else {
      continue;
    }
    used_.insert(&act);
    return WalkGateUp(g, mul.input(1 - side), mul);
  }
  return Fail(mul, "the activations are Mul(act(g), u) with act Mul(g, Sigmoid(g)) or Gelu(g)");
}

absl::Status KnownAttributes(const onnx::NodeProto& node, std::vector<const char*> known) {
  for (const auto& attr : node.attribute()) {
    bool ok = false;
    for (const char* k : known) ok = ok || attr.name() == k;
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("not a mixture-of-experts layer: node ", Describe(node), ": attribute '",
                       ClientText(attr.name()), "' is not one the layer's form uses; ", kForms));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<WeightSource> Walker::Weights(const onnx::NodeProto& node, int input,
                                             bool bias_too) {
  WeightSource w;
  w.name = node.input(input);
  if (auto it = inits_.find(w.name); it != inits_.end()) {
    w.dense = it->second;
  } else {
    GEMMSERVE_ASSIGN_OR_RETURN(w.dequantize,
                               From(w.name, node, {"DequantizeLinear"}, "the weights"));
    auto x = w.dequantize->input_size() > 0 ? inits_.find(w.dequantize->input(0)) : inits_.end();
    auto scale =
        w.dequantize->input_size() > 1 ? inits_.find(w.dequantize->input(1)) : inits_.end();
    if (x == inits_.end() || scale == inits_.end()) {
      return Fail(*w.dequantize, "x and x_scale must be initializers");
    }
    w.quantized = x->second;
    w.scale = scale->second;
  }
  if (bias_too && node.input_size() == 4 && !node.input(3).empty()) {
    auto it = inits_.find(node.input(3));
    if (it == inits_.end()) return Fail(node, "the bias must be an initializer");
    w.bias = it->second;
  }
  return w;
}

absl::StatusOr<const onnx::NodeProto*> Walker::GroupedMatMul(const std::string& tensor,
                                                             const onnx::NodeProto& consumer,
                                                             WeightSource* weights) {
  GEMMSERVE_ASSIGN_OR_RETURN(const onnx::NodeProto* node,
                             From(tensor, consumer, {"GroupedMatMul"}, "the gate/up projection"));
  GEMMSERVE_RETURN_IF_ERROR(Inputs(*node, 3, 4, 1));
  GEMMSERVE_RETURN_IF_ERROR(KnownAttributes(*node, {}));
  if (node->input(2) != layer_.ids) {
    return Fail(*node, absl::StrCat("its group indices must be the ids the down projection uses ('",
                                    ClientText(layer_.ids), "')"));
  }
  if (!layer_.x.empty() && node->input(0) != layer_.x) {
    return Fail(*node, "gate and up must read the same x");
  }
  layer_.x = node->input(0);
  GEMMSERVE_ASSIGN_OR_RETURN(*weights, Weights(*node, 1, true));
  return node;
}

// g and u: the two outputs of Split(GroupedMatMul(x, W_gu, ids)), or two
// GroupedMatMuls of one x and ids.
absl::Status Walker::WalkGateUp(const std::string& g, const std::string& u,
                                const onnx::NodeProto& at) {
  auto pg = producer_.find(g), pu = producer_.find(u);
  if (pg != producer_.end() && pu != producer_.end() && pg->second == pu->second &&
      pg->second->op_type() == "Split") {
    const onnx::NodeProto& split = *pg->second;
    used_.insert(&split);
    GEMMSERVE_RETURN_IF_ERROR(Inputs(split, 1, 2, 2));
    GEMMSERVE_RETURN_IF_ERROR(KnownAttributes(split, {"axis", "num_outputs"}));
    if (split.output(0) != g || split.output(1) != u) {
      return Fail(split, "its first output is g (into the activation), its second u");
    }
    GEMMSERVE_ASSIGN_OR_RETURN(int64_t axis, IntAttribute(split, "axis", 0));
    GEMMSERVE_ASSIGN_OR_RETURN(int64_t parts, IntAttribute(split, "num_outputs", 0));
    if (!LastAxis(axis, 3)) return Fail(split, "gate/up is split on the last axis");
    if (split.input_size() == 2 && !split.input(1).empty()) {
      GEMMSERVE_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, Ints(split, 1, "split"));
      if (sizes != std::vector<int64_t>{layer_.i, layer_.i}) {
        return Fail(split, absl::StrCat("split must be [I, I] = [", layer_.i, ",", layer_.i, "]"));
      }
    } else if (parts != 2) {
      return Fail(split, "num_outputs must be 2 (or a split input [I, I])");
    }
    layer_.gate_up.emplace();
    return GroupedMatMul(split.input(0), split, &*layer_.gate_up).status();
  }
  layer_.gate.emplace();
  layer_.up.emplace();
  GEMMSERVE_RETURN_IF_ERROR(GroupedMatMul(g, at, &*layer_.gate).status());
  return GroupedMatMul(u, at, &*layer_.up).status();
}

absl::Status Walker::WalkRouting(const onnx::NodeProto& at) {
  if (graph_inputs_.count(layer_.ids)) {
    if (!graph_inputs_.count(layer_.w)) {
      return Fail(at, absl::StrCat("the ids are a graph input, so the routing weights '",
                                   ClientText(layer_.w), "' must be one too"));
    }
    layer_.routing = MoeRouting::kGiven;
    return absl::OkStatus();
  }
  GEMMSERVE_ASSIGN_OR_RETURN(const onnx::NodeProto* topk,
                             From(layer_.ids, at, {"TopK"}, "the ids"));
  GEMMSERVE_RETURN_IF_ERROR(Inputs(*topk, 2, 2, 2));
  GEMMSERVE_RETURN_IF_ERROR(KnownAttributes(*topk, {"axis", "largest", "sorted"}));
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t axis, IntAttribute(*topk, "axis", -1));
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t largest, IntAttribute(*topk, "largest", 1));
  GEMMSERVE_ASSIGN_OR_RETURN(std::vector<int64_t> k, Ints(*topk, 1, "k"));
  if (!LastAxis(axis, 2) || largest != 1 || k != std::vector<int64_t>{layer_.s} ||
      topk->output(1) != layer_.ids) {
    return Fail(*topk, absl::StrCat("the routing takes the S=", layer_.s,
                                    " largest on the last axis, its indices the ids"));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(
      const onnx::NodeProto* before,
      From(topk->input(0), *topk, {"Softmax", "MatMul"}, "the routing scores"));
  const bool softmax_first = before->op_type() == "Softmax";
  const onnx::NodeProto* router = before;
  if (softmax_first) {
    GEMMSERVE_RETURN_IF_ERROR(Inputs(*before, 1, 1, 1));
    GEMMSERVE_RETURN_IF_ERROR(KnownAttributes(*before, {"axis"}));
    GEMMSERVE_ASSIGN_OR_RETURN(int64_t sm_axis, IntAttribute(*before, "axis", -1));
    if (!LastAxis(sm_axis, 2)) return Fail(*before, "the softmax is over the last axis");
    GEMMSERVE_ASSIGN_OR_RETURN(router, From(before->input(0), *before, {"MatMul"}, "the logits"));
  }
  GEMMSERVE_RETURN_IF_ERROR(Inputs(*router, 2, 2, 1));
  auto w_r = inits_.find(router->input(1));
  if (router->input(0) != layer_.x || w_r == inits_.end()) {
    return Fail(*router, "the router is MatMul(x, W_r) with W_r [K, G] an initializer");
  }
  layer_.router = w_r->second;
  return WalkComputedWeights(*topk, softmax_first);
}

// The routing weights from TopK: its values (softmax first, perhaps divided
// by their sum) or the softmax of its values (top-k first).
absl::Status Walker::WalkComputedWeights(const onnx::NodeProto& topk, bool softmax_first) {
  const std::string& values = topk.output(0);
  layer_.routing = softmax_first ? MoeRouting::kSoftmaxTopK : MoeRouting::kTopKSoftmax;
  if (softmax_first && layer_.w == values) return absl::OkStatus();
  GEMMSERVE_ASSIGN_OR_RETURN(
      const onnx::NodeProto* node,
      From(layer_.w, topk, {softmax_first ? "Div" : "Softmax"}, "the routing weights"));
  if (!softmax_first) {
    GEMMSERVE_RETURN_IF_ERROR(Inputs(*node, 1, 1, 1));
    GEMMSERVE_RETURN_IF_ERROR(KnownAttributes(*node, {"axis"}));
    GEMMSERVE_ASSIGN_OR_RETURN(int64_t axis, IntAttribute(*node, "axis", -1));
    if (node->input(0) != values || !LastAxis(axis, 2)) {
      return Fail(*node, "the weights are the softmax of TopK's values over the last axis");
    }
    return absl::OkStatus();
  }
  GEMMSERVE_RETURN_IF_ERROR(Inputs(*node, 2, 2, 1));
  GEMMSERVE_ASSIGN_OR_RETURN(const onnx::NodeProto* sum,
                             From(node->input(1), *node, {"ReduceSum"}, "the divisor"));
  GEMMSERVE_RETURN_IF_ERROR(Inputs(*sum, 2, 2, 1));
  GEMMSERVE_RETURN_IF_ERROR(KnownAttributes(*sum, {"keepdims", "noop_with_empty_axes"}));
  GEMMSERVE_ASSIGN_OR_RETURN(std::vector<int64_t> axes, Ints(*sum, 1, "axes"));
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t keepdims, IntAttribute(*sum, "keepdims", 1));
  if (node->input(0) != values || sum->input(0) != values || keepdims != 1 || axes.size() != 1 ||
      !LastAxis(axes[0], 2)) {
    return Fail(*node,
                "normalised weights are Div(v, ReduceSum(v, [-1], keepdims=1)) of "
                "TopK's values v");
  }
  layer_.normalise = true;
  return absl::OkStatus();
}

// MatMul(Mul(Mul(sg, Sigmoid(sg)), su), Ws_d), sg = MatMul(x, Ws_g), su = MatMul(x, Ws_u).
absl::Status Walker::WalkShared(const onnx::NodeProto& down) {
  GEMMSERVE_RETURN_IF_ERROR(Inputs(down, 2, 2, 1));
  GEMMSERVE_ASSIGN_OR_RETURN(layer_.shared_down, Weights(down, 1, false));
  GEMMSERVE_ASSIGN_OR_RETURN(const onnx::NodeProto* mul,
                             From(down.input(0), down, {"Mul"}, "the shared activations"));
  GEMMSERVE_RETURN_IF_ERROR(Inputs(*mul, 2, 2, 1));
  for (int side : {0, 1}) {
    auto it = producer_.find(mul->input(side));
    if (it == producer_.end() || it->second->op_type() != "Mul") continue;
    absl::StatusOr<std::string> sg = SiluInput(*it->second);
    if (!sg.ok()) continue;
    used_.insert(it->second);
    std::optional<WeightSource>* targets[] = {&layer_.shared_gate, &layer_.shared_up};
    const std::string names[] = {*sg, mul->input(1 - side)};
    for (int j = 0; j < 2; ++j) {
      GEMMSERVE_ASSIGN_OR_RETURN(const onnx::NodeProto* proj,
                                 From(names[j], *mul, {"MatMul"}, "the shared gate/up"));
      GEMMSERVE_RETURN_IF_ERROR(Inputs(*proj, 2, 2, 1));
      if (proj->input(0) != layer_.x) return Fail(*proj, "the shared expert reads the layer's x");
      GEMMSERVE_ASSIGN_OR_RETURN(*targets[j], Weights(*proj, 1, false));
    }
    return absl::OkStatus();
  }
  return Fail(*mul, "the shared activations are Mul(Mul(sg, Sigmoid(sg)), su)");
}

}  // namespace

absl::StatusOr<LayerGraph> WalkMoeLayerGraph(const onnx::GraphProto& graph, const Context& ctx) {
  Walker walker(graph, ctx);
  return walker.Walk();
}

}  // namespace gemmserve
