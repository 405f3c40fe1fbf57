#include "client/cli/perf_input_data.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"
#include "server/tensor/datatype.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"

namespace gemmserve::client {
namespace {

using Value = rapidjson::Value;

// Flattens a (possibly nested) array of numbers into `out`, row-major.
// Nested arrays must be rectangular: every array at one depth has the same
// length and holds only numbers or only arrays (`levels`, by depth).
struct Level {
  rapidjson::SizeType size;
  bool nested;
};
bool Flatten(const Value& v, std::vector<const Value*>* out, std::vector<Level>* levels,
             size_t depth = 0) {
  if (depth >= static_cast<size_t>(kMaxRank)) return false;
  const bool nested = !v.Empty() && v[0].IsArray();
  if (levels->size() == depth) {
    levels->push_back({v.Size(), nested});
  } else if ((*levels)[depth].size != v.Size() || (*levels)[depth].nested != nested) {
    return false;  // ragged
  }
  for (const Value& e : v.GetArray()) {
    if (nested) {
      if (!e.IsArray() || !Flatten(e, out, levels, depth + 1)) return false;
    } else if (e.IsNumber()) {
      out->push_back(&e);
    } else {
      return false;
    }
  }
  return true;
}

// One JSON number as an element of `type` at `dst`; false when it is not one.
bool PutNumber(const Value& v, DataType type, char* dst) {
  auto put = [dst](auto x) { std::memcpy(dst, &x, sizeof x); };
  if (IsFloatingPoint(type)) {
    const double d = v.GetDouble();
    switch (type) {
      case DataType::kFP64: put(d); return true;
      case DataType::kFP32: put(static_cast<float>(d)); return true;
      case DataType::kBF16: put(FloatToBFloat16(static_cast<float>(d))); return true;
      case DataType::kFP16: put(FloatToHalf(static_cast<float>(d))); return true;
      default: return false;
    }
  }
  if (!v.IsInt64() && !v.IsUint64()) return false;  // a fraction, or out of 64 bits
  switch (type) {
    case DataType::kINT64:
      if (!v.IsInt64()) return false;
      put(v.GetInt64());
      return true;
    case DataType::kUINT64:
      if (!v.IsUint64()) return false;
      put(v.GetUint64());
      return true;
    case DataType::kINT32:
      if (!v.IsInt()) return false;
      put(static_cast<int32_t>(v.GetInt()));
      return true;
    case DataType::kUINT32:
      if (!v.IsUint()) return false;
      put(static_cast<uint32_t>(v.GetUint()));
      return true;
    default: return false;
  }
}

struct Planned {
  std::string name;
  DataType type;
  std::vector<int64_t> shape;  // the metadata's, -1 for variable dimensions
  const ShapeOverride* shape_override = nullptr;
  bool optional = false;
};


template <typename... Parts>
absl::Status Invalid(Parts&&... parts) {
  return absl::InvalidArgumentError(absl::StrCat("--input_data: ", parts...));
}

// One input of one request, as read in the first pass: its numbers (still
// JSON) or its base64 bytes, and its shape.
struct Found {
  const Planned* input;
  std::vector<const Value*> numbers;  // JSON elements
  std::string bytes;                  // b64
  bool b64 = false;
  std::vector<int64_t> shape;
};

// The document's top level: {"data": [request, ...]} and nothing else.
absl::StatusOr<const Value*> Entries(const rapidjson::Document& doc) {
  if (doc.HasParseError()) {
    return Invalid("not JSON at offset ", doc.GetErrorOffset(), ": ",
                   rapidjson::GetParseError_En(doc.GetParseError()));
  }
  if (!doc.IsObject()) return Invalid("expected an object with \"data\"");
  for (const auto& member : doc.GetObject()) {
    const absl::string_view key(member.name.GetString(), member.name.GetStringLength());
    if (key == "validation_data") {
      return Invalid("\"validation_data\" is not supported: perf does not check answers");
    }
    if (key != "data") return Invalid("unknown field \"", key, "\"; expected \"data\"");
  }
  if (!doc.HasMember("data") || !doc["data"].IsArray() || doc["data"].Empty()) {
    return Invalid("\"data\" must be a non-empty array of requests");
  }
  const Value& entries = doc["data"];
  if (static_cast<int64_t>(entries.Size()) > kPerfMaxInputDataEntries) {
    return Invalid(entries.Size(), " requests, over the limit of ", kPerfMaxInputDataEntries);
  }
  return &entries;
}

// The model's inputs, each with its --shape and whether the config says it
// is optional.
absl::StatusOr<std::vector<Planned>> PlanInputs(const inference::ModelMetadataResponse& metadata,
                                                const inference::ModelConfig* config,
                                                const PerfOptions& options) {
  std::vector<Planned> planned;
  for (const auto& input : metadata.inputs()) {
    absl::StatusOr<DataType> type = ParseDataType(input.datatype());
    if (!type.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("input '", input.name(), "' of model '", metadata.name(), "' has datatype ",
                       input.datatype(), ": ", type.status().message()));
    }
    Planned p{input.name(), *type, {input.shape().begin(), input.shape().end()}};
    for (const ShapeOverride& o : options.shapes) {
      if (o.name == p.name) p.shape_override = &o;
    }
    if (config != nullptr) {
      for (const inference::ModelInput& in : config->input()) {
        if (in.name() == p.name) p.optional = in.optional();
      }
    }
    planned.push_back(std::move(p));
  }
  return planned;
}

// {"content": [...] | "b64": "...", "shape": [...]}: fills `f`'s bytes or
// points `content` at the numbers; `shape` when given.
absl::Status ReadTensorObject(const Value& v, const std::string& where, Found& f,
                              const Value** content, std::optional<std::vector<int64_t>>* shape) {
  for (const auto& m : v.GetObject()) {
    const absl::string_view key(m.name.GetString(), m.name.GetStringLength());
    if (key != "content" && key != "b64" && key != "shape") {
      return Invalid(where, ": unknown field \"", key, "\"; expected content or b64, and shape");
    }
  }
  if (v.HasMember("shape")) {
    const Value& s = v["shape"];
    if (!s.IsArray() || static_cast<int64_t>(s.Size()) > kMaxRank) {
      return Invalid(where, ": \"shape\" must be an array of at most ", kMaxRank, " dimensions");
    }
    shape->emplace();
    for (const Value& d : s.GetArray()) {
      if (!d.IsInt64() || d.GetInt64() < 0) {
        return Invalid(where, ": \"shape\" holds non-negative integers");
      }
      (*shape)->push_back(d.GetInt64());
    }
  }
  if (v.HasMember("content") == v.HasMember("b64")) {
    return Invalid(where, ": give one of \"content\" and \"b64\"");
  }
  if (!v.HasMember("b64")) {
    *content = &v["content"];
    return absl::OkStatus();
  }
  if (!v["b64"].IsString()) return Invalid(where, ": \"b64\" must be a string");
  if (!absl::Base64Unescape(absl::string_view(v["b64"].GetString(), v["b64"].GetStringLength()),
                            &f.bytes)) {
    return Invalid(where, ": \"b64\" is not base64");
  }
  f.b64 = true;
  *content = nullptr;
  return absl::OkStatus();
}

// The model's shape with its one variable dimension from the element count.
absl::StatusOr<std::vector<int64_t>> ShapeFromModel(const Planned& p, int64_t elements,
                                                    const std::string& where) {
  std::vector<int64_t> shape = p.shape;
  int variable = 0;
  int64_t fixed = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      ++variable;
    } else {
      fixed = SaturatingMul(fixed, d);
    }
  }
  if (variable > 1) {
    return Invalid(where, ": the model's shape ", ShapeToString(p.shape),
                   " has several variable dimensions; give \"shape\" or --shape");
  }
  if (variable == 1) {
    if (fixed == 0 || elements % fixed != 0) {
      return Invalid(where, ": ", elements, " elements do not fill the model's shape ",
                     ShapeToString(p.shape));
    }
    for (int64_t& d : shape) {
      if (d < 0) d = elements / fixed;
    }
  }
  return shape;
}

