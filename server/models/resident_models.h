// Models whose weights live on the server (loaded from the model repository):
//
//   resident MatMul          A -> Y = A @ B, with B [K, N] resident; A is
//                            [..., K] (numpy.matmul with a 2-D B: the leading
//                            dimensions of A fold into rows).
//   resident GroupedMatMul   input [M, K], group_indices [M, S] -> output
//                            [M, S, N], with weights [G, K, N] and the
//                            optional bias [G, N] resident.
//
// A batch of requests runs as one fused call: their rows (and, for the
// grouped model, their index rows) are concatenated along M, so each expert's
// weights are read once for every token of every request in the batch; each
// request then gets its own rows of the result back.
//
//   ResidentMatMulSpec spec{"layer", "1", a_spec, "Y", std::move(b)};
//   engine.Install(MakeResidentMatMulModel(std::move(spec)), batching);
#ifndef GEMMSERVE_SERVER_MODELS_RESIDENT_MODELS_H_
#define GEMMSERVE_SERVER_MODELS_RESIDENT_MODELS_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/core/model.h"
#include "server/ops/quantized_weights.h"
#include "server/tensor/tensor.h"

namespace gemmserve {

struct ResidentMatMulSpec {
  std::string name, version;
  TensorSpec a;             // one datatype, rank >= 1, last dimension K (or -1)
  std::string output_name;  // Y
  Tensor b;                 // [K, N], same datatype as A
  // Or B kept quantized ([K, N]; b is then empty): its value type is A's.
  std::optional<QuantizedWeights> b_quantized;
  // accuracy_level (config): 4 multiplies b_quantized with A in 8 bits
  // (kernels/int8_dot.h); refused for weights that are not quantized.
  int accuracy_level = 0;
};

struct ResidentGroupedMatMulSpec {
  std::string name, version;
  TensorSpec input;          // [M, K]
  TensorSpec group_indices;  // [M, S], INT32 or INT64
  std::string output_name;
  Tensor weights;              // [G, K, N]
  std::optional<Tensor> bias;  // [G, N]
  // Or the weights kept quantized ([G, K, N]; weights is then empty): their
  // value type is the input's and the bias's.
  std::optional<QuantizedWeights> weights_quantized;
  int accuracy_level = 0;  // as ResidentMatMulSpec's
};

// INVALID_ARGUMENT naming the tensor when the specs and tensors disagree
// (datatypes, ranks, K, bias shape, S).
absl::StatusOr<std::unique_ptr<Model>> MakeResidentMatMulModel(ResidentMatMulSpec spec);
absl::StatusOr<std::unique_ptr<Model>> MakeResidentGroupedMatMulModel(
    ResidentGroupedMatMulSpec spec);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_MODELS_RESIDENT_MODELS_H_
