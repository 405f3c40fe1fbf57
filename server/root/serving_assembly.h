// Building Serving: the part of the composition root below the endpoints.
// From ServingOptions it makes each part in turn (the metrics registry, the
// token check, client shared memory, the tracer, the engine, the built-in
// models, the model repository, loaded) and hands them to Serving. It opens
// no socket and links no gRPC: Server (server.h) starts the endpoints on
// what it returns, and the tests of the layers below build their Serving
// here, as the process does.
//
//   ServingOptions options;
//   GEMMSERVE_RETURN_IF_ERROR(CheckServingOptions(options));
//   GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Serving> serving, AssembleServing(options));
#ifndef GEMMSERVE_SERVER_ROOT_SERVING_ASSEMBLY_H_
#define GEMMSERVE_SERVER_ROOT_SERVING_ASSEMBLY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/core/dynamic_batcher.h"
#include "server/core/inference_engine.h"
#include "server/metrics/metrics.h"
#include "server/models/sharded_layer.h"
#include "server/serving/serving.h"
#include "server/serving/tracer.h"
#include "server/shm/shared_memory_manager.h"

namespace gemmserve {

// The built-in models' dynamic batching (--builtin_* flags).
BatchingOptions DefaultBuiltinBatching();

// What Serving is built from; every field is a flag's (docs/flags.md).
struct ServingOptions {
  EngineOptions engine;  // its `metrics` is set by AssembleServing
  MetricsOptions metrics;
  BatchingOptions builtin_batching = DefaultBuiltinBatching();
  std::string model_repository;  // empty: built-in models only
  std::string auth_token_file;   // empty: no token needed
  SharedMemoryOptions shm;       // --allow_client_shm, --max_client_shm_bytes
  bool allow_log_file_setting = false;  // ServingParts::allow_log_file_setting
  // --trace_file (empty: tracing cannot be turned on) and the global trace
  // settings at start (--trace_level, --trace_rate, --trace_count,
  // --trace_log_frequency); Triton's defaults.
  std::string trace_file;
  TraceSettings trace = {false, 1000, -1, 0};
  TraceFileBounds trace_bounds;  // --trace_max_files, --trace_max_bytes
  // How a sharded layer's router reaches its shards (server/remote; set by
  // Server::Start, which links gRPC). Null: such a model is refused at load.
  RemoteExpertsFactory remote_experts;
};

// INVALID_ARGUMENT, naming the flag, for a value out of range: the engine's
// sizes and threads, the shared memory bound, the --builtin_* batching (as
// config.pbtxt's limits hold it) and the trace settings and bounds. Files
// are not opened here.
absl::Status CheckServingOptions(const ServingOptions& options);

// Builds every part and Serving on them, from options CheckServingOptions
// accepted. Loads the repository before it returns (a model that fails to
// load is listed, not fatal). INVALID_ARGUMENT for a token file that cannot
// be read or a --trace_file whose directory cannot be opened.
absl::StatusOr<std::unique_ptr<Serving>> AssembleServing(ServingOptions options);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_ROOT_SERVING_ASSEMBLY_H_
