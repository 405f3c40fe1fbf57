// Generic request validation against a model's metadata: every input named
// once and known, a required input present, a datatype that exists and that
// the input accepts, a valid shape, and exactly the bytes or elements the
// shape needs in a contents field that fits the datatype. Model-specific shape
// rules (MatMul's K, GroupedMatMul's G) are left to Model::Prepare.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(BoundInputs bound, BindInputs(model.metadata(), request));
#ifndef GEMMSERVE_SERVER_CORE_INPUT_BINDING_H_
#define GEMMSERVE_SERVER_CORE_INPUT_BINDING_H_

#include "absl/status/statusor.h"
#include "server/core/inference_request.h"
#include "server/core/model.h"

namespace gemmserve {

// INVALID_ARGUMENT with a message that names the tensor, what was expected
// and what came. Never reads tensor data. The result points into `request`.
absl::StatusOr<BoundInputs> BindInputs(const ModelMetadata& metadata,
                                       const InferRequestView& request);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_INPUT_BINDING_H_
