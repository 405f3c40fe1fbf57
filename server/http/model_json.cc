#include "server/http/model_json.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "rapidjson/document.h"
#include "rapidjson/error/en.h"
#include "rapidjson/memorystream.h"
#include "rapidjson/reader.h"
#include "server/common/client_text.h"
#include "server/tensor/datatype.h"

namespace gemmserve {
namespace {

// A small builder of JSON text: objects and arrays with commas placed.
class Json {
 public:
  Json& Open(char c) {
    Comma();
    out_.push_back(c);
    first_ = true;
    return *this;
  }
  Json& Close(char c) {
    out_.push_back(c);
    first_ = false;
    return *this;
  }
  Json& Key(absl::string_view k) {
    Comma();
    AppendJsonString(k, &out_);
    out_.push_back(':');
    first_ = true;  // the value follows without a comma
    return *this;
  }
  Json& Str(absl::string_view v) {
    Comma();
    AppendJsonString(v, &out_);
    return *this;
  }
  template <typename T>
  Json& Num(T v) {
    Comma();
    absl::StrAppend(&out_, v);
    return *this;
  }
  Json& Bool(bool v) {
    Comma();
    out_.append(v ? "true" : "false");
    return *this;
  }
  Json& Field(absl::string_view k, absl::string_view v) { return Key(k).Str(v); }
  template <typename T>
  Json& NumField(absl::string_view k, T v) {
    return Key(k).Num(v);
  }
  Json& Dims(absl::string_view k, const Shape& shape) {
    Key(k).Open('[');
    for (int64_t d : shape) Num(d);
    return Close(']');
  }
  std::string Take() { return std::move(out_); }

