#include "server/repository/triton_config.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"
#include "server/repository/model_repository.h"
#include "server/tensor/datatype.h"

namespace gemmserve {
namespace {

constexpr char kJsonForm[] = "config (Triton's JSON form, as it starts with '{'): ";
constexpr char kPbtxtForm[] = "config.pbtxt: ";

// CheckConfig's messages name the field; the form is added by the caller.
absl::Status Refuse(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

absl::Status InForm(const char* form, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(form, status.message()));
}

// A field set away from its default, asking what gemmserve cannot do, and why.
struct Unhonoured {
  bool set;
  const char* field;
  const char* why;
};

// INVALID_ARGUMENT for the first of `fields` that is set: "<owner><field> is
// not supported: <why>".
absl::Status RefuseFirstSet(absl::string_view owner, std::initializer_list<Unhonoured> fields) {
  for (const Unhonoured& f : fields) {
    if (f.set) {
      return absl::InvalidArgumentError(absl::StrCat(owner, f.field, " is not supported: ", f.why));
    }
  }
  return absl::OkStatus();
}

// Triton's tensor fields that change what the server does with a tensor:
// gemmserve gives the model each tensor as the request sent it. (optional
// depends on the model: CheckDeclaredTensors.)
absl::Status CheckTensorFields(const inference::ModelConfig& t) {
  for (const inference::ModelInput& in : t.input()) {
    GEMMSERVE_RETURN_IF_ERROR(RefuseFirstSet(
        absl::StrCat("input '", ClientText(in.name(), 64), "': "),
        {{in.format() != inference::ModelInput::FORMAT_NONE, "format",
          "a tensor is read in the layout its dims give (FORMAT_NONE)"},
         {in.has_reshape(), "reshape",
          "the model gets the shape the request sends; declare the model's dims"},
         {in.is_shape_tensor(), "is_shape_tensor", "gemmserve's models have no shape tensors"},
         {in.allow_ragged_batch(), "allow_ragged_batch",
          "requests are batched along their rows (max_batch_rows), never as a ragged batch"},
         {in.is_non_linear_format_io(), "is_non_linear_format_io",
          "tensors are dense and row-major"}}));
  }
  for (const inference::ModelOutput& out : t.output()) {
    GEMMSERVE_RETURN_IF_ERROR(RefuseFirstSet(
        absl::StrCat("output '", ClientText(out.name(), 64), "': "),
        {{!out.label_filename().empty(), "label_filename",
          "gemmserve does not classify (Triton's classification extension)"},
         {out.has_reshape(), "reshape",
          "the answer has the model's shape; declare the model's dims"},
         {out.is_shape_tensor(), "is_shape_tensor", "gemmserve's models have no shape tensors"},
         {out.is_non_linear_format_io(), "is_non_linear_format_io",
          "tensors are dense and row-major"}}));
  }
  return absl::OkStatus();
}

// Triton's dynamic batching, as far as gemmserve honours it: one queue
// policy for every level, whose timeout action is REJECT. (preferred_batch_size
// and preserve_ordering change nothing here: batches are cut by rows,
// max_batch_rows, and each request has its own answer.)
absl::Status CheckBatching(const inference::ModelConfig& t) {
  const inference::ModelDynamicBatching& d = t.dynamic_batching();
  if (d.priority_queue_policy_size() > 0) {
    return Refuse("dynamic_batching.priority_queue_policy",
                  "per-level queue policies are not supported; default_queue_policy "
                  "applies to every level");
  }
  if (d.default_queue_policy().timeout_action() != inference::ModelQueuePolicy::REJECT) {
    return Refuse("dynamic_batching.default_queue_policy.timeout_action",
                  "only REJECT: a request whose queue timeout passes is answered at once");
  }
  for (const char* key : {kMaxBatchRowsParameter, kMaxConcurrentBatchesParameter}) {
    if (t.parameters().count(key) == 0) continue;
    absl::StatusOr<uint64_t> n = SettingParameter(t, key);
    if (!n.ok()) return n.status();
    if (!t.has_dynamic_batching()) {
      return Refuse(absl::StrCat("parameters['", key, "']"), "needs a dynamic_batching block");
    }
  }
  return absl::OkStatus();
}

// Instances: gemmserve runs one of each model on the CPU, whose batches share
// the compute threads; a count up to kMaxInstanceCount is accepted and
// changes nothing (max_concurrent_batches sets the batches run at once).
absl::Status CheckInstanceGroups(const inference::ModelConfig& t) {
  for (const inference::ModelInstanceGroup& g : t.instance_group()) {
    if (g.kind() != inference::ModelInstanceGroup::KIND_AUTO &&
        g.kind() != inference::ModelInstanceGroup::KIND_CPU) {
      return Refuse("instance_group.kind", "gemmserve runs on the CPU (KIND_CPU or KIND_AUTO)");
    }
    if (g.count() < 0 || g.count() > kMaxInstanceCount) {
      return Refuse(
          absl::StrCat("instance_group.count ", g.count()),
          absl::StrCat("outside 0 to the limit of ", kMaxInstanceCount,
                       ": gemmserve runs one instance of a model, and "
                       "max_concurrent_batches sets how many of its batches run at once"));
    }
    GEMMSERVE_RETURN_IF_ERROR(RefuseFirstSet(
        "instance_group.",
        {{g.gpus_size() > 0, "gpus", "gemmserve runs on the CPU"},
         {g.secondary_devices_size() > 0, "secondary_devices", "gemmserve runs on the CPU"},
         {g.profile_size() > 0, "profile", "TensorRT's optimization profiles do not apply"},
         {g.passive(), "passive", "every loaded model takes requests"},
         {!g.host_policy().empty(), "host_policy",
          "there are no host policies (--compute_threads sets the threads)"},
         {g.rate_limiter().resources_size() > 0 || g.rate_limiter().priority() != 0, "rate_limiter",
          "there is no rate limiter (requests are held against --max_inflight_bytes and "
          "max_queue_size)"}}));
  }
  return absl::OkStatus();
}

bool IsOneOf(const std::string& value, std::initializer_list<const char*> accepted) {
  return std::find(accepted.begin(), accepted.end(), value) != accepted.end();
}

absl::Status CheckPlacement(const inference::ModelConfig& t) {
  if (!IsOneOf(t.platform(), {"", "gemmserve", "gemmserve_onnx", "onnxruntime_onnx"})) {
    return Refuse("platform", absl::StrCat("'", ClientText(t.platform(), 64),
                                           "' is not gemmserve's (gemmserve_onnx, or "
                                           "onnxruntime_onnx for an ONNX model)"));
  }
  if (!IsOneOf(t.backend(), {"", "gemmserve", "onnxruntime"})) {
    return Refuse("backend", absl::StrCat("'", ClientText(t.backend(), 64),
                                          "' is not gemmserve's (gemmserve, or onnxruntime)"));
  }
  if (!IsOneOf(t.runtime(), {"", "gemmserve", "onnxruntime", "libtriton_onnxruntime.so"})) {
    return Refuse("runtime", absl::StrCat("'", ClientText(t.runtime(), 64),
                                          "' is not gemmserve's (libtriton_onnxruntime.so, "
                                          "onnxruntime, gemmserve, or none)"));
  }
  if (t.model_transaction_policy().decoupled()) {
    return Refuse("model_transaction_policy.decoupled", "every request has exactly one answer");
  }
  const inference::ModelVersionPolicy& v = t.version_policy();
  if (v.has_latest() && v.latest().num_versions() == 0) {
    return Refuse("version_policy.latest.num_versions 0",
                  "must be 1 (Triton requires at least 1; gemmserve serves the latest version)");
  }
  if (v.has_all() || v.has_specific() || (v.has_latest() && v.latest().num_versions() > 1)) {
    return Refuse("version_policy", "gemmserve serves the latest version only");
  }
  return absl::OkStatus();
}

// Refuses JSON nested deeper than kMaxConfigNesting, or with an array directly
// inside an array, before protobuf's parser sees it: that parser bounds
// objects (at 100, "Message too deep") but held each level of arrays in
// memory (a 1 MB text of '[' took 150 MiB), and flattens a list of lists into
// one list, which no field of ModelConfig is. Strings are skipped in either
// quote, escapes and all, as protobuf reads both; a closer that closes
// nothing buys no depth. Allocates nothing.
absl::Status CheckJsonNesting(absl::string_view json) {
  static_assert(kMaxConfigNesting <= 64, "one bit of `arrays` per level");
  uint64_t arrays = 0;  // bit d: the container at depth d + 1 is an array
  int depth = 0;
  char quote = 0;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (quote != 0) {
      if (c == '\\') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '{') {
      if (c == '[' && depth > 0 && ((arrays >> (depth - 1)) & 1) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(kJsonForm, "an array directly inside an array at byte ", i,
                         ": no field of ModelConfig is a list of lists"));
      }
      if (depth == kMaxConfigNesting) {
        return absl::InvalidArgumentError(absl::StrCat(
            kJsonForm, "nested ", depth + 1, " levels deep at byte ", i, ", over the limit of ",
            kMaxConfigNesting, " levels of arrays and objects"));
      }
      const uint64_t bit = uint64_t{1} << depth;
      arrays = c == '[' ? arrays | bit : arrays & ~bit;
      ++depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return absl::OkStatus();
}

absl::Status MatchDims(absl::string_view what, const std::string& name,
                       const google::protobuf::RepeatedField<int64_t>& dims,
                       const TensorSpec& spec) {
  if (spec.variable_rank) return absl::OkStatus();
  bool same = dims.size() == static_cast<int>(spec.shape.size());
  for (int i = 0; same && i < dims.size(); ++i) {
    same = dims[i] == -1 || spec.shape[i] == -1 || dims[i] == spec.shape[i];
  }
  if (same) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "config: ", what, " '", ClientText(name), "' declares dims [", absl::StrJoin(dims, ", "),
      "]; the model's are [", absl::StrJoin(spec.shape, ", "), "] (-1: any)"));
}

