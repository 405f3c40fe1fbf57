// WarmupSample: a request a model runs at load, before it turns READY
// (config.pbtxt's model_warmup, Triton's field). The repository builds the
// samples, with their bytes, from the config; InferenceEngine::Install runs
// each through the path a client's request takes (binding, the model's
// checks, the batcher or the worker pool, the statistics) `count` times, one
// at a time, and only then serves the model. A sample the model refuses
// fails the load, and a model already served keeps serving.
#ifndef GEMMSERVE_SERVER_CORE_MODEL_WARMUP_H_
#define GEMMSERVE_SERVER_CORE_MODEL_WARMUP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/tensor/datatype.h"
#include "server/tensor/shape.h"

namespace gemmserve {

// A warmup still running this long after it began is stopped: the requests
// not yet computed get DEADLINE_EXCEEDED, and the load fails.
inline constexpr absl::Duration kWarmupDeadline = absl::Minutes(10);

struct WarmupInput {
  enum class Data { kZero, kRandom, kFile };
  std::string name;
  DataType type = DataType::kFP32;
  Shape shape;
  Data data = Data::kZero;
  std::string file;   // kFile: the file under the model's warmup/ directory
  std::string bytes;  // the tensor, raw; emptied once the model is served
};

struct WarmupSample {
  std::string name;
  uint32_t batch_size = 0;  // as configured (the inputs' shapes already hold it)
  uint32_t count = 1;       // runs, at least 1
  std::vector<WarmupInput> inputs;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_MODEL_WARMUP_H_
