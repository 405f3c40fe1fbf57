// The KServe v2 REST binding of an inference call: the JSON request (with
// Triton's binary tensor extension) decoded into the core's InferRequestView,
// and the result encoded back as JSON, binary or both.
//
// Decoding is one SAX pass of RapidJSON over the JSON header. Tensor data in
// JSON is converted straight into a buffer of the input's datatype, sized
// from its shape and allocated only once the shape is known to fit in the
// text (a number takes at least two characters, so no JSON header can ask
// for more than about four times its own size). An input whose `data` comes
// before its `datatype` or `shape` is filled by a second pass. Binary tensors
// are views into the body, which the request owns.
//
//   HttpInferRequest request;
//   request.body = std::move(body);
//   absl::Status s = DecodeInferRequestJson(model, version, header_length, &request);
//   ... Serving::Infer with request.view ...
//   HttpResponseBody out;
//   s = EncodeInferResponseJson(result, request, &out);
#ifndef GEMMSERVE_SERVER_HTTP_INFER_JSON_H_
#define GEMMSERVE_SERVER_HTTP_INFER_JSON_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/core/inference_request.h"

namespace gemmserve {

// Caps of the decoder, beyond which a request is refused before more is read.
inline constexpr int64_t kMaxHttpInputs = 1024;
inline constexpr int64_t kMaxHttpOutputs = 1024;

// Triton's shared-memory parameters of an input or requested output, as
// sent (checked once the tensor's object ends).
struct HttpSharedMemory {
  std::optional<std::string> region;
  std::optional<uint64_t> byte_size, offset;
  bool given() const { return region || byte_size || offset; }
  // As the rule takes them (SharedMemoryOf); views of `region`.
  SharedMemoryParameters parameters() const {
    return {region ? std::optional<absl::string_view>(*region) : std::nullopt, byte_size, offset};
  }
};

struct HttpRequestedOutput {
  std::string name;
  bool binary = false;
  HttpSharedMemory shm{};  // written to a region instead of the response
};

// A decoded request and everything its view points to.
struct HttpInferRequest {
  std::string body;  // the (decompressed) body: JSON header, then binary tensors
  std::string model_name, model_version;
  std::string id;
  std::deque<std::string> strings;             // input names and datatypes
  std::deque<std::vector<int64_t>> shapes;     // the inputs' shapes
  std::deque<std::vector<uint8_t>> json_data;  // inputs sent as JSON numbers, converted
  std::vector<HttpRequestedOutput> outputs;
  bool binary_data_output = false;  // request parameter: every output binary
  InferRequestView view;
};

// Decodes request->body. `header_length`: the Inference-Header-Content-Length
// header (nullopt: the whole body is JSON). INVALID_ARGUMENT for anything
// wrong with the JSON or the binary layout (the message says what and
// where), RESOURCE_EXHAUSTED if a buffer cannot be allocated.
absl::Status DecodeInferRequestJson(absl::string_view model_name, absl::string_view model_version,
                                    std::optional<int64_t> header_length,
                                    HttpInferRequest* request);

// The same without the fast path for data arrays (ScanDataNumbers): every
// number goes through RapidJSON's own scanner. For the differential tests
// and the fuzz target, which require both to agree on every input.
absl::Status DecodeInferRequestJsonWithoutNumberScan(absl::string_view model_name,
                                                     absl::string_view model_version,
                                                     std::optional<int64_t> header_length,
                                                     HttpInferRequest* request);

struct HttpResponseBody {
  std::string body;
  // Set when some output is binary: the JSON header's length, for the
  // Inference-Header-Content-Length response header.
  std::optional<size_t> header_length;
};

// Outputs are JSON numbers unless the request asked for them binary (an
// output's `binary_data` parameter, or `binary_data_output`).
// RESOURCE_EXHAUSTED if the body cannot be allocated.
absl::Status EncodeInferResponseJson(const InferResult& result, const HttpInferRequest& request,
                                     HttpResponseBody* out);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_HTTP_INFER_JSON_H_
