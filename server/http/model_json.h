// JSON of the KServe v2 REST binding for everything but inference: server and
// model metadata, Triton's model configuration, statistics and repository
// index (the field names of the gRPC messages, as Triton's HTTP API writes
// them, with numbers as JSON numbers), and the body of a repository load.
#ifndef GEMMSERVE_SERVER_HTTP_MODEL_JSON_H_
#define GEMMSERVE_SERVER_HTTP_MODEL_JSON_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpc_service.pb.h"
#include "server/core/inference_engine.h"
#include "server/core/model.h"
#include "server/repository/model_repository.h"
#include "server/shm/shared_memory_manager.h"

namespace gemmserve {

void AppendJsonString(absl::string_view s, std::string* out);

std::string ServerMetadataJson(absl::string_view name, absl::string_view version,
                               const std::vector<std::string>& extensions);
std::string ModelMetadataJson(const ModelMetadata& metadata);
std::string ModelConfigJson(const ServedModel& served);
std::string ModelStatisticsJson(const std::vector<ModelStatistics>& stats);
std::string RepositoryIndexJson(const std::vector<ModelStatus>& index);
std::string ErrorJson(absl::string_view message);

// Triton's system shared memory over HTTP: the register body
// {"key": "/name", "offset": n, "byte_size": n} (offset optional), and the
// status answer [{"name", "key", "offset", "byte_size"}, ...].
struct ShmRegisterBody {
  std::string key;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};
absl::StatusOr<ShmRegisterBody> ParseShmRegisterRequest(absl::string_view body);
std::string ShmStatusJson(const std::vector<SharedMemoryRegionStatus>& regions);

// The body of POST /v2/repository/index: `{"ready": bool}` or empty.
absl::StatusOr<bool> ParseRepositoryIndexRequest(absl::string_view body);

// The body of POST /v2/repository/models/{m}/load, as Triton's: empty, or
// `{"parameters": {"config": "<config.pbtxt or JSON text>", "file:<path>":
// "<base64>"}}`. INVALID_ARGUMENT naming what is wrong.
absl::StatusOr<ModelLoadRequest> ParseModelLoadRequest(absl::string_view body);

// Triton's /v2/logging body: a flat object of settings (bools, uint32s,
// strings); empty: none. INVALID_ARGUMENT for anything else.
absl::StatusOr<inference::LogSettingsRequest> ParseLogSettingsRequest(absl::string_view body);
// The settings as Triton's flat JSON object, keys sorted.
std::string LogSettingsJson(const inference::LogSettingsResponse& response);

// Triton's /v2/trace/setting body: a flat object whose values are a string,
// a number (taken as its text), an array of strings, or null (clears the
// key); empty: none. INVALID_ARGUMENT for anything else.
absl::StatusOr<inference::TraceSettingRequest> ParseTraceSettingRequest(absl::string_view body);
// Triton's answer: trace_level an array, the other keys strings, sorted.
std::string TraceSettingJson(const inference::TraceSettingResponse& response);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_HTTP_MODEL_JSON_H_
