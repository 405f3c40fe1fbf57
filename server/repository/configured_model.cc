#include "server/repository/configured_model.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"
#include "server/repository/triton_config.h"
#include "server/tensor/datatype.h"

namespace gemmserve {
namespace {

constexpr char kOnnxRuntimePlatform[] = "onnxruntime_onnx";

inference::DataType ConfigType(DataType t) {
  inference::DataType out = inference::TYPE_INVALID;
  inference::DataType_Parse(absl::StrCat("TYPE_", DataTypeName(t)), &out);
  return out;
}

// A config datatype as gemmserve's; nullopt for TYPE_INVALID ("any") or a
// type gemmserve has no name for.
std::optional<DataType> ServedType(inference::DataType t) {
  if (t == inference::TYPE_INVALID) return std::nullopt;
  std::string name = inference::DataType_Name(t).substr(5);  // "TYPE_"
  if (name == "STRING") name = "BYTES";
  absl::StatusOr<DataType> parsed = ParseDataType(name);
  if (!parsed.ok()) return std::nullopt;
  return *parsed;
}

// With max_batch_size > 0 every tensor of the model starts with the batch
// dimension, which the model must leave variable.
absl::Status CheckBatchDimension(absl::string_view what, const TensorSpec& spec,
                                 int32_t max_batch_size) {
  if (max_batch_size <= 0 || spec.variable_rank) return absl::OkStatus();
  if (!spec.shape.empty() && spec.shape[0] == -1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("config: max_batch_size ", max_batch_size, ": the model's ", what, " '",
                   spec.name, "' has shape [", absl::StrJoin(spec.shape, ", "),
                   "], whose first dimension is not variable, so it has no batch dimension (use "
                   "max_batch_size 0 and give the whole shape in dims)"));
}

// `spec` as the declared tensor `d` narrows it: its datatype first among
// those accepted, and each dimension the model leaves variable fixed where
// `d` fixes it; INVALID_ARGUMENT where they disagree.
template <typename Declared>
absl::StatusOr<TensorSpec> Narrow(absl::string_view what, const Declared& d, TensorSpec spec,
                                  int32_t max_batch_size) {
  if constexpr (std::is_same_v<Declared, inference::ModelInput>) {
    if (d.optional() && !spec.optional) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: input '", ClientText(d.name()),
                       "': optional is not supported: the model needs it in every request"));
    }
  }
  if (d.data_type() != inference::TYPE_INVALID) {
    const std::optional<DataType> type = ServedType(d.data_type());
    auto it = type ? std::find(spec.datatypes.begin(), spec.datatypes.end(), *type)
                   : spec.datatypes.end();
    if (it == spec.datatypes.end()) {
      std::vector<std::string> accepted;
      for (DataType t : spec.datatypes) accepted.push_back(absl::StrCat("TYPE_", DataTypeName(t)));
      return absl::InvalidArgumentError(
          absl::StrCat("config: ", what, " '", ClientText(d.name()), "' declares ",
                       inference::DataType_Name(d.data_type()), "; the model accepts ",
                       absl::StrJoin(accepted, ", ")));
    }
    std::rotate(spec.datatypes.begin(), it, it + 1);  // the declared type is reported
  }
  Shape declared;
  if (max_batch_size > 0) declared.push_back(-1);
  declared.insert(declared.end(), d.dims().begin(), d.dims().end());
  if (spec.variable_rank) return spec;
  bool same = declared.size() == spec.shape.size();
  for (size_t i = 0; same && i < declared.size(); ++i) {
    same = declared[i] == -1 || spec.shape[i] == -1 || declared[i] == spec.shape[i];
    if (same && spec.shape[i] == -1) spec.shape[i] = declared[i];
  }
  if (same) return spec;
  return absl::InvalidArgumentError(absl::StrCat(
      "config: ", what, " '", ClientText(d.name()), "' declares dims [",
      absl::StrJoin(d.dims(), ", "), "]", max_batch_size > 0 ? " after the batch dimension" : "",
      "; the model's shape is [", absl::StrJoin(spec.shape, ", "), "] (-1: any)"));
}

