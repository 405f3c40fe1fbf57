#include "server/repository/triton_config.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"
#include "server/repository/utf8_fields.h"

namespace gemmserve {
namespace {

class CollectErrors final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    // The parser's message quotes the text it choked on: the client's.
    if (first_.empty()) {
      first_ =
          absl::StrCat("line ", line + 1, ", column ", column + 1, ": ", ClientText(message, 200));
      // gemmserve's own spelling before Triton's, named in Triton's.
      for (const auto& [old, now] : kOldSpellings) {
        if (absl::StrContains(message, absl::StrCat("no field named \"", old, "\""))) {
          absl::StrAppend(&first_,
                          " (gemmserve's old dynamic_batching field; Triton's config "
                          "spells it ",
                          now, ")");
        }
      }
    }
  }
  const std::string& first() const { return first_; }

 private:
  static constexpr std::pair<const char*, const char*> kOldSpellings[] = {
      {"max_batch_rows", "parameters { key: \"max_batch_rows\" value { string_value: \"N\" } }"},
      {"max_concurrent_batches", "instance_group { count: N kind: KIND_CPU }"},
      {"max_queue_size", "dynamic_batching { default_queue_policy { max_queue_size: N } }"},
      {"default_timeout_microseconds",
       "dynamic_batching { default_queue_policy { default_timeout_microseconds: N } }"},
  };
  std::string first_;
};

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

// Each declared tensor once, with dims of -1 (any) or at least 0, as Triton
// requires.
template <typename Declared>
absl::Status CheckTensorNamesAndDims(absl::string_view what,
                                     const google::protobuf::RepeatedPtrField<Declared>& tensors) {
  for (int i = 0; i < tensors.size(); ++i) {
    const Declared& d = tensors[i];
    for (int j = 0; j < i; ++j) {
      if (tensors[j].name() == d.name()) {
        return Refuse(absl::StrCat(what, " '", ClientText(d.name(), 64), "'"), "declared twice");
      }
    }
    for (int64_t dim : d.dims()) {
      if (dim < -1) {
        return Refuse(absl::StrCat(what, " '", ClientText(d.name(), 64), "': dims"),
                      absl::StrCat(dim, " is neither -1 (any) nor a size"));
      }
    }
  }
  return absl::OkStatus();
}

