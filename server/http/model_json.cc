#include "server/http/model_json.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "rapidjson/document.h"
#include "rapidjson/error/en.h"
#include "rapidjson/memorystream.h"
#include "rapidjson/reader.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"

namespace gemmserve {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

std::string ProtobufMessage(const google::protobuf::util::Status& status) {
  return std::string(status.message().data(), status.message().size());
}

// protobuf's JSON of `message`: field names as in the .proto; scalars at
// their defaults too when `defaults` (a oneof's unset members never).
absl::StatusOr<rapidjson::Document> ProtobufJson(const google::protobuf::Message& message,
                                                 bool defaults) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = defaults;
  std::string text;
  const auto status = google::protobuf::util::MessageToJsonString(message, &text, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("cannot write ", message.GetTypeName(),
                                            " as JSON: ", ProtobufMessage(status)));
  }
  rapidjson::Document doc;
  doc.Parse(text.data(), text.size());
  if (doc.HasParseError() || !doc.IsObject()) {
    return absl::InternalError(absl::StrCat("protobuf's JSON of ", message.GetTypeName(),
                                            " does not parse"));
  }
  return doc;
}

void Int64AsNumbers(rapidjson::Value& object, const Descriptor& type);

// One value of field `f`: a 64-bit integer's string becomes its number; a
// message's fields are walked in turn.
void FieldValueAsNumbers(rapidjson::Value& value, const FieldDescriptor& f) {
  if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    if (value.IsObject()) Int64AsNumbers(value, *f.message_type());
    return;
  }
  if (!value.IsString()) return;
  const absl::string_view text(value.GetString(), value.GetStringLength());
  if (f.cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
    int64_t n;
    if (absl::SimpleAtoi(text, &n)) value.SetInt64(n);
  } else if (f.cpp_type() == FieldDescriptor::CPPTYPE_UINT64) {
    uint64_t n;
    if (absl::SimpleAtoi(text, &n)) value.SetUint64(n);
  }
}

// proto3's JSON mapping writes int64 and uint64 as strings; Triton's REST API
// (and the clients that read it, perf_analyzer's among them) as numbers.
// Walks `object` beside its message type and turns those back into numbers.
void Int64AsNumbers(rapidjson::Value& object, const Descriptor& type) {
  for (auto& member : object.GetObject()) {
    const FieldDescriptor* f =
        type.FindFieldByName(std::string(member.name.GetString(), member.name.GetStringLength()));
    if (f == nullptr) continue;
    if (f->is_map()) {
      if (!member.value.IsObject()) continue;
      for (auto& entry : member.value.GetObject()) {
        FieldValueAsNumbers(entry.value, *f->message_type()->map_value());
      }
    } else if (f->is_repeated()) {
      if (!member.value.IsArray()) continue;
      for (auto& element : member.value.GetArray()) FieldValueAsNumbers(element, *f);
    } else {
      FieldValueAsNumbers(member.value, *f);
    }
  }
}

absl::StatusOr<rapidjson::Document> TritonDocument(const google::protobuf::Message& message,
                                                   bool defaults = true) {
  GEMMSERVE_ASSIGN_OR_RETURN(rapidjson::Document doc, ProtobufJson(message, defaults));
  Int64AsNumbers(doc, *message.GetDescriptor());
  return doc;
}

