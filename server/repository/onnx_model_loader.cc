#include "server/repository/onnx_model_loader.h"

#include <fcntl.h>
#include <unistd.h>

#include <climits>
#include <cstring>
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
#include "server/common/client_text.h"
#include "server/common/model_name.h"
#include "server/common/status_macros.h"
#include "server/models/resident_models.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace {

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
  const std::string& model() const { return model_; }

 private:
  std::string model_, file_;
};

absl::StatusOr<onnx::ModelProto> ReadModelProto(const ModelFiles& files, const std::string& version,
                                                const std::string& filename, const Context& ctx) {
  absl::StatusOr<std::unique_ptr<ModelFile>> file = files.Open(version, filename);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("model '", ctx.model(), "': ", file.status().message()));
  }
  onnx::ModelProto model;
  if (!(*file)->ParseInto(&model))
    return ctx.Invalid("not a valid ONNX model (protobuf parse failed)");
  return model;
}

// Reads an initializer into an aligned tensor of its datatype. Its size is
// computed from its dimensions and checked against the data the file holds
// before the tensor is allocated.
absl::StatusOr<Tensor> ReadInitializer(const onnx::TensorProto& proto, const ModelFiles& files,
                                       const std::string& version, const Context& ctx) {
  const std::string name = ClientText(proto.name());
  absl::StatusOr<DataType> type = FromOnnxType(proto.data_type());
  if (!type.ok())
    return ctx.Invalid(absl::StrCat("initializer '", name, "': ", type.status().message()));
  Shape shape(proto.dims().begin(), proto.dims().end());
  const absl::StatusOr<int64_t> elements = ElementCount(shape);
  const absl::StatusOr<int64_t> byte_size = ByteSize(shape, *type);
  if (!elements.ok() || !byte_size.ok()) {
    const absl::Status& e = elements.ok() ? byte_size.status() : elements.status();
    return ctx.Invalid(absl::StrCat("initializer '", name, "': ", e.message()));
  }
  const int64_t bytes = *byte_size;
  const int64_t count = *elements;
  auto size_error = [&](int64_t got, const char* unit) {
    return ctx.Invalid(absl::StrCat("initializer '", name, "': shape ", ShapeToString(shape),
                                    " of ", DataTypeName(*type), " needs ",
                                    std::strcmp(unit, "bytes") == 0 ? bytes : count, " ", unit,
                                    ", the file holds ", got));
  };
  auto allocate = [&]() -> absl::StatusOr<Tensor> {
    absl::StatusOr<Tensor> t = Tensor::Allocate(*type, shape);
    if (!t.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat("model '", ctx.model(), "': initializer '",
                                                       name, "': ", t.status().message()));
    }
    return t;
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
    if (location.empty()) {
      return ctx.Invalid(absl::StrCat("initializer '", name, "': external data has no location"));
    }
    absl::StatusOr<std::unique_ptr<ModelFile>> file = files.Open(version, location);
    if (!file.ok()) {
      return absl::Status(file.status().code(),
                          absl::StrCat("model '", ctx.model(), "': initializer '", name,
                                       "': external data: ", file.status().message()));
    }
    const int64_t file_size = (*file)->size();
    if (length < 0) length = file_size - std::min(offset, file_size);
    if (length != bytes) return size_error(length, "bytes");
    if (offset > file_size || length > file_size - offset) {
      return ctx.Invalid(absl::StrCat("initializer '", name, "': external data range [", offset,
                                      ", ", offset + length, ") is beyond the end of '",
                                      ClientText(location), "' (", file_size, " bytes)"));
    }
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor t, allocate());
    absl::Status read = (*file)->Read(offset, bytes, t.raw_data());
    if (!read.ok()) return ctx.Invalid(absl::StrCat("initializer '", name, "': ", read.message()));
    return t;
  }
  if (proto.has_raw_data()) {
    if (static_cast<int64_t>(proto.raw_data().size()) != bytes) {
      return size_error(static_cast<int64_t>(proto.raw_data().size()), "bytes");
    }
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor t, allocate());
    if (bytes > 0) std::memcpy(t.raw_data(), proto.raw_data().data(), static_cast<size_t>(bytes));
    return t;
  }
  // The typed fields, as the ONNX spec stores each type.
  auto copy = [&](const auto& field, auto convert) -> absl::StatusOr<Tensor> {
    if (static_cast<int64_t>(field.size()) != count) return size_error(field.size(), "elements");
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor t, allocate());
    using Out = decltype(convert(*field.begin()));
    Out* out = static_cast<Out*>(t.raw_data());
    int64_t i = 0;
    for (const auto& v : field) out[i++] = convert(v);
    return t;
  };
  switch (*type) {
    case DataType::kFP32: return copy(proto.float_data(), [](float v) { return v; });
    case DataType::kFP64: return copy(proto.double_data(), [](double v) { return v; });
    case DataType::kFP16:
    case DataType::kBF16:  // the 16 bits in each int32
      return copy(proto.int32_data(), [](int32_t v) { return static_cast<uint16_t>(v); });
    case DataType::kINT32: return copy(proto.int32_data(), [](int32_t v) { return v; });
    case DataType::kINT64: return copy(proto.int64_data(), [](int64_t v) { return v; });
    case DataType::kUINT32:
      return copy(proto.uint64_data(), [](uint64_t v) { return static_cast<uint32_t>(v); });
    case DataType::kUINT64: return copy(proto.uint64_data(), [](uint64_t v) { return v; });
  }
  return ctx.Invalid(absl::StrCat("initializer '", name, "': unknown datatype"));
}

