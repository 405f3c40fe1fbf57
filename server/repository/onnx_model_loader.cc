#include "server/repository/onnx_model_loader.h"

#include <fcntl.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <onnx/onnx_pb.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"
#include "server/core/resident_models.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace {

namespace fs = std::filesystem;

// ONNX TensorProto.DataType values gemmserve serves.
absl::StatusOr<DataType> FromOnnxType(int32_t t) {
  switch (t) {
    case onnx::TensorProto::FLOAT: return DataType::kFP32;
    case onnx::TensorProto::DOUBLE: return DataType::kFP64;
    case onnx::TensorProto::FLOAT16: return DataType::kFP16;
    case onnx::TensorProto::BFLOAT16: return DataType::kBF16;
    case onnx::TensorProto::INT32: return DataType::kINT32;
    case onnx::TensorProto::INT64: return DataType::kINT64;
    case onnx::TensorProto::UINT32: return DataType::kUINT32;
    case onnx::TensorProto::UINT64: return DataType::kUINT64;
    default:
      return absl::InvalidArgumentError(absl::StrCat("ONNX element type ", t, " is not served"));
  }
}

// Builds the messages: "model 'moe' (1/model.onnx): ...".
class Context {
 public:
  Context(std::string model, std::string file) : model_(std::move(model)), file_(std::move(file)) {}
  absl::Status Invalid(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("model '", model_, "' (", file_, "): ", what));
  }
  absl::Status NotFound(absl::string_view what) const {
    return absl::NotFoundError(absl::StrCat("model '", model_, "' (", file_, "): ", what));
  }

 private:
  std::string model_, file_;
};

absl::StatusOr<onnx::ModelProto> ReadModelProto(const fs::path& path, const Context& ctx) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ctx.NotFound("cannot open the model file");
  onnx::ModelProto model;
  bool ok;
  {
    google::protobuf::io::FileInputStream file(fd);
    google::protobuf::io::CodedInputStream coded(&file);
    coded.SetTotalBytesLimit(INT_MAX);
    ok = model.ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
  }
  ::close(fd);
  if (!ok) return ctx.Invalid("not a valid ONNX model (protobuf parse failed)");
  return model;
}

// An external data location, checked to stay inside `dir`.
absl::StatusOr<fs::path> ExternalPath(const fs::path& dir, const std::string& location,
                                      const std::string& tensor, const Context& ctx) {
  const fs::path rel(location);
  bool escapes = location.empty() || rel.is_absolute();
  for (const auto& part : rel) escapes |= (part == "..");
  if (escapes) {
    return ctx.Invalid(absl::StrCat("initializer '", tensor,
                                    "': external data location must be a relative path inside "
                                    "the version directory"));
  }
  return dir / rel;
}

