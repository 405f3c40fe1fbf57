// Translation between KServe protocol messages and the core's request and
// result types. Decoding does not copy tensor data: the view points into the
// ModelInferRequest, which must outlive it. The checks here are the ones
// about the envelope itself: raw_input_contents must pair one to one with
// the inputs and must not be mixed with typed contents, and an input may use
// only one typed field.
#ifndef GEMMSERVE_SERVER_SERVICE_INFER_CODEC_H_
#define GEMMSERVE_SERVER_SERVICE_INFER_CODEC_H_

#include "absl/status/statusor.h"
#include "grpc_service.pb.h"
#include "server/core/inference_engine.h"
#include "server/core/inference_request.h"
#include "server/core/model.h"

namespace gemmserve {

// INVALID_ARGUMENT for an envelope error, RESOURCE_EXHAUSTED if the view
// cannot be allocated.
absl::StatusOr<InferRequestView> DecodeInferRequest(const inference::ModelInferRequest& request);

// Outputs go to raw_output_contents, in the order of `result.outputs`.
// RESOURCE_EXHAUSTED (and `response` cleared) if the copy cannot be allocated.
absl::Status EncodeInferResponse(const InferResult& result, const std::string& id,
                                 inference::ModelInferResponse* response);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVICE_INFER_CODEC_H_
