// A decoded inference request as the core sees it: names, datatypes, shapes and
// views of the tensor bytes, with no gRPC or protobuf type in sight. A front
// end builds one from its wire format without copying tensor data (the gRPC
// one from a KServe ModelInferRequest); the views must stay valid until the
// request's completion callback has run.
#ifndef GEMMSERVE_SERVER_CORE_INFERENCE_REQUEST_H_
#define GEMMSERVE_SERVER_CORE_INFERENCE_REQUEST_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/tensor/tensor.h"

namespace gemmserve {

// Where an input's elements came from on the wire. kRaw is little-endian,
// row-major bytes at any alignment; the typed kinds are the protocol's
// repeated fields (int_contents, fp32_contents, ...), already contiguous
// arrays of their element type.
enum class ContentsKind {
  kNone,
  kRaw,
  kBool,
  kInt32,
  kInt64,
  kUint32,
  kUint64,
  kFp32,
  kFp64,
  kBytes,
};

// The protocol's name for a contents kind: "raw_input_contents", "fp32_contents", ...
absl::string_view ContentsKindName(ContentsKind kind);

struct InputTensorView {
  absl::string_view name;
  absl::string_view datatype;  // as sent, e.g. "FP32"
  absl::Span<const int64_t> shape;
  ContentsKind contents = ContentsKind::kNone;
  const void* data = nullptr;  // first byte (raw) or first element (typed)
  int64_t count = 0;           // bytes for kRaw, elements otherwise
};

struct InferRequestView {
  absl::string_view model_name;
  absl::string_view model_version;  // empty: the model's only version
  absl::string_view id;             // echoed in the response
  std::vector<InputTensorView> inputs;
  std::vector<absl::string_view> requested_outputs;  // empty: all outputs
  // Triton's request parameters: `priority` (0: the model's default level)
  // and `timeout` in microseconds (0: the model's default), both for models
  // with dynamic batching.
  uint64_t priority = 0;
  uint64_t timeout_us = 0;
  // The client's deadline (gRPC's), or absl::InfiniteFuture().
  absl::Time deadline = absl::InfiniteFuture();
  // Bytes the front end holds for the request until it is answered (the
  // decoded message's tensor contents): counted like the engine's own.
  int64_t message_bytes = 0;
  // Whether a tiny request may be computed on the caller's thread
  // (--inline_max_flops); false for front ends whose threads only do I/O.
  bool may_run_inline = true;
  // Whether the front end writes outputs as decimal text (HTTP's JSON
  // numbers) rather than raw bytes: the response is then counted, against
  // --max_inflight_bytes and --max_message_bytes, at its largest text size
  // (MaxDecimalTextBytes per element).
  bool outputs_as_text = false;
};

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

struct InferResult {
  std::string model_name;
  std::string model_version;
  std::vector<NamedTensor> outputs;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_INFERENCE_REQUEST_H_