template <typename Declared>
absl::Status CheckTensor(absl::string_view what, const Declared& d,
                         const std::vector<TensorSpec>& specs) {
  auto it = std::find_if(specs.begin(), specs.end(),
                         [&](const TensorSpec& s) { return s.name == d.name(); });
  if (it == specs.end()) {
    std::vector<std::string> names;
    for (const TensorSpec& s : specs) names.push_back(s.name);
    return absl::InvalidArgumentError(
        absl::StrCat("config: ", what, " '", ClientText(d.name(), 64), "' is not one of the model's (",
                     absl::StrJoin(names, ", "), ")"));
  }
  if constexpr (std::is_same_v<Declared, inference::ModelInput>) {
    if (d.optional() && !it->optional) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: input '", ClientText(d.name()),
                       "': optional is not supported: the model needs it in every request"));
    }
  }
  if (d.data_type() != inference::TYPE_INVALID) {
    std::string type = inference::DataType_Name(d.data_type()).substr(5);  // "TYPE_"
    if (type == "STRING") type = "BYTES";
    auto parsed = ParseDataType(type);
    if (!parsed.ok() ||
        std::find(it->datatypes.begin(), it->datatypes.end(), *parsed) == it->datatypes.end()) {
      std::vector<std::string> accepted;
      for (DataType t : it->datatypes) accepted.push_back(absl::StrCat("TYPE_", DataTypeName(t)));
      return absl::InvalidArgumentError(absl::StrCat(
          "config: ", what, " '", ClientText(d.name()), "' declares ",
          inference::DataType_Name(d.data_type()), "; the model accepts ",
          absl::StrJoin(accepted, ", ")));
    }
  }
  return MatchDims(what, d.name(), d.dims(), *it);
}

}  // namespace