 private:
  void Comma() {
    if (!first_) out_.push_back(',');
    first_ = false;
  }
  std::string out_;
  bool first_ = true;
};

void Duration(Json& j, absl::string_view key, const DurationStat& d) {
  j.Key(key).Open('{').NumField("count", d.count).NumField("ns", d.ns).Close('}');
}

}  // namespace

void AppendJsonString(absl::string_view s, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (u < 0x20 || u == 0x7f) {
      out->append("\\u00");
      out->push_back(kHex[u >> 4]);
      out->push_back(kHex[u & 15]);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

std::string ErrorJson(absl::string_view message) {
  std::string out = "{\"error\":";
  AppendJsonString(message, &out);
  out.push_back('}');
  return out;
}

std::string ServerMetadataJson(absl::string_view name, absl::string_view version,
                               const std::vector<std::string>& extensions) {
  Json j;
  j.Open('{').Field("name", name).Field("version", version).Key("extensions").Open('[');
  for (const std::string& e : extensions) j.Str(e);
  return j.Close(']').Close('}').Take();
}

std::string ModelMetadataJson(const ModelMetadata& m) {
  Json j;
  j.Open('{').Field("name", m.name).Key("versions").Open('[');
  for (const std::string& v : m.versions) j.Str(v);
  j.Close(']').Field("platform", m.platform);
  auto tensors = [&](absl::string_view key, const std::vector<TensorSpec>& specs) {
    j.Key(key).Open('[');
    for (const TensorSpec& s : specs) {
      // One datatype per tensor, as on gRPC: the default, the first accepted.
      j.Open('{').Field("name", s.name).Field("datatype", DataTypeName(s.datatypes.front()));
      j.Dims("shape", s.shape).Close('}');
    }
    j.Close(']');
  };
  tensors("inputs", m.inputs);
  tensors("outputs", m.outputs);
  return j.Close('}').Take();
}

std::string ModelConfigJson(const ServedModel& served) {
  const ModelMetadata& m = served.metadata();
  Json j;
  j.Open('{').Field("name", m.name).Field("platform", m.platform).Field("backend", "gemmserve");
  // No implicit batch dimension: requests give every dimension (Triton's 0).
  j.NumField("max_batch_size", 0);
  auto tensors = [&](absl::string_view key, const std::vector<TensorSpec>& specs, bool input) {
    j.Key(key).Open('[');
    for (const TensorSpec& s : specs) {
      j.Open('{').Field("name", s.name);
      j.Field("data_type", absl::StrCat("TYPE_", DataTypeName(s.datatypes.front())));
      j.Dims("dims", s.shape);
      if (input) j.Key("optional").Bool(s.optional);
      j.Close('}');
    }
    j.Close(']');
  };
  tensors("input", m.inputs, true);
  tensors("output", m.outputs, false);
  j.Key("parameters").Open('{');
  if (const auto& b = served.batching()) {
    j.Key("max_batch_rows").Open('{').Field("string_value", absl::StrCat(b->max_batch_rows));
    j.Close('}');
  }
  for (const auto& [key, value] : served.model().parameters()) {
    j.Key(key).Open('{').Field("string_value", value).Close('}');
  }
  j.Close('}');
  if (const auto& b = served.batching()) {
    j.Key("dynamic_batching").Open('{');
    j.NumField("max_queue_delay_microseconds", absl::ToInt64Microseconds(b->max_queue_delay));
    j.NumField("priority_levels", b->priority_levels);
    j.NumField("default_priority_level", b->default_priority_level);
    j.Key("default_queue_policy").Open('{').NumField("max_queue_size", b->max_queue_size);
    j.Key("allow_timeout_override").Bool(true);
    if (b->default_timeout != absl::InfiniteDuration()) {
      j.NumField("default_timeout_microseconds", absl::ToInt64Microseconds(b->default_timeout));
    }
    j.Close('}').Close('}');
  }
  j.Key("model_warmup").Open('[');
  for (const WarmupSample& sample : served.warmup()) {
    j.Open('{').Field("name", sample.name).NumField("batch_size", sample.batch_size);
    j.NumField("count", sample.count).Key("inputs").Open('{');
    for (const WarmupInput& input : sample.inputs) {
      j.Key(input.name).Open('{');
      j.Field("data_type", absl::StrCat("TYPE_", DataTypeName(input.type)));
      j.Dims("dims", input.shape);
      switch (input.data) {
        case WarmupInput::Data::kZero: j.Key("zero_data").Bool(true); break;
        case WarmupInput::Data::kRandom: j.Key("random_data").Bool(true); break;
        case WarmupInput::Data::kFile: j.Field("input_data_file", input.file); break;
      }
      j.Close('}');
    }
    j.Close('}').Close('}');
  }
  j.Close(']');
  return j.Close('}').Take();
}

std::string ModelStatisticsJson(const std::vector<ModelStatistics>& stats) {
  Json j;
  j.Open('{').Key("model_stats").Open('[');
  for (const ModelStatistics& s : stats) {
    j.Open('{').Field("name", s.name).Field("version", s.version);
    j.NumField("last_inference", s.last_inference_ms);
    j.NumField("inference_count", s.inference_count);
    j.NumField("execution_count", s.execution_count);
    j.Key("inference_stats").Open('{');
    Duration(j, "success", s.success);
    Duration(j, "fail", s.fail);
    Duration(j, "queue", s.queue);
    // Triton's schema has these (perf_analyzer indexes them); gemmserve has no
    // input/output stage apart from compute and no response cache: zero.
    Duration(j, "compute_input", DurationStat{});
    Duration(j, "compute_infer", s.compute_infer);
    Duration(j, "compute_output", DurationStat{});
    Duration(j, "cache_hit", DurationStat{});
    Duration(j, "cache_miss", DurationStat{});
    j.Close('}').Key("batch_stats").Open('[');
    for (const BatchSizeStat& b : s.batch_stats) {
      j.Open('{').NumField("batch_size", b.batch_size);
      Duration(j, "compute_input", DurationStat{});
      Duration(j, "compute_infer", b.compute_infer);
      Duration(j, "compute_output", DurationStat{});
      j.Close('}');
    }
    j.Close(']').Close('}');
  }
  return j.Close(']').Close('}').Take();
}

std::string RepositoryIndexJson(const std::vector<ModelStatus>& index) {
  Json j;
  j.Open('[');
  for (const ModelStatus& s : index) {
    const char* state = s.state == ModelState::kReady     ? "READY"
                        : s.state == ModelState::kLoading ? "LOADING"
                                                          : "UNAVAILABLE";
    j.Open('{').Field("name", s.name).Field("version", s.version).Field("state", state);
    j.Field("reason", s.reason).Close('}');
  }
  return j.Close(']').Take();
}

namespace {

// Counts a document's values (keys included) as a SAX reader meets them and
// stops the parse past a bound, so that a body of many small values (about
// 17 bytes of DOM for each byte of `[0,0,...]`) is refused before a DOM of it
// is built.
class ValueCounter : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, ValueCounter> {
 public:
  explicit ValueCounter(int64_t max_values) : left_(max_values) {}
  bool Default() { return --left_ >= 0; }
  bool String(const char*, rapidjson::SizeType, bool) { return Default(); }
  bool Key(const char*, rapidjson::SizeType, bool) { return Default(); }
  bool StartObject() { return Default(); }
  bool EndObject(rapidjson::SizeType) { return true; }
  bool StartArray() { return Default(); }
  bool EndArray(rapidjson::SizeType) { return true; }
  bool exhausted() const { return left_ < 0; }

 private:
  int64_t left_;
};

// A control body has a few fields: this many values is more than any needs.
constexpr int64_t kMaxControlValues = 4096;

absl::StatusOr<rapidjson::Document> ParseObject(absl::string_view body, const char* what) {
  {
    ValueCounter counter(kMaxControlValues);
    rapidjson::Reader reader;
    rapidjson::MemoryStream stream(body.data(), body.size());
    reader.Parse<rapidjson::kParseIterativeFlag>(stream, counter);
    if (counter.exhausted()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the ", what, " body has more than ", kMaxControlValues, " JSON values"));
    }
  }
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseIterativeFlag | rapidjson::kParseValidateEncodingFlag>(body.data(),
                                                                                    body.size());
  if (doc.HasParseError()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed JSON in the ", what, " body at byte ", doc.GetErrorOffset(), ": ",
                     rapidjson::GetParseError_En(doc.GetParseError())));
  }
  if (!doc.IsObject()) {
    return absl::InvalidArgumentError(absl::StrCat("the ", what, " body must be a JSON object"));
  }
  return doc;
}

}  // namespace

absl::StatusOr<ShmRegisterBody> ParseShmRegisterRequest(absl::string_view body) {
  absl::StatusOr<rapidjson::Document> doc = ParseObject(body, "shared memory register");
  if (!doc.ok()) return doc.status();
  ShmRegisterBody out;
  bool has_key = false, has_size = false;
  for (auto it = doc->MemberBegin(); it != doc->MemberEnd(); ++it) {
    const absl::string_view key(it->name.GetString(), it->name.GetStringLength());
    if (key == "key") {
      if (!it->value.IsString()) return absl::InvalidArgumentError("'key' must be a string");
      out.key.assign(it->value.GetString(), it->value.GetStringLength());
      has_key = true;
    } else if (key == "offset" || key == "byte_size") {
      if (!it->value.IsUint64()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", key, "' must be a non-negative integer"));
      }
      (key == "offset" ? out.offset : out.byte_size) = it->value.GetUint64();
      if (key == "byte_size") has_size = true;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown field '", ClientText(key),
                       "' in the shared memory register body; expected key, offset, byte_size"));
    }
  }
  if (!has_key || !has_size) {
    return absl::InvalidArgumentError(
        "the shared memory register body needs 'key' and 'byte_size'");
  }
  return out;
}