// A graph input as the tensor spec requests must meet: its one datatype and
// its dimensions (-1 where the graph leaves them symbolic).
absl::StatusOr<TensorSpec> GraphInputSpec(const onnx::ValueInfoProto& info, const Context& ctx) {
  const std::string name = ClientText(info.name());
  if (absl::Status valid = ValidateTensorName(info.name()); !valid.ok()) {
    return ctx.Invalid(absl::StrCat("graph input: ", valid.message()));
  }
  if (!info.type().has_tensor_type()) {
    return ctx.Invalid(absl::StrCat("graph input '", name, "' is not a tensor"));
  }
  const auto& tt = info.type().tensor_type();
  absl::StatusOr<DataType> type = FromOnnxType(tt.elem_type());
  if (!type.ok()) {
    return ctx.Invalid(absl::StrCat("graph input '", name, "': ", type.status().message()));
  }
  TensorSpec spec;
  spec.name = info.name();
  spec.datatypes = {*type};
  if (!tt.has_shape()) {
    return ctx.Invalid(absl::StrCat("graph input '", name, "' has no shape (rank)"));
  }
  if (tt.shape().dim_size() > kMaxRank) {
    return ctx.Invalid(absl::StrCat("graph input '", name, "' has rank ", tt.shape().dim_size(),
                                    ", over the maximum rank ", kMaxRank));
  }
  for (const auto& dim : tt.shape().dim()) {
    if (dim.has_dim_value() && dim.dim_value() < 0) {
      return ctx.Invalid(
          absl::StrCat("graph input '", name, "' has a negative dimension ", dim.dim_value()));
    }
    spec.shape.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
  }
  return spec;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadOnnxModel(const std::string& model_name,
                                                     const std::string& version,
                                                     const ModelFiles& files,
                                                     const std::string& filename) {
  const Context ctx(model_name, absl::StrCat(version, "/", ClientText(filename)));
  GEMMSERVE_ASSIGN_OR_RETURN(onnx::ModelProto proto, ReadModelProto(files, version, filename, ctx));
  const onnx::GraphProto& graph = proto.graph();
  if (graph.node_size() != 1) {
    return ctx.Invalid(absl::StrCat("the graph has ", graph.node_size(),
                                    " nodes; gemmserve serves one-node graphs (MatMul or "
                                    "GroupedMatMul)"));
  }
  const onnx::NodeProto& node = graph.node(0);
  const std::string node_name = ClientText(node.name());
  if (!node.domain().empty() && node.domain() != "ai.onnx") {
    return ctx.Invalid(absl::StrCat("node '", node_name, "' is in domain '",
                                    ClientText(node.domain()),
                                    "'; only the default ONNX domain is served"));
  }
  const bool matmul = node.op_type() == "MatMul";
  if (!matmul && node.op_type() != "GroupedMatMul") {
    return ctx.Invalid(absl::StrCat("unknown op '", ClientText(node.op_type()),
                                    "'; gemmserve serves MatMul and GroupedMatMul"));
  }
  if (node.output_size() != 1 || node.output(0).empty()) {
    return ctx.Invalid(absl::StrCat("node '", node_name, "' must have one output"));
  }
  if (absl::Status valid = ValidateTensorName(node.output(0)); !valid.ok()) {
    return ctx.Invalid(absl::StrCat("node output: ", valid.message()));
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
      return ctx.Invalid(absl::StrCat(node.op_type(), " input ", i, " ('", ClientText(name), "', ",
                                      role, ") must be an initializer: it is the resident weight"));
    }
    return ReadInitializer(*it->second, files, version, ctx);
  };
  auto sent = [&](int i, const char* role) -> absl::StatusOr<TensorSpec> {
    const std::string& name = node.input(i);
    auto it = graph_inputs.find(name);
    if (it == graph_inputs.end()) {
      return ctx.Invalid(absl::StrCat(node.op_type(), " input ", i, " ('", ClientText(name), "', ",
                                      role, ") must be a graph input: requests send it"));
    }
    return GraphInputSpec(*it->second, ctx);
  };
  auto wrap =
      [&](absl::StatusOr<std::unique_ptr<Model>> m) -> absl::StatusOr<std::unique_ptr<Model>> {
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
