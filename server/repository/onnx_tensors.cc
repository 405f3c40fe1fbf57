#include "server/repository/onnx_tensors.h"

#include <climits>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/numbers.h"
#include "server/common/client_text.h"
#include "server/common/model_name.h"
#include "server/common/status_macros.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"

namespace gemmserve {

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

namespace {

// An initializer's `bytes` bytes when they are stored as raw data or in an
// external file: their size is checked against what the file holds, then
// `allocate` gives where they go. False when the typed fields hold the
// values instead (nothing allocated).
template <typename SizeError, typename Allocate>
absl::StatusOr<bool> ReadStoredBytes(const onnx::TensorProto& proto, int64_t bytes,
                                     const ModelFiles& files, const std::string& version,
                                     const Context& ctx, SizeError size_error, Allocate allocate) {
  const std::string name = ClientText(proto.name());
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
      // offset + length may not fit in int64: the range is written as offset and length.
      return ctx.Invalid(absl::StrCat("initializer '", name, "': external data of ", length,
                                      " bytes at offset ", offset, " is beyond the end of '",
                                      ClientText(location), "' (", file_size, " bytes)"));
    }
    GEMMSERVE_ASSIGN_OR_RETURN(void* dst, allocate());
    absl::Status read = (*file)->Read(offset, bytes, dst);
    if (!read.ok()) return ctx.Invalid(absl::StrCat("initializer '", name, "': ", read.message()));
    return true;
  }
  if (proto.has_raw_data()) {
    if (static_cast<int64_t>(proto.raw_data().size()) != bytes) {
      return size_error(static_cast<int64_t>(proto.raw_data().size()), "bytes");
    }
    GEMMSERVE_ASSIGN_OR_RETURN(void* dst, allocate());
    if (bytes > 0) std::memcpy(dst, proto.raw_data().data(), static_cast<size_t>(bytes));
    return true;
  }
  return false;
}

}  // namespace

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
  Tensor out;
  auto allocate = [&]() -> absl::StatusOr<Tensor> {
    absl::StatusOr<Tensor> t = Tensor::Allocate(*type, shape);
    if (!t.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat("model '", ctx.model(), "': initializer '",
                                                       name, "': ", t.status().message()));
    }
    return t;
  };

  GEMMSERVE_ASSIGN_OR_RETURN(bool stored,
                             ReadStoredBytes(proto, bytes, files, version, ctx, size_error,
                                             [&]() -> absl::StatusOr<void*> {
                                               GEMMSERVE_ASSIGN_OR_RETURN(Tensor t, allocate());
                                               out = std::move(t);
                                               return out.raw_data();
                                             }));
  if (stored) return out;
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