// Triton's tensor fields that change what the server does with a tensor:
// gemmserve gives the model each tensor as the request sent it. (optional
// depends on the model: CheckDeclaredTensors.)
absl::Status CheckTensorFields(const inference::ModelConfig& t) {
  GEMMSERVE_RETURN_IF_ERROR(CheckTensorNamesAndDims("input", t.input()));
  GEMMSERVE_RETURN_IF_ERROR(CheckTensorNamesAndDims("output", t.output()));
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

// Triton's dynamic batching, as far as gemmserve honours it: preferred batch
// sizes within max_batch_size, one queue policy for every level, whose
// timeout action is REJECT. (preserve_ordering changes nothing here: each
// request has its own answer.)
absl::Status CheckBatching(const inference::ModelConfig& t) {
  const inference::ModelDynamicBatching& d = t.dynamic_batching();
  if (t.max_batch_size() < 0 || t.max_batch_size() > kMaxBatchSize) {
    return Refuse(absl::StrCat("max_batch_size ", t.max_batch_size()),
                  absl::StrCat("outside 0 to the limit of ", kMaxBatchSize));
  }
  if (d.preferred_batch_size_size() > kMaxPreferredBatchSizes) {
    return Refuse("dynamic_batching.preferred_batch_size",
                  absl::StrCat(d.preferred_batch_size_size(), " sizes, over the limit of ",
                               kMaxPreferredBatchSizes));
  }
  for (int32_t size : d.preferred_batch_size()) {
    if (size <= 0 || (t.max_batch_size() > 0 && size > t.max_batch_size())) {
      return Refuse(absl::StrCat("dynamic_batching.preferred_batch_size ", size),
                    t.max_batch_size() > 0
                        ? absl::StrCat("outside 1 to max_batch_size ", t.max_batch_size())
                        : std::string("must be positive"));
    }
  }
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
  return ConcurrentBatches(t).status();
}

// Instances: gemmserve runs a model's batches on the CPU's compute threads;
// the groups' counts together are how many batches may run at once
// (ConcurrentBatches), up to kMaxInstanceCount.
absl::Status CheckInstanceGroups(const inference::ModelConfig& t) {
  int64_t total = 0;
  for (const inference::ModelInstanceGroup& g : t.instance_group()) {
    if (g.kind() != inference::ModelInstanceGroup::KIND_AUTO &&
        g.kind() != inference::ModelInstanceGroup::KIND_CPU) {
      return Refuse("instance_group.kind", "gemmserve runs on the CPU (KIND_CPU or KIND_AUTO)");
    }
    if (g.count() < 0 || g.count() > kMaxInstanceCount) {
      return Refuse(absl::StrCat("instance_group.count ", g.count()),
                    absl::StrCat("outside 0 to the limit of ", kMaxInstanceCount,
                                 " batches of the model run at once"));
    }
    total += std::max(g.count(), 1);
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
  if (total > kMaxInstanceCount) {
    return Refuse(absl::StrCat("instance_group counts ", total),
                  absl::StrCat("over the limit of ", kMaxInstanceCount,
                               " batches of the model run at once, all groups together"));
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
  return RefuseFirstSet(
      "", {{t.has_sequence_batching(), "sequence_batching",
            "gemmserve's models keep no state between requests; use dynamic_batching"},
           {t.has_ensemble_scheduling(), "ensemble_scheduling",
            "gemmserve serves single models (a mixture-of-experts layer is one ONNX model)"},
           {t.model_transaction_policy().decoupled(), "model_transaction_policy.decoupled",
            "every request has exactly one answer"},
           {t.batch_input_size() > 0, "batch_input",
            "requests are batched along their batch "
            "dimension, never as a ragged batch"},
           {t.batch_output_size() > 0, "batch_output", "each request gets its own outputs"},
           {t.model_operations().op_library_filename_size() > 0, "model_operations",
            "gemmserve loads no custom operator libraries"},
           {t.model_repository_agents().agents_size() > 0, "model_repository_agents",
            "gemmserve runs no repository agents: the files are loaded as they are"}});
}

// Triton's version policies: latest { num_versions >= 1 }, all, specific
// { versions } of at most kMaxServedVersions versions.
absl::Status CheckVersionPolicy(const inference::ModelConfig& t) {
  const inference::ModelVersionPolicy& v = t.version_policy();
  if (v.has_latest() && v.latest().num_versions() == 0) {
    return Refuse("version_policy.latest.num_versions 0", "must be at least 1");
  }
  if (v.has_latest() && v.latest().num_versions() > static_cast<uint32_t>(kMaxServedVersions)) {
    return Refuse(absl::StrCat("version_policy.latest.num_versions ", v.latest().num_versions()),
                  absl::StrCat("over the limit of ", kMaxServedVersions,
                               " versions served at once (each holds its own weights)"));
  }
  if (v.has_specific()) {
    const auto& versions = v.specific().versions();
    if (versions.empty()) return Refuse("version_policy.specific.versions", "lists no version");
    if (versions.size() > kMaxServedVersions) {
      return Refuse(absl::StrCat("version_policy.specific.versions (", versions.size(), ")"),
                    absl::StrCat("over the limit of ", kMaxServedVersions,
                                 " versions served at once (each holds its own weights)"));
    }
    for (int64_t n : versions) {
      if (n < 0) return Refuse(absl::StrCat("version_policy.specific.versions ", n), "negative");
    }
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
  GEMMSERVE_RETURN_IF_ERROR(CheckStringsAreUtf8(config));
  GEMMSERVE_RETURN_IF_ERROR(CheckPlacement(config));
  GEMMSERVE_RETURN_IF_ERROR(CheckVersionPolicy(config));
  GEMMSERVE_RETURN_IF_ERROR(CheckInstanceGroups(config));
  GEMMSERVE_RETURN_IF_ERROR(CheckTensorFields(config));
  GEMMSERVE_RETURN_IF_ERROR(AccuracyLevel(config).status());
  return CheckBatching(config);
}

absl::StatusOr<inference::ModelConfig> ParseModelConfigFile(absl::string_view text) {
  if (static_cast<int64_t>(text.size()) > kMaxModelConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(kPbtxtForm, text.size(), " bytes, over the limit of ", kMaxModelConfigBytes));
  }
  inference::ModelConfig config;
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &config)) {
    return absl::InvalidArgumentError(absl::StrCat(kPbtxtForm, errors.first()));
  }
  if (absl::Status checked = CheckConfig(config); !checked.ok()) {
    return InForm(kPbtxtForm, checked);
  }
  return config;
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
    if (static_cast<int64_t>(text.size()) > kMaxModelConfigBytes) {
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

absl::StatusOr<int> ConcurrentBatches(const inference::ModelConfig& config) {
  GEMMSERVE_ASSIGN_OR_RETURN(const uint64_t parameter,
                             SettingParameter(config, kMaxConcurrentBatchesParameter));
  int groups = 0;
  for (const inference::ModelInstanceGroup& g : config.instance_group()) {
    groups += std::max(g.count(), 1);  // CheckConfig bounded the sum
  }
  if (parameter > static_cast<uint64_t>(kMaxInstanceCount)) {
    return absl::InvalidArgumentError(absl::StrCat("parameters['", kMaxConcurrentBatchesParameter,
                                                   "'] ", parameter, " is over the limit of ",
                                                   kMaxInstanceCount, " batches run at once"));
  }
  if (groups > 0 && parameter > 0 && parameter != static_cast<uint64_t>(groups)) {
    return absl::InvalidArgumentError(absl::StrCat("parameters['", kMaxConcurrentBatchesParameter,
                                                   "'] ", parameter,
                                                   " differs from instance_group's count ", groups,
                                                   ": set one (instance_group's count is "
                                                   "how many batches of the model run at once)"));
  }
  if (groups > 0) return groups;
  return parameter > 0 ? static_cast<int>(parameter) : 1;
}

absl::StatusOr<std::vector<int64_t>> ServedVersions(const inference::ModelConfig& config,
                                                    const std::vector<int64_t>& available) {
  if (available.empty())
    return absl::NotFoundError("no numeric version directory holds the model file");
  const inference::ModelVersionPolicy& policy = config.version_policy();
  std::vector<int64_t> out;
  if (policy.has_all()) {
    out = available;
  } else if (policy.has_specific()) {
    for (int64_t v : policy.specific().versions()) {
      if (!std::binary_search(available.begin(), available.end(), v)) {
        return absl::NotFoundError(absl::StrCat("version_policy.specific lists version ", v,
                                                ", which no version directory holds (there are ",
                                                absl::StrJoin(available, ", "), ")"));
      }
      out.push_back(v);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  } else {
    const size_t n = policy.has_latest() ? policy.latest().num_versions() : 1;
    out.assign(available.end() - static_cast<std::ptrdiff_t>(std::min(n, available.size())),
               available.end());
  }
  if (out.size() > static_cast<size_t>(kMaxServedVersions)) {
    return absl::InvalidArgumentError(
        absl::StrCat("version_policy serves ", out.size(), " versions, over the limit of ",
                     kMaxServedVersions, " at once (each holds its own weights)"));
  }
  return out;
}

absl::Status CheckParameters(const inference::ModelConfig& config, const Model& model) {
  if (config.parameters().empty()) return absl::OkStatus();
  std::vector<std::string> reported = {kMaxBatchRowsParameter, kMaxConcurrentBatchesParameter,
                                       kAccuracyLevelParameter};
  const std::vector<std::pair<std::string, std::string>> facts = model.parameters();
  for (const auto& [key, value] : facts) reported.push_back(key);
  for (const auto& [key, value] : config.parameters()) {
    const std::string& name = key;  // (a structured binding is not captured before C++20)
    auto fact = std::find_if(facts.begin(), facts.end(), [&](const auto& f) {
      return f.first == name && name != kAccuracyLevelParameter;
    });
    if (fact != facts.end() && fact->second != value.string_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config: parameter '", ClientText(key), "' is '", ClientText(value.string_value(), 64),
          "', but the model's is '", fact->second, "' (a fact of the model, not a setting)"));
    }
    if (std::find(reported.begin(), reported.end(), key) == reported.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config: parameter '", ClientText(key), "' is neither a setting of gemmserve "
          "nor one this model reports (", absl::StrJoin(reported, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace gemmserve
