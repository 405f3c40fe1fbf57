#include "server/service/infer_codec.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/allocation.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"

namespace gemmserve {
namespace {

// The KServe message's field for each kind of contents.
absl::string_view ContentsField(ContentsKind kind) {
  switch (kind) {
    case ContentsKind::kNone: return "no contents";
    case ContentsKind::kRaw: return "raw_input_contents";
    case ContentsKind::kBool: return "bool_contents";
    case ContentsKind::kInt32: return "int_contents";
    case ContentsKind::kInt64: return "int64_contents";
    case ContentsKind::kUint32: return "uint_contents";
    case ContentsKind::kUint64: return "uint64_contents";
    case ContentsKind::kFp32: return "fp32_contents";
    case ContentsKind::kFp64: return "fp64_contents";
    case ContentsKind::kBytes: return "bytes_contents";
  }
  return "?";
}

void EncodeInto(const InferResult& result, const std::string& id,
                inference::ModelInferResponse* response);

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

// A non-negative integer parameter, sent as int64 or uint64 (clients differ).
bool NonNegativeInteger(const inference::InferParameter& p, uint64_t* out) {
  if (p.parameter_choice_case() == inference::InferParameter::kUint64Param) {
    *out = p.uint64_param();
    return true;
  }
  if (p.parameter_choice_case() == inference::InferParameter::kInt64Param && p.int64_param() >= 0) {
    *out = static_cast<uint64_t>(p.int64_param());
    return true;
  }
  return false;
}

// Triton's scheduling parameters of the request.
absl::Status UnsignedParameter(const inference::ModelInferRequest& request, const char* name,
                               uint64_t* out) {
  auto it = request.parameters().find(name);
  if (it == request.parameters().end() || NonNegativeInteger(it->second, out)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("parameter '", name, "': expected a non-negative integer (int64 or uint64)"));
}

using Parameters = google::protobuf::Map<std::string, inference::InferParameter>;

// A tensor's non-negative integer parameter (`what` names the tensor).
absl::Status UnsignedOf(const inference::InferParameter& p, absl::string_view what,
                        absl::string_view name, uint64_t* out) {
  if (NonNegativeInteger(p, out)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": parameter '", name, "' must be a non-negative integer (int64 or uint64)"));
}

// Triton's shared-memory parameters of a tensor (`what` names it in
// messages), each of its type, then held to SharedMemoryOf's rule.
absl::StatusOr<std::optional<SharedMemoryRef>> SharedMemoryParametersOf(const Parameters& params,
                                                                        absl::string_view what) {
  SharedMemoryParameters p;
  if (auto region = params.find("shared_memory_region"); region != params.end()) {
    if (region->second.parameter_choice_case() != inference::InferParameter::kStringParam) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": parameter 'shared_memory_region' must be a string"));
    }
    p.region = region->second.string_param();
  }
  for (auto [name, field] : {std::pair("shared_memory_byte_size", &p.byte_size),
                             std::pair("shared_memory_offset", &p.offset)}) {
    auto it = params.find(name);
    if (it == params.end()) continue;
    uint64_t value = 0;
    GEMMSERVE_RETURN_IF_ERROR(UnsignedOf(it->second, what, name, &value));
    *field = value;
  }
  return SharedMemoryOf(p, what);
}

// Where one input's bytes are: shared memory, its raw_input_contents entry
// (`raw`, or nullptr when the request has none), or one typed field.
absl::Status ViewInput(const inference::ModelInferRequest::InferInputTensor& input,
                       const std::optional<SharedMemoryRef>& shm, const std::string* raw,
                       InputTensorView* tensor, int64_t* message_bytes) {
  tensor->name = input.name();
  tensor->datatype = input.datatype();
  tensor->shape = absl::MakeConstSpan(input.shape().data(), input.shape_size());
  std::vector<TypedField> typed;
  if (input.has_contents()) typed = NonEmptyTypedFields(input.contents());
  if (shm) {
    if (!typed.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", ClientText(input.name()), "' has ", ContentsField(typed[0].kind),
          " and shared memory parameters; send its bytes one way"));
    }
    tensor->shm = shm;
  } else if (raw != nullptr) {
    if (!typed.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", ClientText(input.name()), "' has ", ContentsField(typed[0].kind),
          " while the request uses raw_input_contents; send all inputs one way"));
    }
    tensor->contents = ContentsKind::kRaw;
    tensor->data = raw->data();
    tensor->count = static_cast<int64_t>(raw->size());
    *message_bytes += tensor->count;
  } else if (typed.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", ClientText(input.name()), "' sets both ", ContentsField(typed[0].kind), " and ",
        ContentsField(typed[1].kind), "; use the one field of its datatype"));
  } else if (typed.size() == 1) {
    tensor->contents = typed[0].kind;
    tensor->data = typed[0].data;
    tensor->count = typed[0].count;
    *message_bytes += tensor->count * 8;  // at most 8 bytes an element in memory
  }
  return absl::OkStatus();
}

