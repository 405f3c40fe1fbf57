// JSON of the KServe v2 REST binding for everything but inference, as
// Triton's HTTP API writes and reads it. Answers are the API's protocol
// messages (Serving's responses) through protobuf's JSON mapping
// (google::protobuf::util::MessageToJsonString, field names as in the
// .proto, every scalar present), shaped where Triton's REST form differs:
// 64-bit integers as JSON numbers (protobuf writes them as strings), the
// repository index and the shared memory status as arrays, log and trace
// settings as flat objects. Request bodies that are protocol messages (the
// index, a shared memory registration) are read by protobuf's JSON parser;
// those Triton writes in a form of its own (a load's parameters, log and
// trace settings) by the parsers here, into the same messages.
//
//   inference::ModelConfigResponse response;
//   GEMMSERVE_RETURN_IF_ERROR(serving.ModelConfig(token, request, &response));
//   GEMMSERVE_ASSIGN_OR_RETURN(std::string body, ModelConfigJson(response));
#ifndef GEMMSERVE_SERVER_HTTP_MODEL_JSON_H_
#define GEMMSERVE_SERVER_HTTP_MODEL_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "grpc_service.pb.h"

namespace gemmserve {

// `s` as a JSON string literal (quoted, escaped), appended to `out`.
void AppendJsonString(absl::string_view s, std::string* out);
// {"error": "<message>"}
std::string ErrorJson(absl::string_view message);

// A message as Triton's REST API writes it: protobuf's JSON with the .proto's
// field names, every scalar field (defaults too), and 64-bit integers as
// numbers. INTERNAL if protobuf cannot print it.
absl::StatusOr<std::string> ProtoJson(const google::protobuf::Message& message);

// The answers of the routes, each in Triton's REST form: server and model
// metadata, the model config (the ModelConfig object itself), statistics
// ({"model_stats": [...]}) as ProtoJson; the index and the shared memory
// status as arrays of their entries (regions sorted by name); log settings
// as a flat object of values; trace settings as a flat object with
// trace_level an array and the other values strings. Keys sorted.
absl::StatusOr<std::string> ServerMetadataJson(const inference::ServerMetadataResponse& response);
absl::StatusOr<std::string> ModelMetadataJson(const inference::ModelMetadataResponse& response);
absl::StatusOr<std::string> ModelConfigJson(const inference::ModelConfigResponse& response);
absl::StatusOr<std::string> ModelStatisticsJson(
    const inference::ModelStatisticsResponse& response);
absl::StatusOr<std::string> RepositoryIndexJson(
    const inference::RepositoryIndexResponse& response);
absl::StatusOr<std::string> ShmStatusJson(
    const inference::SystemSharedMemoryStatusResponse& response);
absl::StatusOr<std::string> LogSettingsJson(const inference::LogSettingsResponse& response);
absl::StatusOr<std::string> TraceSettingJson(const inference::TraceSettingResponse& response);

// The body of POST /v2/repository/index (`{"ready": bool}`, or empty) and of
// a shared memory registration (`{"key": "/name", "offset": n, "byte_size":
// n}`), through protobuf's JSON parser: INVALID_ARGUMENT with its message for
// malformed JSON, an unknown field or a value of the wrong type.
absl::StatusOr<inference::RepositoryIndexRequest> ParseRepositoryIndexRequest(
    absl::string_view body);
absl::StatusOr<inference::SystemSharedMemoryRegisterRequest> ParseShmRegisterRequest(
    absl::string_view body);

// The body of POST /v2/repository/models/{m}/load, as Triton's: empty, or
// `{"parameters": {"config": "<JSON or config.pbtxt text>", "file:<path>":
// "<base64>"}}`, into the load's parameters (`file:` ones decoded to bytes;
// Serving judges the keys). INVALID_ARGUMENT naming what is wrong.
absl::StatusOr<inference::RepositoryModelLoadRequest> ParseModelLoadRequest(
    absl::string_view body);

// Triton's /v2/logging body: a flat object of settings (bools, uint32s,
// strings); empty: none. INVALID_ARGUMENT for anything else.
absl::StatusOr<inference::LogSettingsRequest> ParseLogSettingsRequest(absl::string_view body);

// Triton's /v2/trace/setting body: a flat object whose values are a string,
// a number (taken as its text), an array of strings, or null (clears the
// key); empty: none. INVALID_ARGUMENT for anything else.
absl::StatusOr<inference::TraceSettingRequest> ParseTraceSettingRequest(absl::string_view body);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_HTTP_MODEL_JSON_H_
