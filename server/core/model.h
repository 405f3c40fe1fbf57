// Model: what the engine serves under a name. A model describes its tensors
// (ModelMetadata) and turns bound, validated inputs into a PreparedInference:
// every check that needs only shapes and datatypes happens in Prepare, on the
// request thread, before anything is allocated. RunBatch then computes one or
// more prepared requests together, on a worker: the batcher hands it every
// request of a batch, and the model merges them into one kernel call (rows
// concatenated against resident weights, or the problem lists of the built-in
// models run in one scheduler call).
//
// A model that accepts several datatypes lists them all in TensorSpec; the
// first is its default, the one the KServe metadata reports (docs/models.md).
//
// This header is the extension point: a new model kind is a new file in
// server/models/ implementing Model. A minimal one, y = 2x for FP32 x of any
// shape:
//
//   class Doubling final : public Model {
//    public:
//     Doubling() {
//       metadata_.name = "doubling";
//       metadata_.versions = {"1"};
//       metadata_.inputs = {{"x", {DataType::kFP32}, {}, /*variable_rank=*/true}};
//       metadata_.outputs = {{"y", {DataType::kFP32}, {}, /*variable_rank=*/true}};
//     }
//     const ModelMetadata& metadata() const override { return metadata_; }
//     absl::StatusOr<std::unique_ptr<PreparedInference>> Prepare(
//         const BoundInputs& inputs) const override {
//       return std::make_unique<Prepared>(inputs[0]);  // a shape check would go here
//     }
//     std::vector<InferOutputs> RunBatch(absl::Span<PreparedInference* const> batch,
//                                        int) const override {
//       std::vector<InferOutputs> out;
//       for (PreparedInference* p : batch) {
//         const BoundInput& x = static_cast<Prepared*>(p)->x;
//         absl::StatusOr<Tensor> y = x.Materialize();
//         if (!y.ok()) {
//           out.push_back(y.status());
//           continue;
//         }
//         for (int64_t i = 0; i < y->num_elements(); ++i) y->data<float>()[i] *= 2;
//         std::vector<NamedTensor> outputs;
//         outputs.push_back({"y", *std::move(y)});
//         out.push_back(std::move(outputs));
//       }
//       return out;
//     }
//
//    private:
//     struct Prepared final : PreparedInference {
//       explicit Prepared(BoundInput x) : x(std::move(x)) {}
//       int64_t output_bytes() const override { return x.byte_size; }
//       std::vector<std::pair<std::string, Shape>> output_shapes() const override {
//         return {{"y", x.shape}};
//       }
//       int64_t flops() const override { return x.byte_size / 4; }
//       int64_t rows() const override { return 1; }
//       int64_t held_bytes(int) const override { return x.byte_size; }  // the copy
//       BoundInput x;
//     };
//     ModelMetadata metadata_;
//   };
//
//   engine.Install(std::make_unique<Doubling>(), BatchingOptions{});
//
// (model_test.cc compiles and serves this very example.)
#ifndef GEMMSERVE_SERVER_CORE_MODEL_H_
#define GEMMSERVE_SERVER_CORE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/core/inference_request.h"
#include "server/tensor/datatype.h"
#include "server/tensor/shape.h"

namespace gemmserve {

struct TensorSpec {
  std::string name;
  std::vector<DataType> datatypes;  // accepted; the first is the default
  Shape shape;                      // -1 for a variable dimension; empty with
  bool variable_rank = false;       // variable_rank for "any rank >= 1"
  bool optional = false;
};

struct ModelMetadata {
  std::string name;
  std::vector<std::string> versions;
  std::string platform;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
};

// One input after generic validation: known name, allowed datatype, valid
// shape, and exactly as many bytes or elements as the shape needs.
struct BoundInput {
  const TensorSpec* spec = nullptr;
  DataType type = DataType::kFP32;
  Shape shape;
  const InputTensorView* view = nullptr;
  int64_t byte_size = 0;

