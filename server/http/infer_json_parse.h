// The first step of decoding an inference request over HTTP: one SAX pass
// of RapidJSON over the JSON header (InferHandler), which fills the request's
// id, parameters and requested outputs and learns each input (name,
// datatype, shape, binary size or shared memory) into an InputState,
// converting JSON data straight into a buffer of the input's datatype. An
// input whose data comes before its datatype or shape is `deferred` to a
// second pass. infer_json.cc then lays out the binary tensors and builds the
// view.
#ifndef GEMMSERVE_SERVER_HTTP_INFER_JSON_PARSE_H_
#define GEMMSERVE_SERVER_HTTP_INFER_JSON_PARSE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/http/infer_json.h"

namespace gemmserve {

// What the parse learned about one input.
struct InputState {
  bool has_name = false, has_datatype = false, has_shape = false, has_data = false,
       has_parameters = false;
  std::string name, datatype;
  std::vector<int64_t> shape;
  std::optional<int64_t> binary_size;
  HttpSharedMemory shm;
  // JSON data: its nesting (the length of the arrays at each depth) and the
  // numbers counted; `buffer` once it is converted.
  std::vector<int64_t> dims;
  int64_t numbers = 0;
  std::vector<uint8_t>* buffer = nullptr;
  bool deferred = false;  // data came before the datatype or shape: second pass
};

// Parses `header` (pass 1, or 2 for the deferred inputs) into `request` and
// `inputs`. `scan_numbers`: the fast path for data arrays (ScanDataNumbers),
// which must agree with RapidJSON's own scanner on every input.
// INVALID_ARGUMENT naming what is wrong and where.
absl::Status ParseInferHeader(absl::string_view header, HttpInferRequest* request,
                              std::vector<InputState>* inputs, int pass, bool scan_numbers);

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_HTTP_INFER_JSON_PARSE_H_