absl::StatusOr<uint64_t> SettingParameter(const inference::ModelConfig& config,
                                          const char* key) {
  auto it = config.parameters().find(key);
  if (it == config.parameters().end()) return uint64_t{0};
  uint64_t n = 0;
  if (!absl::SimpleAtoi(it->second.string_value(), &n)) {
    return absl::InvalidArgumentError(absl::StrCat("parameters['", key, "']: '",
                                                   ClientText(it->second.string_value(), 64),
                                                   "' is not a non-negative integer"));
  }
  return n;
}

absl::StatusOr<int> AccuracyLevel(const inference::ModelConfig& config) {
  auto it = config.parameters().find(kAccuracyLevelParameter);
  if (it == config.parameters().end()) return 0;
  const std::string& value = it->second.string_value();
  if (value == "0" || value == "4") return value == "4" ? 4 : 0;
  return absl::InvalidArgumentError(
      absl::StrCat("parameters['", kAccuracyLevelParameter, "']: '", ClientText(value, 64),
                   "' is not served: \"0\" (exact: DequantizeLinear, then the op) or \"4\" "
                   "(8-bit activations, integer dot products)"));
}

absl::Status CheckConfig(const inference::ModelConfig& config) {
  GEMMSERVE_RETURN_IF_ERROR(CheckPlacement(config));
  GEMMSERVE_RETURN_IF_ERROR(CheckInstanceGroups(config));
  GEMMSERVE_RETURN_IF_ERROR(CheckTensorFields(config));
  GEMMSERVE_RETURN_IF_ERROR(AccuracyLevel(config).status());
  return CheckBatching(config);
}