namespace {

// ONNX TensorProto.DataType values of quantized weights (INT4 and UINT4 are
// 22 and 21 from ONNX 1.16, after Debian's 1.12 headers).
constexpr int32_t kOnnxUint4 = 21, kOnnxInt4 = 22;

std::optional<QuantizedType> QuantizedFromOnnx(int32_t t) {
  switch (t) {
    case onnx::TensorProto::INT8: return QuantizedType::kInt8;
    case onnx::TensorProto::UINT8: return QuantizedType::kUint8;
    case kOnnxInt4: return QuantizedType::kInt4;
    case kOnnxUint4: return QuantizedType::kUint4;
    default: return std::nullopt;
  }
}

struct QuantizedInitializer {
  QuantizedType type;
  Shape shape;
  int64_t elements = 0;
  AlignedBuffer data;  // QuantizedBytes(type, elements), 4-bit packed low nibble first
};

// Reads a DequantizeLinear input of 8- or 4-bit integers (`role`: "x" or
// "x_zero_point"). Raw or external data for every type; int32_data (one
// value per entry, range-checked) for the 8-bit ones. Sizes are checked
// against the file before anything is allocated.
absl::StatusOr<QuantizedInitializer> ReadQuantizedInitializer(const onnx::TensorProto& proto,
                                                              const char* role,
                                                              const ModelFiles& files,
                                                              const std::string& version,
                                                              const Context& ctx) {
  const std::string name = ClientText(proto.name());
  const std::optional<QuantizedType> type = QuantizedFromOnnx(proto.data_type());
  if (!type) {
    return ctx.Invalid(absl::StrCat("DequantizeLinear ", role, " '", name, "': ONNX element type ",
                                    proto.data_type(),
                                    " is not served; quantized weights are INT8, UINT8, INT4 or "
                                    "UINT4"));
  }
  QuantizedInitializer q;
  q.type = *type;
  q.shape.assign(proto.dims().begin(), proto.dims().end());
  absl::StatusOr<int64_t> elements = ElementCount(q.shape);
  if (!elements.ok()) {
    return ctx.Invalid(absl::StrCat("initializer '", name, "': ", elements.status().message()));
  }
  q.elements = *elements;
  const int64_t bytes = QuantizedBytes(q.type, q.elements);
  auto size_error = [&](int64_t got, const char* unit) {
    return ctx.Invalid(absl::StrCat("initializer '", name, "': shape ", ShapeToString(q.shape),
                                    " of ", QuantizedTypeName(q.type), " needs ",
                                    std::strcmp(unit, "bytes") == 0 ? bytes : q.elements, " ", unit,
                                    ", the file holds ", got));
  };
  auto allocate = [&]() -> absl::StatusOr<void*> {
    absl::StatusOr<AlignedBuffer> b = AlignedBuffer::Allocate(bytes);
    if (!b.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat("model '", ctx.model(), "': initializer '",
                                                       name, "': ", b.status().message()));
    }
    q.data = std::move(*b);
    return q.data.data();
  };
  GEMMSERVE_ASSIGN_OR_RETURN(
      bool stored, ReadStoredBytes(proto, bytes, files, version, ctx, size_error, allocate));
  if (stored) return q;
  if (QuantizedBits(q.type) == 4) {
    return ctx.Invalid(absl::StrCat("initializer '", name,
                                    "': 4-bit values must be stored as "
                                    "raw_data or external data (two per byte, low nibble first)"));
  }
  if (static_cast<int64_t>(proto.int32_data_size()) != q.elements) {
    return size_error(proto.int32_data_size(), "elements");
  }
  GEMMSERVE_ASSIGN_OR_RETURN(void* dst, allocate());
  auto* out = static_cast<uint8_t*>(dst);
  const int32_t lo = q.type == QuantizedType::kInt8 ? -128 : 0;
  const int32_t hi = q.type == QuantizedType::kInt8 ? 127 : 255;
  for (int64_t i = 0; i < q.elements; ++i) {
    const int32_t v = proto.int32_data(static_cast<int>(i));
    if (v < lo || v > hi) {
      return ctx.Invalid(absl::StrCat("initializer '", name, "': int32_data value ", v, " at ", i,
                                      " is outside ", QuantizedTypeName(q.type), " [", lo, ", ", hi,
                                      "]"));
    }
    out[i] = static_cast<uint8_t>(v);
  }
  return q;
}

// DequantizeLinear's attributes, each an INT: axis and block_size into
// `layout`, output_dtype (0 when absent).
absl::Status ReadDequantizeAttributes(const onnx::NodeProto& node, const Context& ctx,
                                      QuantizedWeights::Layout* layout, int64_t* output_dtype) {
  *output_dtype = 0;
  for (const auto& attr : node.attribute()) {
    const bool known =
        attr.name() == "axis" || attr.name() == "block_size" || attr.name() == "output_dtype";
    if (known && attr.type() != onnx::AttributeProto::INT) {
      // A FLOAT or STRING attribute's i() is 0: read as such it would be a guess.
      return ctx.Invalid(
          absl::StrCat("DequantizeLinear attribute '", attr.name(), "' must be an INT attribute"));
    }
    if (attr.name() == "axis") {
      layout->axis = attr.i();
    } else if (attr.name() == "block_size") {
      layout->block_size = attr.i();
    } else if (attr.name() == "output_dtype") {
      *output_dtype = attr.i();
    } else {
      return ctx.Invalid(absl::StrCat("DequantizeLinear attribute '", ClientText(attr.name()),
                                      "' is not known (axis, block_size, output_dtype)"));
    }
  }
  return absl::OkStatus();
}