template <typename Declared>
absl::Status NarrowAll(absl::string_view what,
                       const google::protobuf::RepeatedPtrField<Declared>& declared,
                       std::vector<TensorSpec>& specs, int32_t max_batch_size) {
  for (const TensorSpec& spec : specs) {
    GEMMSERVE_RETURN_IF_ERROR(CheckBatchDimension(what, spec, max_batch_size));
  }
  for (const Declared& d : declared) {
    auto it = std::find_if(specs.begin(), specs.end(),
                           [&](const TensorSpec& s) { return s.name == d.name(); });
    if (it == specs.end()) {
      std::vector<std::string> names;
      for (const TensorSpec& s : specs) names.push_back(s.name);
      return absl::InvalidArgumentError(
          absl::StrCat("config: ", what, " '", ClientText(d.name(), 64),
                       "' is not one of the model's (", absl::StrJoin(names, ", "), ")"));
    }
    GEMMSERVE_ASSIGN_OR_RETURN(*it, Narrow(what, d, *it, max_batch_size));
  }
  return absl::OkStatus();
}

// The model's metadata as `config` narrows it (CheckDeclaredTensors).
absl::StatusOr<ModelMetadata> NarrowMetadata(const inference::ModelConfig& config,
                                             ModelMetadata metadata) {
  GEMMSERVE_RETURN_IF_ERROR(
      NarrowAll("input", config.input(), metadata.inputs, config.max_batch_size()));
  GEMMSERVE_RETURN_IF_ERROR(
      NarrowAll("output", config.output(), metadata.outputs, config.max_batch_size()));
  if (!config.platform().empty()) metadata.platform = config.platform();
  return metadata;
}

// Appends each tensor of `specs` that `declared` lacks, and fills the
// datatype of those declared without one.
template <typename Declared>
void CompleteTensors(const std::vector<TensorSpec>& specs, int32_t max_batch_size,
                     google::protobuf::RepeatedPtrField<Declared>* declared) {
  for (const TensorSpec& spec : specs) {
    auto it = std::find_if(declared->begin(), declared->end(),
                           [&](const Declared& d) { return d.name() == spec.name; });
    if (it != declared->end()) {
      if (it->data_type() == inference::TYPE_INVALID) {
        it->set_data_type(ConfigType(spec.datatypes.front()));
      }
      continue;
    }
    Declared* d = declared->Add();
    d->set_name(spec.name);
    d->set_data_type(ConfigType(spec.datatypes.front()));
    const size_t skip = max_batch_size > 0 && !spec.variable_rank ? 1 : 0;
    for (size_t i = skip; i < spec.shape.size(); ++i) d->add_dims(spec.shape[i]);
    if constexpr (std::is_same_v<Declared, inference::ModelInput>) d->set_optional(spec.optional);
  }
}

// Triton's auto-complete: what the config leaves out, from the model. Each
// step fills only what is empty, so completing twice changes nothing.
absl::StatusOr<inference::ModelConfig> Complete(inference::ModelConfig c, const ModelMetadata& md,
                                                const Model& inner, absl::string_view file) {
  GEMMSERVE_ASSIGN_OR_RETURN(const int concurrent, ConcurrentBatches(c));
  c.set_name(md.name);
  if (c.platform().empty()) c.set_platform(md.platform);
  if (c.backend().empty()) {
    c.set_backend(c.platform() == kOnnxRuntimePlatform ? "onnxruntime" : "gemmserve");
  }
  if (c.version_policy().policy_choice_case() ==
      inference::ModelVersionPolicy::POLICY_CHOICE_NOT_SET) {
    c.mutable_version_policy()->mutable_latest()->set_num_versions(1);
  }
  if (c.default_model_filename().empty() && !file.empty()) {
    c.set_default_model_filename(std::string(file));
  }
  CompleteTensors(md.inputs, c.max_batch_size(), c.mutable_input());
  CompleteTensors(md.outputs, c.max_batch_size(), c.mutable_output());
  if (c.instance_group_size() == 0) {
    inference::ModelInstanceGroup* g = c.add_instance_group();
    g->set_count(concurrent);
    g->set_kind(inference::ModelInstanceGroup::KIND_CPU);
  }
  for (inference::ModelInstanceGroup& g : *c.mutable_instance_group()) {
    if (g.count() == 0) g.set_count(1);
    g.set_kind(inference::ModelInstanceGroup::KIND_CPU);  // KIND_AUTO chose the CPU
  }
  for (const auto& [key, value] : inner.parameters()) {
    (*c.mutable_parameters())[key].set_string_value(value);
  }
  return c;
}

