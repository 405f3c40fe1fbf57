// The two built-in models, which take every operand in the request:
//
//   matmul           A, B -> Y            numpy.matmul, BF16 FP16 FP32 FP64
//                                         INT32 INT64 UINT32 UINT64 (A and B alike)
//   grouped_matmul   input, weights, group_indices, [bias] -> output
//                                         ONNX GroupedMatMul-29, BF16 FP16 FP32
//                                         FP64 values, INT32/INT64 indices
//
//   std::vector<std::unique_ptr<Model>> models;
//   models.push_back(MakeMatMulModel());
//   models.push_back(MakeGroupedMatMulModel());
#ifndef GEMMSERVE_SERVER_MODELS_BUILTIN_MODELS_H_
#define GEMMSERVE_SERVER_MODELS_BUILTIN_MODELS_H_

#include <memory>

#include "server/core/model.h"

namespace gemmserve {

inline constexpr char kMatMulModelName[] = "matmul";
inline constexpr char kGroupedMatMulModelName[] = "grouped_matmul";
inline constexpr char kBuiltinVersion[] = "1";
inline constexpr char kPlatform[] = "gemmserve";

std::unique_ptr<Model> MakeMatMulModel();
std::unique_ptr<Model> MakeGroupedMatMulModel();

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_MODELS_BUILTIN_MODELS_H_