// The inputs: as Triton's, raw_input_contents pair one to one with the
// inputs not in shared memory.
absl::Status ViewInputs(const inference::ModelInferRequest& request, InferRequestView& view) {
  std::vector<std::optional<SharedMemoryRef>> shm(request.inputs_size());
  int in_memory = 0;
  for (int i = 0; i < request.inputs_size(); ++i) {
    GEMMSERVE_ASSIGN_OR_RETURN(
        shm[i], SharedMemoryParametersOf(
                    request.inputs(i).parameters(),
                    absl::StrCat("input '", ClientText(request.inputs(i).name()), "'")));
    if (!shm[i]) ++in_memory;
  }
  const int raw_count = request.raw_input_contents_size();
  if (raw_count > 0 && raw_count != in_memory) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request has ", in_memory, " inputs outside shared memory but ", raw_count,
                     " raw_input_contents entries; they must pair one to one"));
  }
  view.inputs.reserve(request.inputs_size());
  int raw_index = 0;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const std::string* raw = nullptr;
    if (!shm[i] && raw_count > 0) raw = &request.raw_input_contents(raw_index++);
    InputTensorView tensor;
    GEMMSERVE_RETURN_IF_ERROR(
        ViewInput(request.inputs(i), shm[i], raw, &tensor, &view.message_bytes));
    view.inputs.push_back(tensor);
  }
  return absl::OkStatus();
}

// The requested outputs, those to shared memory with their windows.
absl::Status ViewOutputs(const inference::ModelInferRequest& request, InferRequestView& view) {
  view.requested_outputs.reserve(request.outputs_size());
  for (const auto& output : request.outputs()) {
    const std::string what = absl::StrCat("output '", ClientText(output.name()), "'");
    for (const auto& parameter : output.parameters()) {
      if (absl::Status s = CheckOutputParameter(parameter.first); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
      }
    }
    view.requested_outputs.push_back(output.name());
    GEMMSERVE_ASSIGN_OR_RETURN(std::optional<SharedMemoryRef> ref,
                               SharedMemoryParametersOf(output.parameters(), what));
    if (ref) view.output_shm.push_back({output.name(), *ref});
  }
  return absl::OkStatus();
}

absl::StatusOr<InferRequestView> DecodeOrThrow(const inference::ModelInferRequest& request) {
  InferRequestView view;
  view.contents_name = &ContentsField;
  view.model_name = request.model_name();
  view.model_version = request.model_version();
  view.id = request.id();
  if (absl::Status s = UnsignedParameter(request, "priority", &view.priority); !s.ok()) return s;
  if (absl::Status s = UnsignedParameter(request, "timeout", &view.timeout_us); !s.ok()) return s;
  GEMMSERVE_RETURN_IF_ERROR(ViewInputs(request, view));
  GEMMSERVE_RETURN_IF_ERROR(ViewOutputs(request, view));
  return view;
}

}  // namespace

absl::StatusOr<InferRequestView> DecodeInferRequest(const inference::ModelInferRequest& request) {
  return CatchAllocationFailure("the request's view", [&] { return DecodeOrThrow(request); });
}

absl::Status EncodeInferResponse(const InferResult& result, const std::string& id,
                                 inference::ModelInferResponse* response) {
  absl::Status status = CatchAllocationFailure("the response", [&] {
    EncodeInto(result, id, response);
    return absl::OkStatus();
  });
  if (!status.ok()) response->Clear();
  return status;
}

namespace {

void EncodeInto(const InferResult& result, const std::string& id,
                inference::ModelInferResponse* response) {
  response->set_model_name(result.model_name);
  response->set_model_version(result.model_version);
  response->set_id(id);
  for (const NamedTensor& output : result.outputs) {
    auto* tensor = response->add_outputs();
    tensor->set_name(output.name);
    tensor->set_datatype(std::string(DataTypeName(output.tensor.type())));
    for (int64_t d : output.tensor.shape()) tensor->add_shape(d);
    if (output.shm) {
      // Written to the client's region: an empty entry keeps raw contents
      // paired with the outputs, and the parameters say where the bytes are.
      response->add_raw_output_contents();
      auto& params = *tensor->mutable_parameters();
      params["shared_memory_region"].set_string_param(output.shm->region);
      params["shared_memory_byte_size"].set_int64_param(
          static_cast<int64_t>(output.shm->byte_size));
      params["shared_memory_offset"].set_int64_param(static_cast<int64_t>(output.shm->offset));
      continue;
    }
    const auto bytes = output.tensor.bytes();
    response->add_raw_output_contents()->assign(reinterpret_cast<const char*>(bytes.data()),
                                                bytes.size());
  }
}

}  // namespace

}  // namespace gemmserve