// Reads an initializer into an aligned tensor of its datatype.
absl::StatusOr<Tensor> ReadInitializer(const onnx::TensorProto& proto, const fs::path& dir,
                                       const Context& ctx) {
  const std::string& name = proto.name();
  absl::StatusOr<DataType> type = FromOnnxType(proto.data_type());
  if (!type.ok()) return ctx.Invalid(absl::StrCat("initializer '", name, "': ", type.status().message()));
  Shape shape(proto.dims().begin(), proto.dims().end());
  for (int64_t d : shape) {
    if (d < 0) return ctx.Invalid(absl::StrCat("initializer '", name, "': negative dimension"));
  }
  absl::StatusOr<Tensor> allocated = Tensor::Allocate(*type, shape);
  if (!allocated.ok()) {
    return ctx.Invalid(absl::StrCat("initializer '", name, "': ", allocated.status().message()));
  }
  Tensor t = *std::move(allocated);
  const int64_t bytes = t.byte_size();
  const int64_t count = t.num_elements();
  auto size_error = [&](int64_t got, const char* unit) {
    return ctx.Invalid(absl::StrCat("initializer '", name, "': shape ", ShapeToString(shape),
                                    " of ", DataTypeName(*type), " needs ",
                                    std::strcmp(unit, "bytes") == 0 ? bytes : count, " ", unit,
                                    ", the file holds ", got));
  };

  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& kv : proto.external_data()) {
      if (kv.key() == "location") {
        location = kv.value();
      } else if (kv.key() == "offset" || kv.key() == "length") {
        int64_t v;
        if (!absl::SimpleAtoi(kv.value(), &v) || v < 0) {
          return ctx.Invalid(absl::StrCat("initializer '", name, "': external data ", kv.key(),
                                          " is not a non-negative integer"));
        }
        (kv.key() == "offset" ? offset : length) = v;
      }
    }
    GEMMSERVE_ASSIGN_OR_RETURN(fs::path path, ExternalPath(dir, location, name, ctx));
    std::error_code ec;
    const uintmax_t file_size = fs::file_size(path, ec);
    if (ec) {
      return ctx.NotFound(absl::StrCat("initializer '", name,
                                       "': cannot read its external data file '", location, "'"));
    }
    if (length < 0) length = static_cast<int64_t>(file_size) - std::min<int64_t>(offset, file_size);
    if (length != bytes) return size_error(length, "bytes");
    if (static_cast<uintmax_t>(offset) > file_size ||
        static_cast<uintmax_t>(length) > file_size - static_cast<uintmax_t>(offset)) {
      return ctx.Invalid(absl::StrCat("initializer '", name, "': external data range [", offset,
                                      ", ", offset + length, ") is beyond the end of '",
                                      location, "' (", file_size, " bytes)"));
    }
    std::ifstream in(path, std::ios::binary);
    in.seekg(offset);
    char* dst = static_cast<char*>(t.raw_data());
    for (int64_t done = 0; done < bytes && in;) {
      const int64_t chunk = std::min<int64_t>(bytes - done, int64_t{1} << 30);
      in.read(dst + done, chunk);
      done += in.gcount();
      if (in.gcount() == 0) break;
    }
    if (!in && bytes > 0) {
      return ctx.Invalid(absl::StrCat("initializer '", name, "': reading '", location, "' failed"));
    }
    return t;
  }
  if (proto.has_raw_data()) {
    if (static_cast<int64_t>(proto.raw_data().size()) != bytes) {
      return size_error(static_cast<int64_t>(proto.raw_data().size()), "bytes");
    }
    if (bytes > 0) std::memcpy(t.raw_data(), proto.raw_data().data(), static_cast<size_t>(bytes));
    return t;
  }
  // The typed fields, as the ONNX spec stores each type.
  auto copy = [&](const auto& field, auto convert) -> absl::Status {
    if (static_cast<int64_t>(field.size()) != count) return size_error(field.size(), "elements");
    using Out = decltype(convert(*field.begin()));
    Out* out = static_cast<Out*>(t.raw_data());
    int64_t i = 0;
    for (const auto& v : field) out[i++] = convert(v);
    return absl::OkStatus();
  };
  switch (*type) {
    case DataType::kFP32:
      GEMMSERVE_RETURN_IF_ERROR(copy(proto.float_data(), [](float v) { return v; }));
      break;
    case DataType::kFP64:
      GEMMSERVE_RETURN_IF_ERROR(copy(proto.double_data(), [](double v) { return v; }));
      break;
    case DataType::kFP16:
    case DataType::kBF16:  // the 16 bits in each int32
      GEMMSERVE_RETURN_IF_ERROR(
          copy(proto.int32_data(), [](int32_t v) { return static_cast<uint16_t>(v); }));
      break;
    case DataType::kINT32:
      GEMMSERVE_RETURN_IF_ERROR(copy(proto.int32_data(), [](int32_t v) { return v; }));
      break;
    case DataType::kINT64:
      GEMMSERVE_RETURN_IF_ERROR(copy(proto.int64_data(), [](int64_t v) { return v; }));
      break;
    case DataType::kUINT32:
      GEMMSERVE_RETURN_IF_ERROR(
          copy(proto.uint64_data(), [](uint64_t v) { return static_cast<uint32_t>(v); }));
      break;
    case DataType::kUINT64:
      GEMMSERVE_RETURN_IF_ERROR(copy(proto.uint64_data(), [](uint64_t v) { return v; }));
      break;
  }
  return t;
}

