// Model: what the engine serves under a name. A model describes its tensors
// (ModelMetadata) and turns bound, validated inputs into a PreparedInference:
// every check that needs only shapes and datatypes happens in Prepare, on the
// request thread, before anything is allocated; Run then copies the inputs
// into aligned tensors and computes, on a worker.
//
// A model that accepts several datatypes lists them all in TensorSpec; the
// first is its default, the one the KServe metadata reports (see README).
#ifndef GEMMSERVE_SERVER_CORE_MODEL_H_
#define GEMMSERVE_SERVER_CORE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
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
  // Runs on a worker with up to `threads` compute threads.
  virtual absl::StatusOr<std::vector<NamedTensor>> Run(int threads) = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelMetadata& metadata() const = 0;
  virtual absl::StatusOr<std::unique_ptr<PreparedInference>> Prepare(
      const BoundInputs& inputs) const = 0;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_MODEL_H_
