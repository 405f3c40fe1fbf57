#include "server/http/infer_json.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/common/allocation.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"
#include "server/http/infer_json_parse.h"
#include "server/http/json_numbers.h"
#include "server/http/model_json.h"
#include "server/tensor/datatype.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

// The JSON header's bytes: all of the body, or Inference-Header-Content-Length's.
absl::StatusOr<size_t> HeaderSize(const std::string& body, std::optional<int64_t> header_length) {
  size_t json_size = body.size();
  if (header_length) {
    if (*header_length < 0 || static_cast<uint64_t>(*header_length) > body.size()) {
      return absl::InvalidArgumentError(absl::StrCat("Inference-Header-Content-Length ",
                                                     *header_length, " is not within the body of ",
                                                     body.size(), " bytes"));
    }
    json_size = static_cast<size_t>(*header_length);
  }
  if (json_size == 0) return absl::InvalidArgumentError("the request body is empty");
  return json_size;
}

// Outputs written as JSON numbers take up to 8 bytes of text per byte
// (BF16): the engine counts and caps the response at that size.
void CountOutputsAsText(const HttpInferRequest& request, InferRequestView& view) {
  bool as_text = request.outputs.empty() && !request.binary_data_output;
  for (const HttpRequestedOutput& o : request.outputs) {
    as_text = as_text || (!o.binary && !o.shm.given());
  }
  if (as_text) {
    view.output_element_bytes = &MaxDecimalTextBytes;
    view.output_form = " written as JSON numbers (binary_data_output sends raw bytes)";
  }
}

// The inputs' views: binary tensors laid out after the header in input
// order (and the body must end with the last), JSON data in its buffer,
// shared memory as a reference.
absl::Status ViewInputs(std::vector<InputState>& inputs, size_t json_size,
                        HttpInferRequest* request) {
  const std::string& body = request->body;
  InferRequestView& view = request->view;
  view.inputs.reserve(inputs.size());
  size_t offset = json_size;
  for (InputState& in : inputs) {
    InputTensorView t;
    request->strings.push_back(std::move(in.name));
    t.name = request->strings.back();
    request->strings.push_back(std::move(in.datatype));
    t.datatype = request->strings.back();
    request->shapes.push_back(std::move(in.shape));
    t.shape = request->shapes.back();
    if (in.shm.given()) {  // checked whole in FinishInput
      request->strings.push_back(std::move(*in.shm.region));
      t.shm =
          SharedMemoryRef{request->strings.back(), in.shm.offset.value_or(0), *in.shm.byte_size};
    } else if (in.binary_size) {
      const uint64_t size = static_cast<uint64_t>(*in.binary_size);
      if (size > body.size() - offset) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", ClientText(t.name), "': binary_data_size ", size,
                         " goes past the end of ", "the body (", body.size() - offset,
                         " bytes left after the JSON header and the inputs "
                         "before it)"));
      }
      t.contents = ContentsKind::kRaw;
      t.data = body.data() + offset;
      t.count = static_cast<int64_t>(size);
      offset += size;
    } else if (in.buffer != nullptr) {
      t.contents = ContentsKind::kRaw;
      t.data = in.buffer->data();
      t.count = static_cast<int64_t>(in.buffer->size());
      view.message_bytes += t.count;
    } else if (in.has_data) {
      // Data the engine will refuse (an unknown datatype, a bad shape): an
      // empty raw tensor, so that the engine's check names the real fault.
      t.contents = ContentsKind::kRaw;
      t.data = body.data();
      t.count = 0;
    }
    view.inputs.push_back(t);
  }
  if (offset != body.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the body has ", body.size() - offset,
                     " bytes after the JSON header and the binary tensors it declares"));
  }
  return absl::OkStatus();
}

// The requested outputs, those going to shared memory with their regions.
absl::Status ViewOutputs(HttpInferRequest* request) {
  InferRequestView& view = request->view;
  view.requested_outputs.reserve(request->outputs.size());
  for (HttpRequestedOutput& o : request->outputs) {
    view.requested_outputs.push_back(o.name);
    GEMMSERVE_ASSIGN_OR_RETURN(
        std::optional<SharedMemoryRef> ref,
        SharedMemoryOf(o.shm.parameters(),
                       absl::StrCat("requested output '", ClientText(o.name), "'")));
    if (!ref) continue;
    // A region takes the output's bytes: binary_data does not apply to it.
    o.binary = false;
    view.output_shm.push_back(OutputShmView{o.name, *ref});
  }
  return absl::OkStatus();
}

absl::Status DecodeOrThrow(absl::string_view model_name, absl::string_view model_version,
                           std::optional<int64_t> header_length, HttpInferRequest* request,
                           bool scan_numbers) {
  request->model_name.assign(model_name.data(), model_name.size());
  request->model_version.assign(model_version.data(), model_version.size());
  GEMMSERVE_ASSIGN_OR_RETURN(const size_t json_size, HeaderSize(request->body, header_length));
  const absl::string_view header(request->body.data(), json_size);
  std::vector<InputState> inputs;
  GEMMSERVE_RETURN_IF_ERROR(ParseInferHeader(header, request, &inputs, 1, scan_numbers));
  bool second_pass = false;
  for (const InputState& in : inputs) second_pass = second_pass || in.deferred;
  if (second_pass) {
    GEMMSERVE_RETURN_IF_ERROR(ParseInferHeader(header, request, &inputs, 2, scan_numbers));
  }
  InferRequestView& view = request->view;
  view.model_name = request->model_name;
  view.model_version = request->model_version;
  view.id = request->id;
  view.message_bytes = static_cast<int64_t>(request->body.size());
  view.may_run_inline = false;  // never compute on an HTTP I/O thread
  CountOutputsAsText(*request, view);
  GEMMSERVE_RETURN_IF_ERROR(ViewInputs(inputs, json_size, request));
  return ViewOutputs(request);
}