  // Copies the wire bytes into a fresh aligned tensor (never cast in place:
  // raw contents can sit at any offset). RESOURCE_EXHAUSTED on out of memory.
  absl::StatusOr<Tensor> Materialize() const;
  // Copies the elements, converted from the wire, to `dst` (byte_size bytes).
  void CopyTo(void* dst) const;
};

// Bound inputs in the order of ModelMetadata::inputs; an absent optional input
// has spec == nullptr.
using BoundInputs = std::vector<BoundInput>;

class PreparedInference {
 public:
  virtual ~PreparedInference() = default;
  // Bytes of every output together, known before anything is computed.
  virtual int64_t output_bytes() const = 0;
  virtual std::vector<std::pair<std::string, Shape>> output_shapes() const = 0;
  // Multiply-adds times two.
  virtual int64_t flops() const = 0;
  // Every byte computing the request makes the server hold, computed with
  // up to `threads` threads, as an upper bound known before any of it is
  // allocated: copies of the inputs, the outputs (with any per-request copy
  // a batch makes of them), and the kernels' bookkeeping and scratch. It
  // adds up: a batch of requests holds at most the sum of theirs. The engine
  // counts it against --max_inflight_bytes before accepting the request.
  virtual int64_t held_bytes(int threads) const = 0;
  // Rows the request adds to a batch: tokens (M) of a GroupedMatMul, rows of
  // A (batch dimensions folded) of a MatMul.
  virtual int64_t rows() const = 0;

  // Bytes of weights computing the request read (GemmWeightBytes of its
  // problems), set by Model::RunBatch. A batch computed as one kernel call
  // reads its resident weights once: the call's figure goes on one of its
  // requests, so the engine's sum over the batch is what the call read.
  int64_t weight_bytes_read() const { return weight_bytes_read_; }
  void set_weight_bytes_read(int64_t bytes) { weight_bytes_read_ = bytes; }

  // False for a request that waits on other servers (a sharded layer's
  // router): never computed inline on a front end's thread, however few its
  // flops.
  virtual bool may_run_inline() const { return true; }

  // The client's deadline (absl::InfiniteFuture() for none), set by the
  // engine after Prepare: a model that calls other servers (a sharded
  // layer's router) gives them no more time than its callers have.
  absl::Time deadline() const { return deadline_; }
  void set_deadline(absl::Time deadline) { deadline_ = deadline; }

 private:
  int64_t weight_bytes_read_ = 0;
  absl::Time deadline_ = absl::InfiniteFuture();
};

using InferOutputs = absl::StatusOr<std::vector<NamedTensor>>;

class Model {
 public:
  virtual ~Model() = default;
  // Names, datatypes and shapes of the inputs and outputs; BindInputs holds
  // every request to it (rank, fixed dimensions, datatypes) before Prepare.
  virtual const ModelMetadata& metadata() const = 0;
  // The model's own shape rules on inputs BindInputs accepted, on the
  // request's thread: cheap, allocating nothing large and reading no tensor
  // data. INVALID_ARGUMENT naming the tensor for a request it cannot serve.
  // The PreparedInference may keep the BoundInputs (they point into the
  // request, which outlives it) and must know everything the engine asks of
  // it (output sizes, flops, rows, held_bytes) before anything is computed.
  virtual absl::StatusOr<std::unique_ptr<PreparedInference>> Prepare(
      const BoundInputs& inputs) const = 0;
  // Computes `batch` (requests this model prepared) as one kernel call with
  // up to `threads` threads; one result per request, in order. A request's
  // own fault (an index out of range) fails that request alone; a fault of
  // the shared call (memory denied) fails the whole batch.
  virtual std::vector<InferOutputs> RunBatch(absl::Span<PreparedInference* const> batch,
                                             int threads) const = 0;
  // Reads what the model keeps resident (weights), at warmup before it turns
  // READY, so that the first request finds it as later ones do.
  virtual void TouchResident() const {}
  // OK while the model can compute. A model that depends on other servers
  // (a sharded layer's router) is UNAVAILABLE, naming what it lacks, while
  // one of them is missing; ModelReady and the repository index say so.
  virtual absl::Status Available() const { return absl::OkStatus(); }
  // Model-specific facts for the ModelConfig RPC (e.g. "groups" of a
  // resident GroupedMatMul, which clients need to send valid indices).
  virtual std::vector<std::pair<std::string, std::string>> parameters() const { return {}; }
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_MODEL_H_