// Names the node in an error of its own (Fail), as the model's context does
// for the errors of the files it reads.
using NodeError = absl::FunctionRef<absl::Status(const absl::Status&)>;

// The scales as floats; their type (FP32, FP16 or BF16) is the value type.
absl::StatusOr<std::vector<float>> ReadScales(const onnx::TensorProto& proto, int64_t output_dtype,
                                              const ModelFiles& files, const std::string& version,
                                              const Context& ctx, NodeError fail,
                                              QuantizedWeights::Layout* layout) {
  GEMMSERVE_ASSIGN_OR_RETURN(Tensor scale, ReadInitializer(proto, files, version, ctx));
  if (scale.type() != DataType::kFP32 && scale.type() != DataType::kFP16 &&
      scale.type() != DataType::kBF16) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("x_scale '", ClientText(proto.name()), "' is ", DataTypeName(scale.type()),
                     "; gemmserve serves FP32, FP16 or BF16 scales (the dequantized value type)")));
  }
  if (output_dtype != 0 &&
      FromOnnxType(static_cast<int32_t>(output_dtype)).value_or(DataType::kINT32) != scale.type()) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "output_dtype ", output_dtype, " differs from the scale's type ",
        DataTypeName(scale.type()), "; gemmserve serves the value type of the scale")));
  }
  layout->value_type = scale.type();
  layout->scale_shape = scale.shape();
  std::vector<float> scales(static_cast<size_t>(scale.num_elements()));
  for (int64_t i = 0; i < scale.num_elements(); ++i) {
    switch (scale.type()) {
      case DataType::kFP32: scales[i] = scale.data<float>()[i]; break;
      case DataType::kFP16: scales[i] = HalfToFloat(scale.data<uint16_t>()[i]); break;
      default: scales[i] = BFloat16ToFloat(scale.data<uint16_t>()[i]); break;
    }
  }
  return scales;
}

// The zero points as floats: of x's element type and the scales' shape.
absl::StatusOr<std::vector<float>> ReadZeroPoints(const onnx::TensorProto& zp_proto,
                                                  const onnx::TensorProto& x,
                                                  const Shape& scale_shape, const ModelFiles& files,
                                                  const std::string& version, const Context& ctx,
                                                  NodeError fail) {
  if (zp_proto.data_type() != x.data_type()) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("x_zero_point '", ClientText(zp_proto.name()), "' has ONNX element type ",
                     zp_proto.data_type(), ", the weights' x has ", x.data_type(),
                     "; ONNX requires the same type")));
  }
  const Shape zp_dims(zp_proto.dims().begin(), zp_proto.dims().end());
  if (zp_dims != scale_shape) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "x_zero_point '", ClientText(zp_proto.name()), "' has shape ", ShapeToString(zp_dims),
        ", x_scale has ", ShapeToString(scale_shape), "; ONNX requires the same shape")));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(
      QuantizedInitializer zp,
      ReadQuantizedInitializer(zp_proto, "x_zero_point", files, version, ctx));
  std::vector<float> zero_points(static_cast<size_t>(zp.elements));
  const auto* d = static_cast<const uint8_t*>(zp.data.data());
  for (int64_t i = 0; i < zp.elements; ++i) {
    zero_points[i] = static_cast<float>(QuantizedElement(zp.type, d, i));
  }
  return zero_points;
}

}  // namespace