std::string ShmStatusJson(const std::vector<SharedMemoryRegionStatus>& regions) {
  Json j;
  j.Open('[');
  for (const SharedMemoryRegionStatus& r : regions) {
    j.Open('{').Field("name", r.name).Field("key", r.key);
    j.NumField("offset", r.offset).NumField("byte_size", r.byte_size).Close('}');
  }
  return j.Close(']').Take();
}

absl::StatusOr<bool> ParseRepositoryIndexRequest(absl::string_view body) {
  if (body.empty()) return false;
  absl::StatusOr<rapidjson::Document> doc = ParseObject(body, "repository index");
  if (!doc.ok()) return doc.status();
  bool ready = false;
  for (auto it = doc->MemberBegin(); it != doc->MemberEnd(); ++it) {
    const absl::string_view key(it->name.GetString(), it->name.GetStringLength());
    if (key != "ready") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown field '", ClientText(key), "' in the repository index body"));
    }
    if (!it->value.IsBool()) return absl::InvalidArgumentError("'ready' must be a boolean");
    ready = it->value.GetBool();
  }
  return ready;
}

absl::StatusOr<ModelLoadRequest> ParseModelLoadRequest(absl::string_view body) {
  ModelLoadRequest load;
  if (body.empty()) return load;
  absl::StatusOr<rapidjson::Document> doc = ParseObject(body, "load");
  if (!doc.ok()) return doc.status();
  for (auto it = doc->MemberBegin(); it != doc->MemberEnd(); ++it) {
    const absl::string_view key(it->name.GetString(), it->name.GetStringLength());
    if (key != "parameters") {
      return absl::InvalidArgumentError(absl::StrCat("unknown field '", ClientText(key),
                                                     "' in the load body; expected 'parameters'"));
    }
    if (!it->value.IsObject()) return absl::InvalidArgumentError("'parameters' must be an object");
    for (auto p = it->value.MemberBegin(); p != it->value.MemberEnd(); ++p) {
      const absl::string_view name(p->name.GetString(), p->name.GetStringLength());
      if (!p->value.IsString()) {
        return absl::InvalidArgumentError(
            absl::StrCat("load parameter '", ClientText(name), "' must be a string"));
      }
      const absl::string_view value(p->value.GetString(), p->value.GetStringLength());
      if (name == "config") {
        load.config = std::string(value);
      } else if (absl::StartsWith(name, "file:")) {
        std::string bytes;
        if (!absl::Base64Unescape(value, &bytes)) {
          return absl::InvalidArgumentError(
              absl::StrCat("load parameter '", ClientText(name), "' is not base64"));
        }
        load.files[std::string(name.substr(5))] = std::move(bytes);
      } else {
        return absl::InvalidArgumentError(absl::StrCat("unknown load parameter '", ClientText(name),
                                                       "'; expected 'config' or 'file:<path>'"));
      }
    }
  }
  return load;
}