std::string Text(const rapidjson::Value& value) {
  rapidjson::StringBuffer buffer;
  Writer writer(buffer);
  value.Accept(writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

// The members of `object`, by name.
std::vector<const rapidjson::Value::Member*> Sorted(const rapidjson::Value& object) {
  std::vector<const rapidjson::Value::Member*> members;
  if (!object.IsObject()) return members;
  for (const auto& m : object.GetObject()) members.push_back(&m);
  std::sort(members.begin(), members.end(), [](const auto* a, const auto* b) {
    return absl::string_view(a->name.GetString(), a->name.GetStringLength()) <
           absl::string_view(b->name.GetString(), b->name.GetStringLength());
  });
  return members;
}

const rapidjson::Value& Member(const rapidjson::Value& object, const char* name) {
  static const rapidjson::Value kNull;
  if (!object.IsObject()) return kNull;
  auto it = object.FindMember(name);
  return it == object.MemberEnd() ? kNull : it->value;
}

// A settings map ({"settings": {key: {<one field>: value}}}) as Triton's flat
// object {key: value}; `value_of` picks what each setting's message becomes.
template <typename ValueOf>
absl::StatusOr<std::string> FlatSettings(const google::protobuf::Message& response,
                                         ValueOf value_of) {
  GEMMSERVE_ASSIGN_OR_RETURN(rapidjson::Document doc, TritonDocument(response, false));
  rapidjson::StringBuffer buffer;
  Writer writer(buffer);
  writer.StartObject();
  for (const auto* m : Sorted(Member(doc, "settings"))) {
    writer.Key(m->name.GetString(), m->name.GetStringLength());
    value_of(absl::string_view(m->name.GetString(), m->name.GetStringLength()), m->value, writer);
  }
  writer.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
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

// INVALID_ARGUMENT for a body of more than kMaxControlValues values.
absl::Status CheckValueCount(absl::string_view body, const char* what) {
  ValueCounter counter(kMaxControlValues);
  rapidjson::Reader reader;
  rapidjson::MemoryStream stream(body.data(), body.size());
  reader.Parse<rapidjson::kParseIterativeFlag>(stream, counter);
  if (!counter.exhausted()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the ", what, " body has more than ", kMaxControlValues, " JSON values"));
}

absl::StatusOr<rapidjson::Document> ParseObject(absl::string_view body, const char* what) {
  GEMMSERVE_RETURN_IF_ERROR(CheckValueCount(body, what));
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

absl::Status ProtoFromJson(absl::string_view body, const char* what,
                           google::protobuf::Message* message) {
  GEMMSERVE_RETURN_IF_ERROR(CheckValueCount(body, what));
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;  // a misspelt field is an error, not a default
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(body.data(), body.size()), message, options);
  if (status.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the ", what, " body: ", ClientText(ProtobufMessage(status), 200)));
}


}  // namespace

absl::StatusOr<std::string> ProtoJson(const google::protobuf::Message& message) {
  GEMMSERVE_ASSIGN_OR_RETURN(rapidjson::Document doc, TritonDocument(message));
  return Text(doc);
}

absl::StatusOr<std::string> ServerMetadataJson(const inference::ServerMetadataResponse& response) {
  return ProtoJson(response);
}

absl::StatusOr<std::string> ModelMetadataJson(const inference::ModelMetadataResponse& response) {
  return ProtoJson(response);
}

absl::StatusOr<std::string> ModelConfigJson(const inference::ModelConfigResponse& response) {
  return ProtoJson(response.config());
}

absl::StatusOr<std::string> ModelStatisticsJson(
    const inference::ModelStatisticsResponse& response) {
  return ProtoJson(response);
}

absl::StatusOr<std::string> RepositoryIndexJson(
    const inference::RepositoryIndexResponse& response) {
  GEMMSERVE_ASSIGN_OR_RETURN(rapidjson::Document doc, TritonDocument(response));
  const rapidjson::Value& models = Member(doc, "models");
  return models.IsArray() ? Text(models) : std::string("[]");
}

absl::StatusOr<std::string> ShmStatusJson(
    const inference::SystemSharedMemoryStatusResponse& response) {
  GEMMSERVE_ASSIGN_OR_RETURN(rapidjson::Document doc, TritonDocument(response));
  rapidjson::StringBuffer buffer;
  Writer writer(buffer);
  writer.StartArray();
  for (const auto* m : Sorted(Member(doc, "regions"))) m->value.Accept(writer);
  writer.EndArray();
  return std::string(buffer.GetString(), buffer.GetSize());
}

absl::StatusOr<std::string> LogSettingsJson(const inference::LogSettingsResponse& response) {
  // Each setting's message holds the one member of its oneof that is set.
  return FlatSettings(response, [](absl::string_view, const rapidjson::Value& v, Writer& w) {
    if (v.IsObject() && v.MemberCount() == 1) {
      v.MemberBegin()->value.Accept(w);
    } else {
      w.Null();
    }
  });
}

absl::StatusOr<std::string> TraceSettingJson(const inference::TraceSettingResponse& response) {
  // Each setting is a list of strings: trace_level stays one, the rest are
  // their first (or "").
  return FlatSettings(response, [](absl::string_view key, const rapidjson::Value& v, Writer& w) {
    const rapidjson::Value& values = Member(v, "value");
    if (key == "trace_level") {
      if (values.IsArray()) {
        values.Accept(w);
      } else {
        w.StartArray();
        w.EndArray();
      }
    } else if (values.IsArray() && !values.Empty() && values[0].IsString()) {
      values[0].Accept(w);
    } else {
      w.String("");
    }
  });
}

absl::StatusOr<inference::RepositoryIndexRequest> ParseRepositoryIndexRequest(
    absl::string_view body) {
  inference::RepositoryIndexRequest request;
  if (body.empty()) return request;
  GEMMSERVE_RETURN_IF_ERROR(ProtoFromJson(body, "repository index", &request));
  return request;
}

absl::StatusOr<inference::SystemSharedMemoryRegisterRequest> ParseShmRegisterRequest(
    absl::string_view body) {
  inference::SystemSharedMemoryRegisterRequest request;
  GEMMSERVE_RETURN_IF_ERROR(ProtoFromJson(body, "shared memory register", &request));
  if (request.key().empty() || request.byte_size() == 0) {
    return absl::InvalidArgumentError(
        "the shared memory register body needs 'key' and a positive 'byte_size'");
  }
  return request;
}

absl::StatusOr<inference::RepositoryModelLoadRequest> ParseModelLoadRequest(
    absl::string_view body) {
  inference::RepositoryModelLoadRequest load;
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
      const std::string name(p->name.GetString(), p->name.GetStringLength());
      if (!p->value.IsString()) {
        return absl::InvalidArgumentError(
            absl::StrCat("load parameter '", ClientText(name), "' must be a string"));
      }
      const absl::string_view value(p->value.GetString(), p->value.GetStringLength());
      inference::ModelRepositoryParameter& param = (*load.mutable_parameters())[name];
      if (!absl::StartsWith(name, "file:")) {
        param.set_string_param(std::string(value));
      } else if (!absl::Base64Unescape(value, param.mutable_bytes_param())) {
        return absl::InvalidArgumentError(
            absl::StrCat("load parameter '", ClientText(name), "' is not base64"));
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

}  // namespace gemmserve
