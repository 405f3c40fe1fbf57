// The API's answers as KServe v2 / Triton protocol messages, built from the
// core's types: model metadata, statistics and the repository index. (The
// ModelConfig answer is the config the model was loaded with, completed at
// load: configured_model.h.) Serving fills its responses with these; both
// front ends send those messages (gRPC as they are, HTTP as their JSON), so
// each answer is built in one place.
//
//   inference::ModelMetadataResponse response;
//   EncodeModelMetadata(served->metadata(), engine.Versions(name), &response);
#ifndef GEMMSERVE_SERVER_SERVING_MODEL_PROTOS_H_
#define GEMMSERVE_SERVER_SERVING_MODEL_PROTOS_H_

#include <string>
#include <vector>

#include "grpc_service.pb.h"
#include "model_config.pb.h"
#include "server/core/model_statistics.h"
#include "server/core/served_model.h"
#include "server/core/model.h"
#include "server/repository/model_repository.h"

namespace gemmserve {

// An entry of RepositoryIndex: Triton's states READY, LOADING and
// UNAVAILABLE (a failed load or an unloaded model, with its reason).
void EncodeModelIndexEntry(const ModelStatus& status,
                           inference::RepositoryIndexResponse::ModelIndex* out);

// Name, `versions` (every version of the model served), platform and
// tensors; one datatype per tensor (the protocol has one): the default, the
// first the model accepts.
void EncodeModelMetadata(const ModelMetadata& metadata, const std::vector<std::string>& versions,
                         inference::ModelMetadataResponse* response);

// Triton's statistics; the stages gemmserve does not have (compute_input,
// compute_output, cache_hit, cache_miss) are present and zero.
void EncodeModelStatistics(const ModelStatistics& stats, inference::ModelStatistics* out);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVING_MODEL_PROTOS_H_