// A graph input as the tensor spec requests must meet: its one datatype and
// its dimensions (-1 where the graph leaves them symbolic).
absl::StatusOr<TensorSpec> GraphInputSpec(const onnx::ValueInfoProto& info, const Context& ctx) {
  if (!info.type().has_tensor_type()) {
    return ctx.Invalid(absl::StrCat("graph input '", info.name(), "' is not a tensor"));
  }
  const auto& tt = info.type().tensor_type();
  absl::StatusOr<DataType> type = FromOnnxType(tt.elem_type());
  if (!type.ok()) {
    return ctx.Invalid(absl::StrCat("graph input '", info.name(), "': ", type.status().message()));
  }
  TensorSpec spec;
  spec.name = info.name();
  spec.datatypes = {*type};
  if (!tt.has_shape()) {
    return ctx.Invalid(absl::StrCat("graph input '", info.name(), "' has no shape (rank)"));
  }
  for (const auto& dim : tt.shape().dim()) {
    spec.shape.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
  }
  return spec;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadOnnxModel(const std::string& model_name,
                                                     const std::string& version,
                                                     const std::string& version_dir,
                                                     const std::string& filename) {
  const Context ctx(model_name, absl::StrCat(version, "/", filename));
  const fs::path dir(version_dir);
  GEMMSERVE_ASSIGN_OR_RETURN(onnx::ModelProto proto, ReadModelProto(dir / filename, ctx));
  const onnx::GraphProto& graph = proto.graph();
  if (graph.node_size() != 1) {
    return ctx.Invalid(absl::StrCat("the graph has ", graph.node_size(),
                                    " nodes; gemmserve serves one-node graphs (MatMul or "
                                    "GroupedMatMul)"));
  }
  const onnx::NodeProto& node = graph.node(0);
  if (!node.domain().empty() && node.domain() != "ai.onnx") {
    return ctx.Invalid(absl::StrCat("node '", node.name(), "' is in domain '", node.domain(),
                                    "'; only the default ONNX domain is served"));
  }
  const bool matmul = node.op_type() == "MatMul";
  if (!matmul && node.op_type() != "GroupedMatMul") {
    return ctx.Invalid(absl::StrCat("unknown op '", node.op_type(),
                                    "'; gemmserve serves MatMul and GroupedMatMul"));
  }
  if (node.output_size() != 1 || node.output(0).empty()) {
    return ctx.Invalid(absl::StrCat("node '", node.name(), "' must have one output"));
  }

  std::map<std::string, const onnx::TensorProto*> initializers;
  for (const auto& init : graph.initializer()) initializers[init.name()] = &init;
  std::map<std::string, const onnx::ValueInfoProto*> graph_inputs;
  for (const auto& in : graph.input()) {
    if (!initializers.count(in.name())) graph_inputs[in.name()] = &in;
  }
  auto resident = [&](int i, const char* role) -> absl::StatusOr<Tensor> {
    const std::string& name = node.input(i);
    auto it = initializers.find(name);
    if (it == initializers.end()) {
      return ctx.Invalid(absl::StrCat(node.op_type(), " input ", i, " ('", name, "', ", role,
                                      ") must be an initializer: it is the resident weight"));
    }
    return ReadInitializer(*it->second, dir, ctx);
  };
  auto sent = [&](int i, const char* role) -> absl::StatusOr<TensorSpec> {
    const std::string& name = node.input(i);
    auto it = graph_inputs.find(name);
    if (it == graph_inputs.end()) {
      return ctx.Invalid(absl::StrCat(node.op_type(), " input ", i, " ('", name, "', ", role,
                                      ") must be a graph input: requests send it"));
    }
    return GraphInputSpec(*it->second, ctx);
  };
  auto wrap = [&](absl::StatusOr<std::unique_ptr<Model>> m) -> absl::StatusOr<std::unique_ptr<Model>> {
    if (!m.ok()) return ctx.Invalid(m.status().message());
    return m;
  };

  if (matmul) {
    if (node.input_size() != 2) return ctx.Invalid("MatMul needs two inputs, A and B");
    ResidentMatMulSpec spec;
    spec.name = model_name;
    spec.version = version;
    GEMMSERVE_ASSIGN_OR_RETURN(spec.a, sent(0, "A"));
    GEMMSERVE_ASSIGN_OR_RETURN(spec.b, resident(1, "B"));
    spec.output_name = node.output(0);
    return wrap(MakeResidentMatMulModel(std::move(spec)));
  }
  if (node.input_size() < 3 || node.input_size() > 4) {
    return ctx.Invalid("GroupedMatMul needs 3 or 4 inputs: input, weights, group_indices, [bias]");
  }
  ResidentGroupedMatMulSpec spec;
  spec.name = model_name;
  spec.version = version;
  GEMMSERVE_ASSIGN_OR_RETURN(spec.input, sent(0, "input"));
  GEMMSERVE_ASSIGN_OR_RETURN(spec.weights, resident(1, "weights"));
  GEMMSERVE_ASSIGN_OR_RETURN(spec.group_indices, sent(2, "group_indices"));
  if (node.input_size() == 4 && !node.input(3).empty()) {
    GEMMSERVE_ASSIGN_OR_RETURN(spec.bias, resident(3, "bias"));
  }
  spec.output_name = node.output(0);
  return wrap(MakeResidentGroupedMatMulModel(std::move(spec)));
}

}  // namespace gemmserve
