#include "server/core/inference_engine.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"
#include "server/core/input_binding.h"

namespace gemmserve {
namespace {

// Room for the response's envelope (model name and version, output names,
// datatypes and shapes, field tags) beside the tensor bytes and the echoed id.
constexpr int64_t kResponseEnvelopeBytes = 1024;


absl::Status CheckOutputLimits(const PreparedInference& prepared, int64_t id_bytes,
                               const EngineOptions& options) {
  const int64_t bytes = prepared.output_bytes();
  auto describe = [&] {
    std::string shapes;
    for (const auto& [name, shape] : prepared.output_shapes()) {
      absl::StrAppend(&shapes, shapes.empty() ? "" : ", ", "'", name, "' ", ShapeToString(shape));
    }
    return shapes;
  };
  if (bytes > options.max_output_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "output ", describe(), " would be ", bytes, " bytes, over the server's limit of ",
        options.max_output_bytes, " (raise it with --max_output_bytes)"));
  }
  const int64_t response_bytes = bytes + id_bytes + kResponseEnvelopeBytes;
  if (response_bytes > options.max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "output ", describe(), " would be ", bytes, " bytes, making a response of about ",
        response_bytes, " bytes with the request id, over the message limit of ",
        options.max_message_bytes, " (raise it with --max_message_bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace

InferenceEngine::InferenceEngine(EngineOptions options, std::vector<std::unique_ptr<Model>> models)
    : options_(options), models_(std::move(models)), pool_(options.compute_threads) {}

absl::StatusOr<const Model*> InferenceEngine::FindModel(absl::string_view name,
                                                        absl::string_view version) const {
  if (name.empty()) return absl::InvalidArgumentError("model name is empty");
  for (const auto& model : models_) {
    const ModelMetadata& m = model->metadata();
    if (m.name != name) continue;
    if (version.empty() ||
        std::find(m.versions.begin(), m.versions.end(), version) != m.versions.end()) {
      return model.get();
    }
    return absl::NotFoundError(
        absl::StrCat("model '", m.name, "' has no version '", ClientText(version), "'"));
  }
  return absl::NotFoundError(absl::StrCat("unknown model '", ClientText(name), "'"));
}

std::vector<const Model*> InferenceEngine::models() const {
  std::vector<const Model*> out;
  for (const auto& m : models_) out.push_back(m.get());
  return out;
}

absl::Status InferenceEngine::Submit(InferRequestView request_view,
                                     std::function<bool()> is_cancelled, DoneCallback done) {
  // On the heap, so the bound inputs' pointers into it survive the move into
  // the task below.
  auto request = std::make_unique<InferRequestView>(std::move(request_view));
  GEMMSERVE_ASSIGN_OR_RETURN(const Model* model,
                             FindModel(request->model_name, request->model_version));
  const ModelMetadata& metadata = model->metadata();
  for (absl::string_view wanted : request->requested_outputs) {
    bool known = std::any_of(metadata.outputs.begin(), metadata.outputs.end(),
                             [&](const TensorSpec& s) { return s.name == wanted; });
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat("unknown output '", ClientText(wanted),
                                                     "' requested from model '", metadata.name,
                                                     "'"));
    }
  }
  GEMMSERVE_ASSIGN_OR_RETURN(BoundInputs bound, BindInputs(metadata, *request));
  GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<PreparedInference> prepared, model->Prepare(bound));
  GEMMSERVE_RETURN_IF_ERROR(CheckOutputLimits(*prepared, static_cast<int64_t>(request->id.size()), options_));

  std::vector<std::string> wanted(request->requested_outputs.begin(),
                                  request->requested_outputs.end());
  pool_.Schedule([request = std::move(request), prepared = std::move(prepared), is_cancelled = std::move(is_cancelled),
                  done = std::move(done), name = metadata.name, version = metadata.versions.front(),
                  wanted = std::move(wanted)](int threads) mutable {
    if (is_cancelled && is_cancelled()) {
      std::move(done)(absl::CancelledError("request cancelled before compute"));
      return;
    }
    absl::StatusOr<std::vector<NamedTensor>> outputs = prepared->Run(threads);
    if (!outputs.ok()) {
      std::move(done)(outputs.status());
      return;
    }
    InferResult result{std::move(name), std::move(version), {}};
    for (NamedTensor& t : *outputs) {
      if (wanted.empty() || std::find(wanted.begin(), wanted.end(), t.name) != wanted.end()) {
        result.outputs.push_back(std::move(t));
      }
    }
    std::move(done)(std::move(result));
  });
  return absl::OkStatus();
}

}  // namespace gemmserve
