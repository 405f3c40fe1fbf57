#include "server/serving/model_protos.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "server/tensor/datatype.h"

namespace gemmserve {

void EncodeModelIndexEntry(const ModelStatus& status,
                           inference::RepositoryIndexResponse::ModelIndex* out) {
  out->set_name(status.name);
  out->set_version(status.version);
  switch (status.state) {
    case ModelState::kReady: out->set_state("READY"); break;
    case ModelState::kLoading: out->set_state("LOADING"); break;
    case ModelState::kFailed:
    case ModelState::kUnloaded: out->set_state("UNAVAILABLE"); break;
  }
  out->set_reason(status.reason);
}

void EncodeModelMetadata(const ModelMetadata& metadata, const std::vector<std::string>& versions,
                         inference::ModelMetadataResponse* response) {
  response->set_name(metadata.name);
  for (const std::string& v : versions) response->add_versions(v);
  response->set_platform(metadata.platform);
  auto fill = [](const TensorSpec& spec, inference::ModelMetadataResponse::TensorMetadata* out) {
    out->set_name(spec.name);
    // The protocol has one datatype per tensor: report the default, the first
    // accepted type. docs/models.md lists every type each input accepts.
    out->set_datatype(std::string(DataTypeName(spec.datatypes.front())));
    for (int64_t d : spec.shape) out->add_shape(d);
  };
  for (const TensorSpec& spec : metadata.inputs) fill(spec, response->add_inputs());
  for (const TensorSpec& spec : metadata.outputs) fill(spec, response->add_outputs());
}

void EncodeModelStatistics(const ModelStatistics& s, inference::ModelStatistics* out) {
  out->set_name(s.name);
  out->set_version(s.version);
  out->set_last_inference(s.last_inference_ms);
  out->set_inference_count(s.inference_count);
  out->set_execution_count(s.execution_count);
  auto set = [](const DurationStat& d, inference::StatisticDuration* o) {
    o->set_count(d.count);
    o->set_ns(d.ns);
  };
  inference::InferStatistics* st = out->mutable_inference_stats();
  set(s.success, st->mutable_success());
  set(s.fail, st->mutable_fail());
  set(s.queue, st->mutable_queue());
  set(s.compute_infer, st->mutable_compute_infer());
  // Triton's schema has these; gemmserve has no input/output stage apart
  // from compute and no response cache: present, and zero.
  st->mutable_compute_input();
  st->mutable_compute_output();
  st->mutable_cache_hit();
  st->mutable_cache_miss();
  for (const BatchSizeStat& b : s.batch_stats) {
    inference::InferBatchStatistics* o = out->add_batch_stats();
    o->set_batch_size(b.batch_size);
    o->mutable_compute_input();
    set(b.compute_infer, o->mutable_compute_infer());
    o->mutable_compute_output();
  }
}

}  // namespace gemmserve