// One input of one request: its values and a shape that holds them.
absl::StatusOr<Found> ReadInput(const Value& v, const Planned& p, const std::string& where) {
  Found f{&p, {}, {}, false, {}};
  const Value* content = &v;
  std::optional<std::vector<int64_t>> shape;
  if (v.IsObject()) GEMMSERVE_RETURN_IF_ERROR(ReadTensorObject(v, where, f, &content, &shape));
  if (content != nullptr) {
    std::vector<Level> levels;
    if (!content->IsArray() || !Flatten(*content, &f.numbers, &levels)) {
      return Invalid(where, ": expected a (rectangular) array of numbers, \"content\" or \"b64\"");
    }
  }
  const int64_t size = DataTypeSize(p.type);
  const int64_t elements = f.b64 ? static_cast<int64_t>(f.bytes.size()) / size
                                 : static_cast<int64_t>(f.numbers.size());
  if (f.b64 && static_cast<int64_t>(f.bytes.size()) % size != 0) {
    return Invalid(where, ": ", f.bytes.size(), " bytes are not whole ", DataTypeName(p.type),
                   " elements");
  }
  if (shape) {
    f.shape = *shape;
  } else if (p.shape_override != nullptr) {
    f.shape = p.shape_override->dims;
  } else {
    GEMMSERVE_ASSIGN_OR_RETURN(f.shape, ShapeFromModel(p, elements, where));
  }
  absl::StatusOr<int64_t> want = ElementCount(f.shape);
  if (!want.ok() || *want != elements) {
    return Invalid(where, ": ", elements, " elements, but shape ", ShapeToString(f.shape),
                   want.ok() ? absl::StrCat(" holds ", *want) : std::string(" is invalid"));
  }
  return f;
}