void AppendData(const Tensor& t, std::string* out) {
  const int64_t n = t.num_elements();
  out->push_back('[');
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) out->push_back(',');
    switch (t.type()) {
      case DataType::kFP32: AppendJsonNumber(t.data<float>()[i], out); break;
      case DataType::kFP64: AppendJsonNumber(t.data<double>()[i], out); break;
      case DataType::kBF16: AppendJsonNumber(BFloat16ToFloat(t.data<uint16_t>()[i]), out); break;
      case DataType::kFP16: AppendJsonNumber(HalfToFloat(t.data<uint16_t>()[i]), out); break;
      case DataType::kINT32: AppendInteger(t.data<int32_t>()[i], out); break;
      case DataType::kINT64: AppendInteger(t.data<int64_t>()[i], out); break;
      case DataType::kUINT32: AppendInteger(t.data<uint32_t>()[i], out); break;
      case DataType::kUINT64: AppendInteger(t.data<uint64_t>()[i], out); break;
    }
  }
  out->push_back(']');
}

bool BinaryOutput(const HttpInferRequest& request, absl::string_view name) {
  for (const HttpRequestedOutput& o : request.outputs) {
    if (o.name == name) return o.binary;
  }
  return request.binary_data_output;
}

absl::Status EncodeOrThrow(const InferResult& result, const HttpInferRequest& request,
                           HttpResponseBody* out) {
  std::string& body = out->body;
  body.clear();
  size_t estimate = 256 + request.id.size() + result.model_name.size();
  size_t binary_bytes = 0;
  for (const NamedTensor& o : result.outputs) {
    estimate += 128 + o.name.size();
    if (o.shm) {
      estimate += 128 + o.shm->region.size();
    } else if (BinaryOutput(request, o.name)) {
      binary_bytes += static_cast<size_t>(o.tensor.byte_size());
    } else {
      estimate +=
          static_cast<size_t>(o.tensor.num_elements() * MaxDecimalTextBytes(o.tensor.type()));
    }
  }
  body.reserve(estimate + binary_bytes);
  body.append("{\"model_name\":");
  AppendJsonString(result.model_name, &body);
  body.append(",\"model_version\":");
  AppendJsonString(result.model_version, &body);
  if (!request.id.empty()) {
    body.append(",\"id\":");
    AppendJsonString(request.id, &body);
  }
  body.append(",\"outputs\":[");
  bool any_binary = false;
  for (size_t i = 0; i < result.outputs.size(); ++i) {
    const NamedTensor& o = result.outputs[i];
    if (i > 0) body.push_back(',');
    body.append("{\"name\":");
    AppendJsonString(o.name, &body);
    body.append(",\"datatype\":");
    AppendJsonString(DataTypeName(o.tensor.type()), &body);
    body.append(",\"shape\":[");
    for (size_t d = 0; d < o.tensor.shape().size(); ++d) {
      if (d > 0) body.push_back(',');
      AppendInteger(o.tensor.shape()[d], &body);
    }
    body.push_back(']');
    if (o.shm) {  // the bytes are in the client's region
      body.append(",\"parameters\":{\"shared_memory_region\":");
      AppendJsonString(o.shm->region, &body);
      body.append(",\"shared_memory_byte_size\":");
      AppendInteger(o.shm->byte_size, &body);
      if (o.shm->offset != 0) {
        body.append(",\"shared_memory_offset\":");
        AppendInteger(o.shm->offset, &body);
      }
      body.push_back('}');
    } else if (BinaryOutput(request, o.name)) {
      any_binary = true;
      body.append(",\"parameters\":{\"binary_data_size\":");
      AppendInteger(o.tensor.byte_size(), &body);
      body.push_back('}');
    } else {
      body.append(",\"data\":");
      AppendData(o.tensor, &body);
    }
    body.push_back('}');
  }
  body.append("]}");
  out->header_length.reset();
  if (any_binary) {
    out->header_length = body.size();
    for (const NamedTensor& o : result.outputs) {
      if (o.shm || !BinaryOutput(request, o.name)) continue;
      const auto bytes = o.tensor.bytes();
      body.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DecodeInferRequestJson(absl::string_view model_name, absl::string_view model_version,
                                    std::optional<int64_t> header_length,
                                    HttpInferRequest* request) {
  return CatchAllocationFailure("the request", [&] {
    return DecodeOrThrow(model_name, model_version, header_length, request, true);
  });
}

absl::Status DecodeInferRequestJsonWithoutNumberScan(absl::string_view model_name,
                                                     absl::string_view model_version,
                                                     std::optional<int64_t> header_length,
                                                     HttpInferRequest* request) {
  return CatchAllocationFailure("the request", [&] {
    return DecodeOrThrow(model_name, model_version, header_length, request, false);
  });
}

absl::Status EncodeInferResponseJson(const InferResult& result, const HttpInferRequest& request,
                                     HttpResponseBody* out) {
  absl::Status s =
      CatchAllocationFailure("the response", [&] { return EncodeOrThrow(result, request, out); });
  if (!s.ok()) out->body = std::string();
  return s;
}

}  // namespace gemmserve
