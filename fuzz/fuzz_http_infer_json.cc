// Fuzzes the HTTP front end's request decoder with any body a client could
// POST to /v2/models/{m}/infer: the first byte picks whether an
// Inference-Header-Content-Length comes with it (and the next two its
// value), the rest is the body. Nothing may crash or trip a sanitizer, and a
// request that decodes must hold up: every input's bytes lie inside the body
// or inside a buffer the request owns, a JSON-converted input holds exactly
// its shape's elements of its datatype, and encoding those elements as a
// JSON response and decoding that text again gives the same bytes. The fast
// path for data arrays is checked against RapidJSON's own number scanner on
// every input (same status and message, same bytes). An input or output in
// shared memory carries a whole reference (region and byte size) and no
// bytes of the body. The same bytes also go to the parser of a system shared
// memory registration body (POST /v2/systemsharedmemory/region/{r}/register),
// which must answer OK or INVALID_ARGUMENT.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_support.h"
#include "server/http/infer_json.h"
#include "server/http/model_json.h"
#include "server/tensor/datatype.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"
#include "server/tensor/tensor.h"

namespace gemmserve {
namespace fuzz {
namespace {

bool Inside(const void* p, int64_t n, const std::string& s) {
  const char* c = static_cast<const char*>(p);
  return c >= s.data() && n >= 0 && c + n <= s.data() + s.size();
}

void RoundTrip(const InputTensorView& in, DataType type) {
  absl::StatusOr<Tensor> t = Tensor::Zeros(type, Shape(in.shape.begin(), in.shape.end()));
  if (!t.ok()) return;
  FUZZ_CHECK(t->byte_size() == in.count, "a converted input's size is not its shape's");
  std::memcpy(t->raw_data(), in.data, static_cast<size_t>(in.count));
  InferResult result;
  result.outputs.push_back({"Y", *std::move(t)});
  HttpInferRequest none;
  HttpResponseBody out;
  if (!EncodeInferResponseJson(result, none, &out).ok()) return;
  const size_t at = out.body.find("\"data\":");
  FUZZ_CHECK(at != std::string::npos, "no data in the response");
  const std::string data = out.body.substr(at + 7, out.body.rfind("}]}") - at - 7);
  std::string shape;
  for (size_t i = 0; i < in.shape.size(); ++i) absl::StrAppend(&shape, i ? "," : "", in.shape[i]);
  HttpInferRequest back;
  back.body = absl::StrCat(R"({"inputs":[{"name":"A","shape":[)", shape, R"(],"datatype":")",
                           DataTypeName(type), R"(","data":)", data, "}]}");
  const absl::Status s = DecodeInferRequestJson("m", "", std::nullopt, &back);
  FUZZ_CHECK(s.ok(), "the encoder's own text does not decode: %s", s.ToString().c_str());
  const InputTensorView& again = back.view.inputs[0];
  FUZZ_CHECK(again.count == in.count, "round trip changed the size");
  // NaN payloads are not kept by text; everything else must come back bit for bit.
  for (int64_t i = 0, size = DataTypeSize(type); i < in.count; i += size) {
    const uint8_t* a = static_cast<const uint8_t*>(in.data) + i;
    const uint8_t* b = static_cast<const uint8_t*>(again.data) + i;
    bool nan = false;
    if (type == DataType::kFP32) {
      float f;
      std::memcpy(&f, a, 4);
      nan = f != f;
    } else if (type == DataType::kFP64) {
      double d;
      std::memcpy(&d, a, 8);
      nan = d != d;
    } else if (type == DataType::kFP16 || type == DataType::kBF16) {
      uint16_t h;
      std::memcpy(&h, a, 2);
      const float f = type == DataType::kFP16 ? HalfToFloat(h) : BFloat16ToFloat(h);
      nan = f != f;
    }
    FUZZ_CHECK(nan || std::memcmp(a, b, static_cast<size_t>(size)) == 0,
               "element %lld changed in a JSON round trip", static_cast<long long>(i / size));
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace gemmserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gemmserve;
  if (size < 3) return 0;
  {
    const absl::StatusOr<inference::SystemSharedMemoryRegisterRequest> registered =
        ParseShmRegisterRequest(absl::string_view(reinterpret_cast<const char*>(data), size));
    FUZZ_CHECK(registered.ok() || absl::IsInvalidArgument(registered.status()),
               "a register body got %s", registered.status().ToString().c_str());
  }
  std::optional<int64_t> header_length;
  if (data[0] & 1) header_length = static_cast<int64_t>(data[1] | (data[2] << 8)) - 16;
  HttpInferRequest request;
  request.body.assign(reinterpret_cast<const char*>(data + 3), size - 3);
  const absl::Status status = DecodeInferRequestJson("matmul", "", header_length, &request);
  // The fast path for data arrays must agree with RapidJSON's own scanner on
  // everything: the status, its message, and every decoded byte.
  HttpInferRequest reference;
  reference.body = request.body;
  const absl::Status expected =
      DecodeInferRequestJsonWithoutNumberScan("matmul", "", header_length, &reference);
  FUZZ_CHECK(status.code() == expected.code() && status.message() == expected.message(),
             "the number scan says '%s', RapidJSON '%s'", status.ToString().c_str(),
             expected.ToString().c_str());
  FUZZ_CHECK(request.json_data.size() == reference.json_data.size(),
             "the number scan converted other inputs");
  for (size_t i = 0; i < request.json_data.size(); ++i) {
    FUZZ_CHECK(request.json_data[i] == reference.json_data[i],
               "the number scan converted input %zu differently", i);
  }
  if (!status.ok()) return 0;
  for (const OutputShmView& o : request.view.output_shm) {
    bool requested = false;
    for (absl::string_view name : request.view.requested_outputs) requested |= name == o.name;
    FUZZ_CHECK(requested, "an output in shared memory that was not requested");
  }
  for (const InputTensorView& in : request.view.inputs) {
    if (in.shm) {
      FUZZ_CHECK(in.contents == ContentsKind::kNone && in.data == nullptr,
                 "an input in shared memory has bytes of the body too");
      continue;
    }
    if (in.contents == ContentsKind::kNone) continue;
    FUZZ_CHECK(in.contents == ContentsKind::kRaw, "decoded inputs are raw");
    bool owned = false;
    for (const auto& buffer : request.json_data) {
      owned = owned || (in.data == buffer.data() && static_cast<size_t>(in.count) == buffer.size());
    }
    FUZZ_CHECK(owned || fuzz::Inside(in.data, in.count, request.body),
               "an input's bytes lie outside the body and the request's buffers");
    absl::StatusOr<DataType> type = ParseDataType(in.datatype);
    if (owned && type.ok() && in.count < (1 << 16)) fuzz::RoundTrip(in, *type);
  }
  return 0;
}