// Pass 1: every entry's inputs, shapes and sizes, so that the total is
// known (and held to kPerfPoolMaxBytes) before any tensor is allocated.
absl::StatusOr<std::vector<std::vector<Found>>> PlanRequests(
    const Value& entries, const std::vector<Planned>& planned, absl::string_view model) {
  std::vector<std::string> names;
  for (const Planned& p : planned) names.push_back(p.name);
  std::vector<std::vector<Found>> requests;
  int64_t total_bytes = 0;
  for (rapidjson::SizeType i = 0; i < entries.Size(); ++i) {
    const Value& entry = entries[i];
    const std::string at = absl::StrCat("request ", i);
    if (!entry.IsObject()) return Invalid(at, ": expected an object of inputs");
    for (const auto& member : entry.GetObject()) {
      const std::string name(member.name.GetString(), member.name.GetStringLength());
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        return Invalid(at, ": model '", model, "' has no input '", name,
                       "' (its inputs: ", absl::StrJoin(names, ", "), ")");
      }
    }
    std::vector<Found> found;
    for (const Planned& p : planned) {
      const std::string where = absl::StrCat(at, ", input '", p.name, "'");
      auto it = entry.FindMember(p.name.c_str());
      if (it == entry.MemberEnd()) {
        if (p.optional) continue;
        return Invalid(where, ": missing (every request needs every input the model requires)");
      }
      GEMMSERVE_ASSIGN_OR_RETURN(Found f, ReadInput(it->value, p, where));
      const int64_t bytes = f.b64 ? static_cast<int64_t>(f.bytes.size())
                                  : SaturatingMul(static_cast<int64_t>(f.numbers.size()),
                                                  DataTypeSize(p.type));
      total_bytes = SaturatingAdd(total_bytes, bytes);
      if (total_bytes > kPerfPoolMaxBytes) {
        return Invalid("the requests hold more than ", kPerfPoolMaxBytes,
                       " bytes of tensors together");
      }
      found.push_back(std::move(f));
    }
    requests.push_back(std::move(found));
  }
  return requests;
}

// Pass 2: the tensors, each number converted to its input's datatype.
absl::StatusOr<std::vector<std::vector<HostTensor>>> MakeTensors(
    std::vector<std::vector<Found>>& requests) {
  std::vector<std::vector<HostTensor>> pool;
  pool.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    std::vector<HostTensor> tensors;
    for (Found& f : requests[i]) {
      HostTensor t{f.input->name, std::string(DataTypeName(f.input->type)), f.shape, {}};
      if (f.b64) {
        t.bytes = std::move(f.bytes);
      } else {
        const int64_t size = DataTypeSize(f.input->type);
        t.bytes.assign(f.numbers.size() * static_cast<size_t>(size), '\0');
        for (size_t e = 0; e < f.numbers.size(); ++e) {
          if (!PutNumber(*f.numbers[e], f.input->type, t.bytes.data() + e * size)) {
            return Invalid("request ", i, ", input '", f.input->name, "': element ", e,
                           " is not a ", DataTypeName(f.input->type), " value");
          }
        }
      }
      tensors.push_back(std::move(t));
    }
    pool.push_back(std::move(tensors));
  }
  return pool;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<HostTensor>>> ParsePerfInputData(
    absl::string_view json, const inference::ModelMetadataResponse& metadata,
    const inference::ModelConfig* config, const PerfOptions& options) {
  rapidjson::Document doc;
  // Iterative: no nesting depth can exhaust the stack.
  doc.Parse<rapidjson::kParseIterativeFlag>(json.data(), json.size());
  GEMMSERVE_ASSIGN_OR_RETURN(const Value* entries, Entries(doc));
  GEMMSERVE_ASSIGN_OR_RETURN(std::vector<Planned> planned, PlanInputs(metadata, config, options));
  GEMMSERVE_ASSIGN_OR_RETURN(std::vector<std::vector<Found>> requests,
                             PlanRequests(*entries, planned, metadata.name()));
  return MakeTensors(requests);
}

absl::StatusOr<std::vector<std::vector<HostTensor>>> ReadPerfInputData(
    const std::string& path, const inference::ModelMetadataResponse& metadata,
    const inference::ModelConfig* config, const PerfOptions& options) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    const std::string message = absl::StrCat("--input_data ", path, ": ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EACCES) return absl::PermissionDeniedError(message);
    return absl::InvalidArgumentError(message);
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--input_data ", path, ": not a regular file (give a JSON file)"));
  }
  if (st.st_size > kPerfMaxInputDataFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--input_data ", path, ": ", st.st_size,
                                                   " bytes, over the limit of ",
                                                   kPerfMaxInputDataFileBytes));
  }
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  if (!in) {
    return absl::PermissionDeniedError(absl::StrCat("--input_data ", path, ": cannot open it"));
  }
  if (!in.read(text.data(), st.st_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--input_data ", path, ": shorter than its size (did it change?)"));
  }
  return ParsePerfInputData(text, metadata, config, options);
}

}  // namespace gemmserve::client
