// Deterministic inputs for gemmserve-bench and its tests: random tensors and
// the routings (group_indices) of shared/BENCHMARKS.md. The same seed gives the
// same data on every machine, so runs compare.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(Tensor w, RandomTensor(DataType::kBF16, {g, k, n}, /*seed=*/1));
//   GEMMSERVE_ASSIGN_OR_RETURN(Tensor idx, MakeRouting(m, s, g, Routing::kSkewed, /*seed=*/2));
#ifndef GEMMSERVE_SERVER_BENCH_BENCH_INPUTS_H_
#define GEMMSERVE_SERVER_BENCH_BENCH_INPUTS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "server/tensor/datatype.h"
#include "server/tensor/shape.h"
#include "server/tensor/tensor.h"

namespace gemmserve {

// Floating types: uniform in [-1, 1) (half types rounded from FP32); integer
// types: uniform in [-8, 8] ([0, 16] unsigned). No kernel measured here runs
// faster or slower on particular values, so nothing more realistic is needed.
absl::StatusOr<Tensor> RandomTensor(DataType type, Shape shape, uint64_t seed);

enum class Routing {
  kUniform,  // each token picks S distinct groups uniformly at random
  kSkewed,   // as kUniform, but every even token puts group 0 in slot 0
             // (half the tokens share one expert, the other S-1 slots are
             // drawn from the remaining groups)
};

// group_indices [M, S] as INT64. INVALID_ARGUMENT when S > G.
absl::StatusOr<Tensor> MakeRouting(int64_t m, int64_t s, int64_t g, Routing routing, uint64_t seed);

// How many of the G groups `indices` (INT32 or INT64, already validated) uses.
int64_t CountDistinctGroups(const Tensor& indices, int64_t g);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_BENCH_BENCH_INPUTS_H_
