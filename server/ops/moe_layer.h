// A whole mixture-of-experts FFN layer (issue 41) in one call:
//
//   route:    ids, w = top-S of the router (or given by the caller)
//   experts:  for each token m and slot s, with e = ids[m, s]:
//               g, u = x[m] @ W_gate[e] (+b), x[m] @ W_up[e] (+b)   (fused: one [K, 2I])
//               a    = act(g) * u                                    act: SiLU or GELU
//               y    = a @ W_down[e] (+b)
//   combine:  out[m] = sum_s w[m, s] * y[m, s]  (+ a shared expert's SiLU FFN of x[m])
//
// No [M, S, 2I] or [M, S, K] tensor is made. The (token, slot) pairs are
// sorted by expert and cut into waves of at most WaveRows() rows; each wave
// runs its experts' gate/up GEMMs into one tile (FP32 accumulation, the
// tile in T), applies the activation in place, runs the down GEMMs on the
// tile into a second one, and adds each row, scaled by its routing weight,
// into an FP32 accumulator of the output, which is rounded to T once.
// Every GEMM goes through the scheduler (gemm_scheduler.h), so decode streams
// each chosen expert's matrices once and larger waves run on the resident
// panels, as GroupedMatMul does.
//
// Routing computed in the layer runs in FP32 (x widened, the router held in
// FP32): logits, then softmax and top-S (ties to the lower index, as ONNX's
// TopK) or top-S and a softmax over them, optionally renormalised.
//
//   MoeLayer layer = ...;            // views of the model's resident weights
//   MoeLayerCall call{m, x, nullptr, nullptr, out};
//   GEMMSERVE_RETURN_IF_ERROR(RunMoeLayer(layer, call, threads));
#ifndef GEMMSERVE_SERVER_OPS_MOE_LAYER_H_
#define GEMMSERVE_SERVER_OPS_MOE_LAYER_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "server/ops/grouped_matmul.h"
#include "server/tensor/tensor.h"

namespace gemmserve {

enum class MoeActivation { kSilu, kGelu, kGeluTanh };
enum class MoeRouting { kGiven, kSoftmaxTopK, kTopKSoftmax };

// "silu", "gelu", "gelu_tanh"; "given", "softmax_topk", "topk_softmax".
const char* MoeActivationName(MoeActivation a);
const char* MoeRoutingName(MoeRouting r);

// One projection's resident weights: [G, K, N] (or [K, N] for the shared
// expert) and its optional bias [G, N] ([N]), of the layer's type T.
struct MoeProjection {
  GroupedWeights weights;
  const Tensor* bias = nullptr;
};

// What a layer computes, apart from its weights: its dimensions and form.
// The graph reader (repository/moe_layer_graph.h), the model's spec and the
// op's view each hold one, copied whole from one to the next.
struct MoeLayerForm {
  int64_t k = 0, i = 0, g = 0, s = 0;
  MoeActivation activation = MoeActivation::kSilu;
  MoeRouting routing = MoeRouting::kGiven;
  bool normalise = false;  // softmax_topk: the top-S weights divided by their sum
};

// Views of a layer's resident weights; the model owns them.
struct MoeLayer : MoeLayerForm {
  DataType type = DataType::kFP32;  // T: FP32, FP16 or BF16
  // gate/up: gate_up [G, K, 2I] (g the first I columns), or gate and up [G, K, I].
  std::optional<MoeProjection> gate_up, gate, up;
  std::optional<MoeProjection> down;  // [G, I, K]
  const Tensor* router = nullptr;     // FP32 [K, G]; routing computed in the layer
  // The shared expert (SiLU FFN of width shared_i), all three or none.
  std::optional<MoeProjection> shared_gate, shared_up, shared_down;
  int64_t shared_i = 0;
  // Quantized projections on 8-bit activations (GemmProblem::int8_activations).
  bool int8_activations = false;
  // A shard of a sharded layer (issue 53) holds experts [first_expert,
  // first_expert + g) of the whole layer: ids are the whole layer's, and a
  // pair whose expert lies outside the range adds nothing. The router of a
  // sharded layer holds none (experts_elsewhere: no gate/up/down; every
  // routed pair adds nothing here, only its shared expert is computed).
  int64_t first_expert = 0;
  bool experts_elsewhere = false;
  // out is the FP32 sum [M, K], not rounded to T (a shard's partial sum).
  bool fp32_out = false;
};

// One call: m tokens. `ids` and `w` ([M, S]) when the routing is given (the
// ids already checked to lie in [0, G), or, for a shard, to be >= 0), null
// when the layer routes.
struct MoeLayerCall {
  int64_t m = 0;
  const void* x = nullptr;       // [M, K] of T
  const int64_t* ids = nullptr;  // [M, S]
  const float* w = nullptr;      // [M, S]
  void* out = nullptr;           // [M, K] of T (of FP32 with fp32_out)
};

// Rows a wave holds at most, for a layer of type T: its two tiles stay near
// kMoeWaveBytes, between 64 and 2048 rows. Decode's few rows fit in L2
// whatever the cap. At prefill, waves of 4 MB ran 0.91-0.96x the composed
// layer (two GroupedMatMul calls) on mixtral-small and olmoe at M = 256 and
// 1024, 16 MB ones 1.00-1.10x in one gemmserve-bench run: more experts per
// scheduler call keep both threads busy to the end of each wave.
inline constexpr int64_t kMoeWaveBytes = int64_t{16} << 20;
int64_t MoeWaveRows(const MoeLayer& layer);

// Bytes RunMoeLayer holds beyond x, ids, w and out for m tokens with up to
// `threads` threads: the routing, the sorted pairs, the two tiles, the FP32
// accumulator, and the scheduler's scratch for one wave (GemmWorkBytes). An
// upper bound known before the call, that grows with m no faster than
// linearly. Saturates.
int64_t MoeLayerWorkBytes(const MoeLayer& layer, int64_t m, int threads);

// Flops of m tokens: 2 * M * (S * 3 * K * I + shared 3 * K * I_s + router K * G); a
// router's (experts_elsewhere) leave out S * 3 * K * I, which its shards count.
int64_t MoeLayerFlops(const MoeLayer& layer, int64_t m);

// Bytes RouteMoeLayer holds for m tokens beyond ids and w (0 for given
// routing).
int64_t MoeRoutingWorkBytes(const MoeLayer& layer, int64_t m, int threads);

// Runs the layer. *weight_bytes_read (may be null): the bytes of weights
// the call read, each chosen expert's matrices (and the shared expert's and
// the router) counted once, as GemmWeightBytes counts them.
// RESOURCE_EXHAUSTED if scratch memory is denied.
absl::Status RunMoeLayer(const MoeLayer& layer, const MoeLayerCall& call, int threads,
                         int64_t* weight_bytes_read = nullptr);

// The routing alone, as the layer computes it: FP32 logits of `x` ([M, K] of
// T) against the router, then ids and weights [M, S]. For tests and for
// RunMoeLayer.
absl::Status RouteMoeLayer(const MoeLayer& layer, int64_t m, const void* x, int64_t* ids, float* w,
                           int threads);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_MOE_LAYER_H_
