#include "server/serving/model_protos.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
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

void EncodeModelMetadata(const ModelMetadata& metadata,
                         inference::ModelMetadataResponse* response) {
  response->set_name(metadata.name);
  for (const std::string& v : metadata.versions) response->add_versions(v);
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

void EncodeModelConfig(const ServedModel& served, inference::ModelConfig* config) {
  const ModelMetadata& metadata = served.metadata();
  config->set_name(metadata.name);
  config->set_platform(metadata.platform);
  config->set_backend("gemmserve");
  auto type_of = [](const TensorSpec& spec) {
    inference::DataType t = inference::TYPE_INVALID;
    inference::DataType_Parse(absl::StrCat("TYPE_", DataTypeName(spec.datatypes.front())), &t);
    return t;
  };
  for (const TensorSpec& spec : metadata.inputs) {
    inference::ModelInput* in = config->add_input();
    in->set_name(spec.name);
    in->set_data_type(type_of(spec));
    for (int64_t d : spec.shape) in->add_dims(d);
    in->set_optional(spec.optional);
  }
  for (const TensorSpec& spec : metadata.outputs) {
    inference::ModelOutput* out = config->add_output();
    out->set_name(spec.name);
    out->set_data_type(type_of(spec));
    for (int64_t d : spec.shape) out->add_dims(d);
  }
  if (const auto& b = served.batching()) {
    inference::ModelDynamicBatching* db = config->mutable_dynamic_batching();
    db->set_max_queue_delay_microseconds(
        static_cast<uint64_t>(absl::ToInt64Microseconds(b->max_queue_delay)));
    db->set_priority_levels(static_cast<uint64_t>(b->priority_levels));
    db->set_default_priority_level(static_cast<uint64_t>(b->default_priority_level));
    inference::ModelQueuePolicy* q = db->mutable_default_queue_policy();
    q->set_max_queue_size(static_cast<uint32_t>(b->max_queue_size));
    q->set_allow_timeout_override(true);
    if (b->default_timeout != absl::InfiniteDuration()) {
      q->set_default_timeout_microseconds(
          static_cast<uint64_t>(absl::ToInt64Microseconds(b->default_timeout)));
    }
    (*config->mutable_parameters())["max_batch_rows"].set_string_value(
        absl::StrCat(b->max_batch_rows));
  }
  for (const auto& [key, value] : served.model().parameters()) {
    (*config->mutable_parameters())[key].set_string_value(value);
  }
  for (const WarmupSample& sample : served.warmup()) {
    inference::ModelWarmup* w = config->add_model_warmup();
    w->set_name(sample.name);
    w->set_batch_size(sample.batch_size);
    w->set_count(sample.count);
    for (const WarmupInput& input : sample.inputs) {
      inference::ModelWarmup::Input& in = (*w->mutable_inputs())[input.name];
      inference::DataType t = inference::TYPE_INVALID;
      inference::DataType_Parse(absl::StrCat("TYPE_", DataTypeName(input.type)), &t);
      in.set_data_type(t);
      for (int64_t d : input.shape) in.add_dims(d);
      switch (input.data) {
        case WarmupInput::Data::kZero: in.set_zero_data(true); break;
        case WarmupInput::Data::kRandom: in.set_random_data(true); break;
        case WarmupInput::Data::kFile: in.set_input_data_file(input.file); break;
      }
    }
  }
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