absl::StatusOr<inference::LogSettingsRequest> ParseLogSettingsRequest(absl::string_view body) {
  inference::LogSettingsRequest request;
  if (body.empty()) return request;
  absl::StatusOr<rapidjson::Document> doc = ParseObject(body, "log settings");
  if (!doc.ok()) return doc.status();
  for (auto it = doc->MemberBegin(); it != doc->MemberEnd(); ++it) {
    const std::string key(it->name.GetString(), it->name.GetStringLength());
    auto& value = (*request.mutable_settings())[key];
    if (it->value.IsBool()) {
      value.set_bool_param(it->value.GetBool());
    } else if (it->value.IsUint()) {
      value.set_uint32_param(it->value.GetUint());
    } else if (it->value.IsString()) {
      value.set_string_param(std::string(it->value.GetString(), it->value.GetStringLength()));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "log setting '", ClientText(key), "' must be a bool, a uint32 or a string"));
    }
  }
  return request;
}

std::string LogSettingsJson(const inference::LogSettingsResponse& response) {
  std::map<std::string, const inference::LogSettingsResponse::SettingValue*> sorted;
  for (const auto& [key, value] : response.settings()) sorted[key] = &value;
  Json j;
  j.Open('{');
  for (const auto& [key, value] : sorted) {
    j.Key(key);
    switch (value->parameter_choice_case()) {
      case inference::LogSettingsResponse::SettingValue::kBoolParam:
        j.Bool(value->bool_param());
        break;
      case inference::LogSettingsResponse::SettingValue::kUint32Param:
        j.Num(value->uint32_param());
        break;
      default:
        j.Str(value->string_param());
    }
  }
  return j.Close('}').Take();
}

absl::StatusOr<inference::TraceSettingRequest> ParseTraceSettingRequest(
    absl::string_view body) {
  inference::TraceSettingRequest request;
  if (body.empty()) return request;
  absl::StatusOr<rapidjson::Document> doc = ParseObject(body, "trace settings");
  if (!doc.ok()) return doc.status();
  for (auto it = doc->MemberBegin(); it != doc->MemberEnd(); ++it) {
    const std::string key(it->name.GetString(), it->name.GetStringLength());
    auto& value = (*request.mutable_settings())[key];
    const rapidjson::Value& v = it->value;
    auto text = [](const rapidjson::Value& x) {
      return std::string(x.GetString(), x.GetStringLength());
    };
    if (v.IsNull()) continue;  // an empty list: the key is cleared
    if (v.IsString()) {
      value.add_value(text(v));
    } else if (v.IsInt64()) {
      value.add_value(absl::StrCat(v.GetInt64()));
    } else if (v.IsArray() && std::all_of(v.Begin(), v.End(), [](const rapidjson::Value& e) {
                 return e.IsString();
               })) {
      for (const rapidjson::Value& e : v.GetArray()) value.add_value(text(e));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("trace setting '", ClientText(key),
                       "' must be a string, an integer, an array of strings or null"));
    }
  }
  return request;
}

std::string TraceSettingJson(const inference::TraceSettingResponse& response) {
  std::map<std::string, const inference::TraceSettingResponse::SettingValue*> sorted;
  for (const auto& [key, value] : response.settings()) sorted[key] = &value;
  Json j;
  j.Open('{');
  for (const auto& [key, value] : sorted) {
    j.Key(key);
    if (key == "trace_level") {
      j.Open('[');
      for (const std::string& level : value->value()) j.Str(level);
      j.Close(']');
    } else {
      j.Str(value->value_size() > 0 ? value->value(0) : std::string());
    }
  }
  return j.Close('}').Take();
}

}  // namespace gemmserve