int64_t DefaultOpset(const onnx::ModelProto& model) {
  for (const auto& op : model.opset_import()) {
    if (op.domain().empty() || op.domain() == "ai.onnx") return op.version();
  }
  return 0;
}

absl::StatusOr<QuantizedWeights> ReadDequantizeLinear(
    const onnx::NodeProto& node, int64_t opset,
    const std::map<std::string, const onnx::TensorProto*>& initializers, const ModelFiles& files,
    const std::string& version, const Context& ctx) {
  const std::string node_name = ClientText(node.name());
  if (!node.domain().empty() && node.domain() != "ai.onnx") {
    return ctx.Invalid(absl::StrCat("node '", node_name, "' is in domain '",
                                    ClientText(node.domain()),
                                    "'; only the default ONNX domain is served"));
  }
  if (node.input_size() < 2 || node.input_size() > 3 || node.output_size() != 1) {
    return ctx.Invalid("DequantizeLinear needs inputs x, x_scale, [x_zero_point] and one output");
  }
  auto init = [&](int i, const char* role) -> absl::StatusOr<const onnx::TensorProto*> {
    auto it = initializers.find(node.input(i));
    if (it == initializers.end()) {
      return ctx.Invalid(absl::StrCat("DequantizeLinear input ", i, " ('",
                                      ClientText(node.input(i)), "', ", role,
                                      ") must be an initializer: the quantized weights are "
                                      "resident"));
    }
    return it->second;
  };
  auto fail = [&](const absl::Status& s) {
    return ctx.Invalid(absl::StrCat("DequantizeLinear '", node_name, "': ", s.message()));
  };
  QuantizedWeights::Layout layout;
  int64_t output_dtype = 0;
  GEMMSERVE_RETURN_IF_ERROR(ReadDequantizeAttributes(node, ctx, &layout, &output_dtype));
  if (layout.block_size != 0 && opset != 0 && opset < 21) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("block_size needs opset 21 or later; the model imports opset ", opset)));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(const onnx::TensorProto* x, init(0, "x"));
  GEMMSERVE_ASSIGN_OR_RETURN(const onnx::TensorProto* scale_proto, init(1, "x_scale"));
  // The scale first: small, and its type is the value type the weights are for.
  GEMMSERVE_ASSIGN_OR_RETURN(
      std::vector<float> scales,
      ReadScales(*scale_proto, output_dtype, files, version, ctx, fail, &layout));
  const Shape x_dims(x->dims().begin(), x->dims().end());
  if (x_dims.size() != 2 && x_dims.size() != 3) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("x '", ClientText(x->name()), "': expected rank 2 [K, N] or 3 [G, K, N], got ",
                     ShapeToString(x_dims))));
  }
  std::vector<float> zero_points;
  if (node.input_size() == 3 && !node.input(2).empty()) {
    GEMMSERVE_ASSIGN_OR_RETURN(const onnx::TensorProto* zp_proto, init(2, "x_zero_point"));
    GEMMSERVE_ASSIGN_OR_RETURN(
        zero_points, ReadZeroPoints(*zp_proto, *x, layout.scale_shape, files, version, ctx, fail));
  }
  if (QuantizedFromOnnx(x->data_type()).has_value() &&
      QuantizedBits(*QuantizedFromOnnx(x->data_type())) == 4 && opset != 0 && opset < 21) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("4-bit weights need opset 21 or later; the model imports opset ", opset)));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(QuantizedInitializer w,
                             ReadQuantizedInitializer(*x, "x", files, version, ctx));
  layout.type = w.type;
  layout.shape = w.shape;
  absl::StatusOr<QuantizedWeights> q =
      QuantizedWeights::Make(layout, std::move(w.data), std::move(scales), std::move(zero_points));
  if (!q.ok()) return fail(q.status());
  return q;
}

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

}  // namespace gemmserve
