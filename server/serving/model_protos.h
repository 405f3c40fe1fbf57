// The API's answers as KServe v2 / Triton protocol messages, built from the
// core's types: model metadata, Triton's ModelConfig, statistics and the
// repository index. Serving fills its responses with these; both front ends
// send those messages (gRPC as they are, HTTP as their JSON), so each answer
// is built in one place.
//
//   inference::ModelConfigResponse response;
//   EncodeModelConfig(served, response.mutable_config());
#ifndef GEMMSERVE_SERVER_SERVING_MODEL_PROTOS_H_
#define GEMMSERVE_SERVER_SERVING_MODEL_PROTOS_H_

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

// Name, versions, platform and tensors; one datatype per tensor (the
// protocol has one): the default, the first the model accepts.
void EncodeModelMetadata(const ModelMetadata& metadata, inference::ModelMetadataResponse* response);

// Triton's ModelConfig for a served model: tensors, dynamic batching (the
// queue policy carries max_queue_size and the default timeout; max_batch_rows
// is a parameter), and the model's own parameters (e.g. "groups").
void EncodeModelConfig(const ServedModel& served, inference::ModelConfig* config);

// Triton's statistics; the stages gemmserve does not have (compute_input,
// compute_output, cache_hit, cache_miss) are present and zero.
void EncodeModelStatistics(const ModelStatistics& stats, inference::ModelStatistics* out);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_SERVING_MODEL_PROTOS_H_
