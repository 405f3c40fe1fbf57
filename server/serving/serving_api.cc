// Serving's API apart from inference: metadata, configuration, statistics,
// the repository and shared memory, each answered from the one place both
// front ends call.
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"
#include "server/core/overload.h"
#include "server/repository/configured_model.h"
#include "server/serving/model_protos.h"
#include "server/serving/serving.h"

namespace gemmserve {
namespace {

constexpr char kServerName[] = "gemmserve";

// The parameters of a load, moved out of the request: `config` a string,
// `file:<path>` bytes.
absl::StatusOr<ModelLoadRequest> LoadParameters(inference::RepositoryModelLoadRequest& request) {
  ModelLoadRequest load;
  for (auto& [key, param] : *request.mutable_parameters()) {
    using Parameter = inference::ModelRepositoryParameter;
    if (key == "config") {
      if (param.parameter_choice_case() != Parameter::kStringParam) {
        return absl::InvalidArgumentError(
            "parameter 'config': expected a string (Triton's JSON form of a ModelConfig, or "
            "config.pbtxt text)");
      }
      load.config = std::move(*param.mutable_string_param());
    } else if (absl::StartsWith(key, "file:")) {
      if (param.parameter_choice_case() != Parameter::kBytesParam) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter '", ClientText(key), "': 'file:' parameters carry bytes"));
      }
      load.files[key.substr(5)] = std::move(*param.mutable_bytes_param());
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown load parameter '", ClientText(key), "'; expected 'config' or 'file:<path>'"));
    }
  }
  return load;
}

}  // namespace

void Serving::ServerLive(inference::ServerLiveResponse* response) const {
  response->set_live(true);
}

void Serving::ServerReady(inference::ServerReadyResponse* response) const {
  response->set_ready(!draining());
}

void Serving::ModelReady(const inference::ModelReadyRequest& request,
                         inference::ModelReadyResponse* response) const {
  response->set_ready(ModelReadiness(request).ok());
}

absl::Status Serving::ModelReadiness(const inference::ModelReadyRequest& request) const {
  // A model that depends on other servers (a sharded layer's router) is
  // ready only while they are.
  GEMMSERVE_ASSIGN_OR_RETURN(auto served, engine_->FindModel(request.name(), request.version()));
  return served->model().Available();
}

absl::Status Serving::ServerMetadata(Authorization authorization,
                                     inference::ServerMetadataResponse* response) const {
  GEMMSERVE_RETURN_IF_ERROR(Authenticate(authorization));
  response->set_name(kServerName);
  response->set_version(kServerVersion);
  for (std::string& extension : Extensions()) response->add_extensions(std::move(extension));
  return absl::OkStatus();
}

absl::Status Serving::ModelMetadata(Authorization authorization,
                                    const inference::ModelMetadataRequest& request,
                                    inference::ModelMetadataResponse* response) const {
  GEMMSERVE_RETURN_IF_ERROR(Authenticate(authorization));
  GEMMSERVE_ASSIGN_OR_RETURN(auto served, engine_->FindModel(request.name(), request.version()));
  EncodeModelMetadata(served->metadata(), engine_->Versions(request.name()), response);
  return absl::OkStatus();
}

absl::Status Serving::ModelConfig(Authorization authorization,
                                  const inference::ModelConfigRequest& request,
                                  inference::ModelConfigResponse* response) const {
  GEMMSERVE_RETURN_IF_ERROR(Authenticate(authorization));
  GEMMSERVE_ASSIGN_OR_RETURN(auto served, engine_->FindModel(request.name(), request.version()));
  const inference::ModelConfig* config = LoadedConfig(served->model());
  if (config == nullptr) {
    return absl::InternalError(absl::StrCat("model '", request.name(), "' has no config"));
  }
  *response->mutable_config() = *config;  // as loaded, completed at load
  return absl::OkStatus();
}

absl::Status Serving::ModelStatistics(Authorization authorization,
                                      const inference::ModelStatisticsRequest& request,
                                      inference::ModelStatisticsResponse* response) const {
  GEMMSERVE_RETURN_IF_ERROR(Authenticate(authorization));
  if (request.name().empty()) {
    for (const auto& served : engine_->models()) {
      EncodeModelStatistics(served->statistics(), response->add_model_stats());
    }
    return absl::OkStatus();
  }
  if (!request.version().empty()) {
    GEMMSERVE_ASSIGN_OR_RETURN(auto served, engine_->FindModel(request.name(), request.version()));
    EncodeModelStatistics(served->statistics(), response->add_model_stats());
    return absl::OkStatus();
  }
  // Every served version, as Triton answers a name without a version.
  GEMMSERVE_RETURN_IF_ERROR(engine_->FindModel(request.name(), "").status());
  for (const std::string& version : engine_->Versions(request.name())) {
    absl::StatusOr<std::shared_ptr<const ServedModel>> served =
        engine_->FindModel(request.name(), version);
    if (served.ok()) EncodeModelStatistics((*served)->statistics(), response->add_model_stats());
  }
  return absl::OkStatus();
}

