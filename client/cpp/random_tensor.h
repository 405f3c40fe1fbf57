// Random tensors for tests, the CLI's `random:` operands and the load
// generator: one place decides what "random input" means, so that every tool
// sends data the server accepts.
//
// Values are small so that no datatype overflows and results stay readable:
// floats uniform in [-1, 1) (FP16 and BF16 rounded to nearest-even from the
// FP32 value and stored as their 16-bit patterns), signed integers in [-8, 8],
// unsigned in [0, 8]. An index tensor (`groups` > 0) holds integers in
// [0, groups) instead, e.g. GroupedMatMul's group_indices. The generator is
// passed in, so a seed fixes the data.
//
//   std::mt19937_64 rng(seed);
//   GEMMSERVE_ASSIGN_OR_RETURN(HostTensor a,
//                              RandomTensor("A", DataType::kBF16, {2, 3}, rng));
//   GEMMSERVE_ASSIGN_OR_RETURN(HostTensor idx,
//                              RandomTensor("group_indices", DataType::kINT64, {2, 2},
//                                           rng, /*groups=*/4));
#ifndef GEMMSERVE_CLIENT_CPP_RANDOM_TENSOR_H_
#define GEMMSERVE_CLIENT_CPP_RANDOM_TENSOR_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cpp/host_tensor.h"
#include "server/tensor/datatype.h"

namespace gemmserve::client {

// Random data beyond this is surely a typo in a shape.
inline constexpr int64_t kMaxRandomTensorBytes = int64_t{1} << 31;

// INVALID_ARGUMENT for a negative dimension, a size that overflows or is over
// kMaxRandomTensorBytes, `groups` < 0, or `groups` > 0 with a floating-point
// type or with a range [0, groups) the type cannot hold.
absl::StatusOr<HostTensor> RandomTensor(std::string name, DataType type, std::vector<int64_t> shape,
                                        std::mt19937_64& rng, int64_t groups = 0);

}  // namespace gemmserve::client

#endif  // GEMMSERVE_CLIENT_CPP_RANDOM_TENSOR_H_