// A request's inference, counted in batch items (its first dimension) by the
// dynamic batcher: Triton's batch dimension.
class BatchedInference final : public PreparedInference {
 public:
  BatchedInference(std::unique_ptr<PreparedInference> inner, int64_t batch)
      : inner_(std::move(inner)), batch_(batch) {}
  int64_t output_bytes() const override { return inner_->output_bytes(); }
  std::vector<std::pair<std::string, Shape>> output_shapes() const override {
    return inner_->output_shapes();
  }
  int64_t flops() const override { return inner_->flops(); }
  bool may_run_inline() const override { return inner_->may_run_inline(); }
  int64_t held_bytes(int threads) const override { return inner_->held_bytes(threads); }
  int64_t rows() const override { return batch_; }
  PreparedInference* inner() const { return inner_.get(); }

 private:
  std::unique_ptr<PreparedInference> inner_;
  int64_t batch_;
};

}  // namespace

absl::Status CheckDeclaredTensors(const inference::ModelConfig& config,
                                  const ModelMetadata& metadata) {
  return NarrowMetadata(config, metadata).status();
}

absl::StatusOr<std::unique_ptr<ConfiguredModel>> ConfiguredModel::Make(
    std::unique_ptr<Model> inner, inference::ModelConfig config, absl::string_view model_file) {
  GEMMSERVE_ASSIGN_OR_RETURN(ModelMetadata metadata, NarrowMetadata(config, inner->metadata()));
  GEMMSERVE_ASSIGN_OR_RETURN(config, Complete(std::move(config), metadata, *inner, model_file));
  return std::unique_ptr<ConfiguredModel>(
      new ConfiguredModel(std::move(inner), std::move(metadata), std::move(config)));
}

ConfiguredModel::ConfiguredModel(std::unique_ptr<Model> inner, ModelMetadata metadata,
                                 inference::ModelConfig config)
    : inner_(std::move(inner)), metadata_(std::move(metadata)), config_(std::move(config)) {}

absl::StatusOr<std::unique_ptr<PreparedInference>> ConfiguredModel::Prepare(
    const BoundInputs& inputs) const {
  const int32_t max_batch_size = config_.max_batch_size();
  if (max_batch_size <= 0) return inner_->Prepare(inputs);
  const BoundInput* first = nullptr;
  for (const BoundInput& in : inputs) {
    if (in.spec == nullptr) continue;
    if (in.shape.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", in.spec->name,
                       "': a scalar has no batch dimension (max_batch_size ", max_batch_size, ")"));
    }
    if (first == nullptr) first = &in;
    if (in.shape[0] != first->shape[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", in.spec->name, "': batch size ", in.shape[0],
                       " (its first dimension) differs from the batch size ", first->shape[0],
                       " of input '", first->spec->name, "'"));
    }
  }
  const int64_t batch = first == nullptr ? 0 : first->shape[0];
  if (batch > max_batch_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", first->spec->name, "': batch size ", batch,
                     " (its first dimension) is over the model's max_batch_size ", max_batch_size));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<PreparedInference> prepared, inner_->Prepare(inputs));
  return std::make_unique<BatchedInference>(std::move(prepared), batch);
}

std::vector<InferOutputs> ConfiguredModel::RunBatch(absl::Span<PreparedInference* const> batch,
                                                    int threads) const {
  if (config_.max_batch_size() <= 0) return inner_->RunBatch(batch, threads);
  std::vector<PreparedInference*> inner;
  inner.reserve(batch.size());
  for (PreparedInference* p : batch) {
    inner.push_back(static_cast<BatchedInference*>(p)->inner());
    inner.back()->set_deadline(p->deadline());
  }
  std::vector<InferOutputs> out = inner_->RunBatch(inner, threads);
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i]->set_weight_bytes_read(inner[i]->weight_bytes_read());
  }
  return out;
}

const inference::ModelConfig* LoadedConfig(const Model& model) {
  const auto* configured = dynamic_cast<const ConfiguredModel*>(&model);
  return configured == nullptr ? nullptr : &configured->config();
}

}  // namespace gemmserve