absl::Status Serving::RepositoryIndex(Authorization authorization,
                                      const inference::RepositoryIndexRequest& request,
                                      inference::RepositoryIndexResponse* response) const {
  GEMMSERVE_RETURN_IF_ERROR(Authenticate(authorization));
  for (ModelStatus& status : repository_->Index()) {
    if (status.state == ModelState::kReady) {  // and what it depends on (a router's shards)
      auto served = engine_->FindModel(status.name, status.version);
      absl::Status available = served.ok() ? (*served)->model().Available() : served.status();
      if (!available.ok()) {
        status.state = ModelState::kFailed;
        status.reason = std::string(available.message());
      }
    }
    if (request.ready() && status.state != ModelState::kReady) continue;
    EncodeModelIndexEntry(status, response->add_models());
  }
  return absl::OkStatus();
}

void Serving::RepositoryModelLoad(Authorization authorization,
                                  inference::RepositoryModelLoadRequest request,
                                  Reservation reserved, StatusDone done) {
  absl::Status refused = Authenticate(authorization);
  absl::StatusOr<ModelLoadRequest> load = refused.ok() ? LoadParameters(request) : refused;
  if (!load.ok()) return std::move(done)(load.status());
  repository_->LoadAsync(
      std::move(*request.mutable_model_name()), *std::move(load),
      [done = std::move(done), reserved = std::move(reserved)](absl::Status s) mutable {
        std::move(done)(s);
        reserved.Release();  // the load's files are gone
      });
}

absl::StatusOr<Reservation> Serving::ReserveLoad(int64_t bytes) {
  absl::StatusOr<Reservation> held = Reserve(bytes, "the model load");
  if (held.ok() || !IsQueueFull(held.status())) return held;
  // A load is not retried by clients as a request is: told as exhausted.
  return absl::ResourceExhaustedError(
      absl::StrCat("the model load's ", bytes, " bytes do not fit in what --max_inflight_bytes=",
                   max_inflight_bytes(), " leaves now; retry later"));
}

void Serving::RepositoryModelUnload(Authorization authorization,
                                    const inference::RepositoryModelUnloadRequest& request,
                                    StatusDone done) {
  if (absl::Status refused = Authenticate(authorization); !refused.ok()) {
    return std::move(done)(refused);
  }
  repository_->UnloadAsync(request.model_name(), std::move(done));
}

absl::Status Serving::SystemSharedMemoryStatus(
    Authorization authorization, const inference::SystemSharedMemoryStatusRequest& request,
    inference::SystemSharedMemoryStatusResponse* response) {
  GEMMSERVE_RETURN_IF_ERROR(Authenticate(authorization));
  GEMMSERVE_ASSIGN_OR_RETURN(auto regions, shm_->Status(ShmOwner(authorization), request.name()));
  for (const SharedMemoryRegionStatus& r : regions) {
    auto& out = (*response->mutable_regions())[r.name];
    out.set_name(r.name);
    out.set_key(r.key);
    out.set_offset(r.offset);
    out.set_byte_size(r.byte_size);
  }
  return absl::OkStatus();
}

absl::Status Serving::SystemSharedMemoryRegister(
    Authorization authorization, const inference::SystemSharedMemoryRegisterRequest& request) {
  GEMMSERVE_RETURN_IF_ERROR(Authenticate(authorization));
  return shm_->Register(ShmOwner(authorization), request.name(), request.key(), request.offset(),
                        request.byte_size());
}

absl::Status Serving::SystemSharedMemoryUnregister(
    Authorization authorization, const inference::SystemSharedMemoryUnregisterRequest& request) {
  GEMMSERVE_RETURN_IF_ERROR(Authenticate(authorization));
  return shm_->Unregister(ShmOwner(authorization), request.name());
}

absl::Status Serving::CheckSharedMemoryEnabled() const { return shm_->CheckEnabled(); }

absl::StatusOr<Reservation> Serving::Reserve(int64_t bytes, absl::string_view what) {
  return engine_->Reserve(bytes, what);
}

absl::Status Serving::Grow(Reservation* reservation, int64_t more, absl::string_view what) {
  return engine_->Grow(reservation, more, what);
}

}  // namespace gemmserve
