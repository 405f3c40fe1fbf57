// A decoded inference request as the core sees it: names, datatypes, shapes and
// views of the tensor bytes, with no gRPC or protobuf type in sight. A front
// end builds one from its wire format without copying tensor data (the gRPC
// one from a KServe ModelInferRequest); the views must stay valid until the
// request's completion callback has run.
#ifndef GEMMSERVE_SERVER_CORE_INFERENCE_REQUEST_H_
#define GEMMSERVE_SERVER_CORE_INFERENCE_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/core/reservation.h"
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

// The kind in the core's own words: "raw contents", "FP32 contents", ... (A
// front end names its wire's fields: InferRequestView::contents_name.)
absl::string_view ContentsKindName(ContentsKind kind);

// Triton's shared-memory parameters of a tensor: a window of a region the
// caller registered (shared_memory_region, shared_memory_offset,
// shared_memory_byte_size).
struct SharedMemoryRef {
  absl::string_view region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

// Triton's shared-memory parameters of a tensor as a front end read them off
// its wire, each of its type already (a string; non-negative integers).
struct SharedMemoryParameters {
  std::optional<absl::string_view> region;
  std::optional<uint64_t> byte_size;
  std::optional<uint64_t> offset;
};

// Triton's rule for them, the same on every front end: none at all
// (nullopt), or shared_memory_region and shared_memory_byte_size together,
// with shared_memory_offset (else 0). INVALID_ARGUMENT naming `what` (e.g.
// "input 'x'") for an offset alone or half a pair.
absl::StatusOr<std::optional<SharedMemoryRef>> SharedMemoryOf(const SharedMemoryParameters& p,
                                                              absl::string_view what);

// A requested output's parameter, by key: INVALID_ARGUMENT for one the server
// refuses rather than ignore (Triton's classification); OK for the others.
absl::Status CheckOutputParameter(absl::string_view key);

struct InputTensorView {
  absl::string_view name;
  absl::string_view datatype;  // as sent, e.g. "FP32"
  absl::Span<const int64_t> shape;
  ContentsKind contents = ContentsKind::kNone;
  const void* data = nullptr;  // first byte (raw) or first element (typed)
  int64_t count = 0;           // bytes for kRaw, elements otherwise
  // Set when the input's bytes are in client shared memory: the front end
  // leaves `contents` kNone, and Serving reads the window and makes the view
  // kRaw before the engine sees it.
  std::optional<SharedMemoryRef> shm = std::nullopt;
};

// A requested output that goes to client shared memory.
struct OutputShmView {
  absl::string_view name;
  SharedMemoryRef ref;
};

struct InferRequestView {
  absl::string_view model_name;
  absl::string_view model_version;  // empty: the model's only version
  absl::string_view id;             // echoed in the response
  std::vector<InputTensorView> inputs;
  std::vector<absl::string_view> requested_outputs;  // empty: all outputs
  std::vector<OutputShmView> output_shm;             // outputs written to shared memory
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
  // How the front end's wire form differs from raw bytes, which the core
  // knows only through these (null: raw):
  //  - contents_name: the wire's name for where a kind of contents goes
  //    ("raw_input_contents", "fp32_contents", ... on gRPC), in messages;
  //  - output_element_bytes: the most bytes an output element of a type
  //    takes in the answer (HTTP's JSON numbers: their longest text). The
  //    response is counted at that against --max_inflight_bytes and
  //    --max_message_bytes; `output_form` says so in a refusal (e.g.
  //    " written as JSON numbers").
  absl::string_view (*contents_name)(ContentsKind kind) = nullptr;
  int64_t (*output_element_bytes)(DataType type) = nullptr;
  absl::string_view output_form;
};

// ContentsKindName, or the request's front end's name for the kind.
absl::string_view ContentsName(const InferRequestView& request, ContentsKind kind);

// Where an output went when it was written to client shared memory; the
// front end then sends no bytes for it, only these parameters.
struct SharedMemoryWritten {
  std::string region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;  // the bytes written
};

struct NamedTensor {
  std::string name;
  Tensor tensor;
  std::optional<SharedMemoryWritten> shm = std::nullopt;
};

struct InferResult {
  std::string model_name;
  std::string model_version;
  std::vector<NamedTensor> outputs;
  // When it was computed, for traces: queued (accepted by the engine), its
  // kernel call's start and end, and the rows of that call (every request
  // merged into it).
  absl::Time queued = absl::InfinitePast();
  absl::Time compute_start = absl::InfinitePast();
  absl::Time compute_end = absl::InfinitePast();
  int64_t batch_rows = 0;
  // What the request is counted at against --max_inflight_bytes: the front
  // end keeps it until the answer has been handed to the socket, so an
  // answer a client does not read stays counted.
  Reservation held{};
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_INFERENCE_REQUEST_H_
