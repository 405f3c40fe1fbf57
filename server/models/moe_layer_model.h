// A resident mixture-of-experts layer (issue 41): the expert FFN of OLMoE,
// Mixtral, Qwen-MoE or DeepSeek as one model, computed by the fused layer op
// (server/ops/moe_layer.h). Requests send the hidden states x [M, K] (and,
// when the caller routed, ids and w [M, S]); the answer is out [M, K].
//
// A batch of requests runs as one layer call: their rows are concatenated
// along M, so each chosen expert's weights are read once for the batch. A
// request whose ids are out of range fails alone, before any weight is read.
//
//   MoeLayerSpec spec = ...;  // from the ONNX graph (repository/moe_layer_graph.h)
//   GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, MakeMoeLayerModel(std::move(spec)));
#ifndef GEMMSERVE_SERVER_MODELS_MOE_LAYER_MODEL_H_
#define GEMMSERVE_SERVER_MODELS_MOE_LAYER_MODEL_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/core/model.h"
#include "server/ops/moe_layer.h"
#include "server/models/sharded_layer.h"
#include "server/ops/quantized_weights.h"
#include "server/tensor/tensor.h"

namespace gemmserve {

// One projection as loaded: row-major values of T (packed at load where
// panels serve) or kept quantized (dense then empty), and an optional bias.
struct MoeWeightsSpec {
  Tensor dense;  // [G, K, N]; [K, N] for the shared expert
  std::optional<QuantizedWeights> quantized;
  std::optional<Tensor> bias;  // [G, N]

  const Shape& shape() const { return quantized ? quantized->shape() : dense.shape(); }
  DataType type() const { return quantized ? quantized->value_type() : dense.type(); }
};

struct MoeLayerSpec : MoeLayerForm {
  std::string name, version;
  TensorSpec x;                      // [M, K] of T
  std::optional<TensorSpec> ids, w;  // given routing: [M, S], INT32/INT64 and T
  std::string output_name;           // [M, K] of T
  // gate/up fused [G, K, 2I], or gate and up [G, K, I]; down [G, I, K].
  std::optional<MoeWeightsSpec> gate_up, gate, up;
  MoeWeightsSpec down;
  std::optional<Tensor> router;  // [K, G] of T; held in FP32
  // The shared expert: [K, I_s], [K, I_s], [I_s, K], all or none.
  std::optional<MoeWeightsSpec> shared_gate, shared_up, shared_down;
  // accuracy_level (config): 4 runs every projection on 8-bit activations;
  // refused unless all of them are quantized.
  int accuracy_level = 0;
  // A shard (sharded_layer.h): the model's G experts are experts
  // [first, last) of the whole layer. It takes the caller-routed form with
  // the whole layer's ids (pairs of other shards add nothing; a negative id
  // is refused) and w of T or FP32, has no shared expert, and answers the
  // FP32 partial sum.
  std::optional<ExpertRange> expert_range;
  // A router: its routed experts are on these shards (gate/up and down are
  // then absent; G, I and the types come from the graph), `shards` the
  // config's text as the model reports it.
  std::shared_ptr<RemoteExperts> remote;
  std::string shards;
};

// INVALID_ARGUMENT naming the tensor when the spec disagrees with itself
// (types, shapes against K, I, G, S, routing inputs, a shard's range or a
// router's missing experts); RESOURCE_EXHAUSTED if the packed weights cannot
// be allocated.
absl::StatusOr<std::unique_ptr<Model>> MakeMoeLayerModel(MoeLayerSpec spec);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_MODELS_MOE_LAYER_MODEL_H_
