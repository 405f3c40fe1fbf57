#include "server/root/serving_assembly.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/models/builtin_models.h"
#include "server/repository/configured_model.h"
#include "server/repository/model_repository.h"
#include "server/repository/triton_config.h"
#include "server/serving/token_authenticator.h"

namespace gemmserve {
namespace {

absl::Status CheckEngineOptions(const EngineOptions& e) {
  if (e.compute_threads < 0) {
    return absl::InvalidArgumentError("--compute_threads must not be negative");
  }
  if (e.max_output_bytes < 0) {
    return absl::InvalidArgumentError("--max_output_bytes must not be negative");
  }
  if (e.max_message_bytes <= 0) {
    return absl::InvalidArgumentError("--max_message_bytes must be positive");
  }
  if (e.max_inflight_bytes <= 0) {
    return absl::InvalidArgumentError("--max_inflight_bytes must be positive");
  }
  return absl::OkStatus();
}

// The built-in models' config: the --builtin_* flags' batching, as Triton's
// fields and gemmserve's max_batch_rows parameter.
inference::ModelConfig BuiltinConfig(const BatchingOptions& b) {
  inference::ModelConfig config;
  inference::ModelDynamicBatching* db = config.mutable_dynamic_batching();
  db->set_max_queue_delay_microseconds(
      static_cast<uint64_t>(absl::ToInt64Microseconds(b.max_queue_delay)));
  db->mutable_default_queue_policy()->set_max_queue_size(static_cast<uint32_t>(b.max_queue_size));
  (*config.mutable_parameters())[kMaxBatchRowsParameter].set_string_value(
      absl::StrCat(b.max_batch_rows));
  return config;
}

// The flags become the built-in models' config, read as any model's: one set
// of limits (config.pbtxt's).
absl::StatusOr<std::optional<BatchingOptions>> BuiltinBatching(const BatchingOptions& b) {
  if (b.max_queue_delay < absl::ZeroDuration() || b.max_batch_rows < 0 || b.max_queue_size < 0) {
    return absl::InvalidArgumentError(
        "--builtin_max_queue_delay_us, --builtin_max_batch_rows and --builtin_max_queue_size must "
        "not be negative");
  }
  absl::StatusOr<std::optional<BatchingOptions>> batching = BatchingFromConfig(BuiltinConfig(b));
  if (!batching.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--builtin_* flags: ", batching.status().message()));
  }
  return batching;
}

// The built-in models, with their config, into `engine`. The built-in models
// merge concurrent requests' problem lists into one kernel call
// (docs/models.md); their ModelConfig says so.
absl::Status InstallBuiltinModels(const BatchingOptions& flags, InferenceEngine& engine) {
  const absl::StatusOr<std::optional<BatchingOptions>> batching = BuiltinBatching(flags);
  if (!batching.ok()) return batching.status();
  const inference::ModelConfig config = BuiltinConfig(flags);
  std::vector<std::unique_ptr<Model>> models;
  models.push_back(MakeMatMulModel());
  models.push_back(MakeGroupedMatMulModel());
  for (std::unique_ptr<Model>& model : models) {
    GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Model> configured,
                               ConfiguredModel::Make(std::move(model), config, ""));
    engine.Install(std::move(configured), *batching);
  }
  return absl::OkStatus();
}

}  // namespace

BatchingOptions DefaultBuiltinBatching() {
  BatchingOptions b;
  b.max_queue_delay = absl::Microseconds(100);
  b.max_batch_rows = 4096;
  b.max_queue_size = 1024;
  return b;
}

absl::Status CheckServingOptions(const ServingOptions& o) {
  GEMMSERVE_RETURN_IF_ERROR(CheckEngineOptions(o.engine));
  if (o.shm.max_registered_bytes < 0) {
    return absl::InvalidArgumentError("--max_client_shm_bytes must not be negative");
  }
  GEMMSERVE_RETURN_IF_ERROR(BuiltinBatching(o.builtin_batching).status());
  return Tracer::CheckOptions(o.trace_file, o.trace, o.trace_bounds);
}

absl::StatusOr<std::unique_ptr<Serving>> AssembleServing(ServingOptions options) {
  ServingParts parts;
  options.metrics.version = kServerVersion;
  parts.metrics = Metrics::Create(options.metrics);
  if (!options.auth_token_file.empty()) {
    GEMMSERVE_ASSIGN_OR_RETURN(parts.auth, TokenAuthenticator::FromFile(options.auth_token_file));
  }
  parts.shm = std::make_unique<SharedMemoryManager>(options.shm);
  GEMMSERVE_ASSIGN_OR_RETURN(
      parts.tracer, Tracer::Create(options.trace_file, options.trace, options.trace_bounds));
  parts.allow_log_file_setting = options.allow_log_file_setting;
  options.engine.metrics = parts.metrics.get();
  parts.engine = std::make_unique<InferenceEngine>(options.engine);
  GEMMSERVE_RETURN_IF_ERROR(InstallBuiltinModels(options.builtin_batching, *parts.engine));
  parts.repository = std::make_unique<ModelRepository>(
      options.model_repository, parts.engine.get(),
      std::vector<std::string>{kGroupedMatMulModelName, kMatMulModelName},
      std::move(options.remote_experts));
  parts.repository->LoadAll();
  return std::make_unique<Serving>(std::move(parts));
}

}  // namespace gemmserve
