#include "server/service/infer_codec.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/client_text.h"

namespace gemmserve {
namespace {


struct TypedField {
  ContentsKind kind;
  const void* data;
  int64_t count;
};

// The non-empty typed fields of `contents`.
std::vector<TypedField> NonEmptyTypedFields(const inference::InferTensorContents& c) {
  std::vector<TypedField> fields;
  auto add = [&](ContentsKind kind, const auto& repeated) {
    if (repeated.size() > 0) fields.push_back({kind, repeated.data(), repeated.size()});
  };
  add(ContentsKind::kBool, c.bool_contents());
  add(ContentsKind::kInt32, c.int_contents());
  add(ContentsKind::kInt64, c.int64_contents());
  add(ContentsKind::kUint32, c.uint_contents());
  add(ContentsKind::kUint64, c.uint64_contents());
  add(ContentsKind::kFp32, c.fp32_contents());
  add(ContentsKind::kFp64, c.fp64_contents());
  if (c.bytes_contents_size() > 0) {
    fields.push_back({ContentsKind::kBytes, nullptr, c.bytes_contents_size()});
  }
  return fields;
}

}  // namespace

absl::StatusOr<InferRequestView> DecodeInferRequest(const inference::ModelInferRequest& request) {
  InferRequestView view;
  view.model_name = request.model_name();
  view.model_version = request.model_version();
  view.id = request.id();
  const int raw_count = request.raw_input_contents_size();
  if (raw_count > 0 && raw_count != request.inputs_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request has ", request.inputs_size(), " inputs but ", raw_count,
        " raw_input_contents entries; they must pair one to one"));
  }
  view.inputs.reserve(request.inputs_size());
  for (int i = 0; i < request.inputs_size(); ++i) {
    const inference::ModelInferRequest::InferInputTensor& input = request.inputs(i);
    InputTensorView tensor;
    tensor.name = input.name();
    tensor.datatype = input.datatype();
    tensor.shape = absl::MakeConstSpan(input.shape().data(), input.shape_size());
    std::vector<TypedField> typed;
    if (input.has_contents()) typed = NonEmptyTypedFields(input.contents());
    if (raw_count > 0) {
      if (!typed.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", ClientText(input.name()), "' has ", ContentsKindName(typed[0].kind),
            " while the request uses raw_input_contents; send all inputs one way"));
      }
      const std::string& raw = request.raw_input_contents(i);
      tensor.contents = ContentsKind::kRaw;
      tensor.data = raw.data();
      tensor.count = static_cast<int64_t>(raw.size());
    } else if (typed.size() > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", ClientText(input.name()), "' sets both ", ContentsKindName(typed[0].kind), " and ",
          ContentsKindName(typed[1].kind), "; use the one field of its datatype"));
    } else if (typed.size() == 1) {
      tensor.contents = typed[0].kind;
      tensor.data = typed[0].data;
      tensor.count = typed[0].count;
    }
    view.inputs.push_back(tensor);
  }
  view.requested_outputs.reserve(request.outputs_size());
  for (const auto& output : request.outputs()) view.requested_outputs.push_back(output.name());
  return view;
}

void EncodeInferResponse(const InferResult& result, const std::string& id,
                         inference::ModelInferResponse* response) {
  response->set_model_name(result.model_name);
  response->set_model_version(result.model_version);
  response->set_id(id);
  for (const NamedTensor& output : result.outputs) {
    auto* tensor = response->add_outputs();
    tensor->set_name(output.name);
    tensor->set_datatype(std::string(DataTypeName(output.tensor.type())));
    for (int64_t d : output.tensor.shape()) tensor->add_shape(d);
    const auto bytes = output.tensor.bytes();
    response->add_raw_output_contents()->assign(reinterpret_cast<const char*>(bytes.data()),
                                                bytes.size());
  }
}

void EncodeModelMetadata(const ModelMetadata& metadata,
                         inference::ModelMetadataResponse* response) {
  response->set_name(metadata.name);
  for (const std::string& v : metadata.versions) response->add_versions(v);
  response->set_platform(metadata.platform);
  auto fill = [](const TensorSpec& spec, inference::ModelMetadataResponse::TensorMetadata* out) {
    out->set_name(spec.name);
    // The protocol has one datatype per tensor: report the default, the first
    // accepted type. The README lists every type each input accepts.
    out->set_datatype(std::string(DataTypeName(spec.datatypes.front())));
    for (int64_t d : spec.shape) out->add_shape(d);
  };
  for (const TensorSpec& spec : metadata.inputs) fill(spec, response->add_inputs());
  for (const TensorSpec& spec : metadata.outputs) fill(spec, response->add_outputs());
}

}  // namespace gemmserve