absl::StatusOr<inference::ModelConfig> ConfigFromFile(const config::ModelConfigFile& file) {
  inference::ModelConfig out;
  out.set_name(file.name());
  out.set_max_batch_size(file.max_batch_size());
  out.set_default_model_filename(file.default_model_filename());
  *out.mutable_input() = file.input();
  *out.mutable_output() = file.output();
  *out.mutable_parameters() = file.parameters();
  if (file.has_dynamic_batching()) {
    const config::DynamicBatching& d = file.dynamic_batching();
    inference::ModelDynamicBatching* db = out.mutable_dynamic_batching();
    db->set_max_queue_delay_microseconds(d.max_queue_delay_microseconds());
    db->set_priority_levels(d.priority_levels());
    db->set_default_priority_level(d.default_priority_level());
    inference::ModelQueuePolicy* q = db->mutable_default_queue_policy();
    q->set_max_queue_size(d.max_queue_size());
    q->set_default_timeout_microseconds(d.default_timeout_microseconds());
    q->set_allow_timeout_override(true);
    auto& params = *out.mutable_parameters();
    params[kMaxBatchRowsParameter].set_string_value(absl::StrCat(d.max_batch_rows()));
    params[kMaxConcurrentBatchesParameter].set_string_value(
        absl::StrCat(d.max_concurrent_batches()));
  }
  // The two ModelWarmup messages have the same fields and numbers.
  for (const config::ModelWarmup& w : file.model_warmup()) {
    out.add_model_warmup()->ParseFromString(w.SerializeAsString());
  }
  if (absl::Status checked = CheckConfig(out); !checked.ok()) return InForm(kPbtxtForm, checked);
  return out;
}

absl::StatusOr<inference::ModelConfig> ConfigFromTritonJson(absl::string_view json) {
  GEMMSERVE_RETURN_IF_ERROR(CheckJsonNesting(json));
  inference::ModelConfig triton;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;  // a misspelt field is an error, not a default
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &triton, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kJsonForm, ClientText(std::string(status.message().data(), status.message().size()), 200)));
  }
  if (absl::Status checked = CheckConfig(triton); !checked.ok()) return InForm(kJsonForm, checked);
  return triton;
}

absl::StatusOr<inference::ModelConfig> ParseLoadConfig(absl::string_view text) {
  const absl::string_view body = absl::StripLeadingAsciiWhitespace(text);
  if (!body.empty() && body.front() == '{') {
    if (text.size() > kMaxModelConfigBytes) {
      return absl::InvalidArgumentError(absl::StrCat(kJsonForm, text.size(),
                                                     " bytes, over the limit of ",
                                                     kMaxModelConfigBytes));
    }
    return ConfigFromTritonJson(text);
  }
  auto parsed = ParseModelConfigFile(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(parsed.status().message(),
                     " (read as config.pbtxt text, as it does not start with '{')"));
  }
  return parsed;
}

absl::Status CheckDeclaredTensors(const inference::ModelConfig& config,
                                  const ModelMetadata& metadata) {
  if (config.max_batch_size() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: max_batch_size ", config.max_batch_size(),
                     ": must be 0, gemmserve's models have no implicit batch dimension "
                     "(the dynamic batcher joins requests along their rows)"));
  }
  for (const inference::ModelInput& in : config.input()) {
    GEMMSERVE_RETURN_IF_ERROR(CheckTensor("input", in, metadata.inputs));
  }
  for (const inference::ModelOutput& out : config.output()) {
    GEMMSERVE_RETURN_IF_ERROR(CheckTensor("output", out, metadata.outputs));
  }
  return absl::OkStatus();
}

absl::Status CheckParameters(const inference::ModelConfig& config, const Model& model) {
  if (config.parameters().empty()) return absl::OkStatus();
  std::vector<std::string> reported = {kMaxBatchRowsParameter, kMaxConcurrentBatchesParameter,
                                       kAccuracyLevelParameter};
  for (const auto& [key, value] : model.parameters()) reported.push_back(key);
  for (const auto& [key, value] : config.parameters()) {
    if (std::find(reported.begin(), reported.end(), key) == reported.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config: parameter '", ClientText(key), "' is neither a setting of gemmserve "
          "nor one this model reports (", absl::StrJoin(reported, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace gemmserve
