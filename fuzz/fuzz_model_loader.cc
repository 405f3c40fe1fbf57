// Fuzzes the repository loader with what a RepositoryModelLoad call may
// upload: config.pbtxt text and the bytes of model.onnx (and of an external
// data file beside it), through ModelRepository::Load into a real engine,
// then unloads the model. The input is split into the three files by two
// length bytes at its front:
//
//   1 byte   config length C (mod 256), then C bytes of config text
//            (config.pbtxt, or Triton's JSON form when it starts with '{')
//   1 byte   external data length E (times 16), then E bytes of 1/weights.bin
//            (also uploaded as warmup/data.bin, a model_warmup input_data_file)
//   the rest model.onnx
//
// What must hold: no crash, no sanitizer report, no allocation the input did
// not ask for in bytes it holds (libFuzzer's -malloc_limit_mb would report
// one); the status is OK, INVALID_ARGUMENT, NOT_FOUND or RESOURCE_EXHAUSTED,
// with no control character in its message (client text is escaped); a
// loaded model has a valid name and batching within the config limits, and
// its statistics count exactly the warmup runs its config asked for; its
// ModelConfig answer loads back (as JSON, with the same files) to an equal
// answer; and
// after the unload the repository's index and the engine hold nothing of it.
// Seeds: real one-node models, mixture-of-experts layer graphs and configs
// (fuzz/make_seeds.py).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz/fuzz_support.h"
#include "google/protobuf/stubs/logging.h"
#include "server/core/dynamic_batcher.h"
#include "server/core/inference_engine.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/repository/configured_model.h"
#include "server/repository/model_repository.h"

namespace gemmserve {
namespace fuzz {
namespace {

EngineOptions Options() {
  EngineOptions options;
  // Bounds what model_warmup samples may hold (their data is allocated).
  options.max_message_bytes = int64_t{1} << 20;
  return options;
}

struct Server {
  InferenceEngine engine{Options()};
  ModelRepository repository{"", &engine, {"matmul", "grouped_matmul"}};
};

Server& TheServer() {
  static Server* server = new Server();
  return *server;
}

bool HasControlCharacter(absl::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  return false;
}

// What ModelConfig answers for a loaded model loads back, with the same
// files, to an equal answer (configured_model.h: completing is idempotent).
void CheckConfigLoadsBack(Server& server, const ServedModel& served, ModelLoadRequest request) {
  const inference::ModelConfig* answer = LoadedConfig(served.model());
  FUZZ_CHECK(answer != nullptr, "a loaded model without its config");
  std::string json;
  FUZZ_CHECK(google::protobuf::util::MessageToJsonString(*answer, &json).ok(), "to JSON");
  request.config = json;
  const absl::Status again = server.repository.Load("fuzzed", request);
  FUZZ_CHECK(again.ok(), "the ModelConfig answer did not load back: %s\n%s",
             again.ToString().c_str(), json.c_str());
  auto reloaded = server.engine.FindModel("fuzzed", "");
  FUZZ_CHECK(reloaded.ok(), "reloaded but not served");
  const inference::ModelConfig* second = LoadedConfig((*reloaded)->model());
  FUZZ_CHECK(
      second != nullptr && google::protobuf::util::MessageDifferencer::Equals(*answer, *second),
      "the answer loaded back differs:\n%s\n%s", answer->DebugString().c_str(),
      second == nullptr ? "" : second->DebugString().c_str());
}

}  // namespace
}  // namespace fuzz
}  // namespace gemmserve

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // invalid UTF-8 in strings is logged otherwise
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gemmserve;
  using namespace gemmserve::fuzz;
  size_t at = 0;
  auto take = [&](size_t n) {
    n = std::min(n, size - at);
    std::string out(reinterpret_cast<const char*>(data) + at, n);
    at += n;
    return out;
  };
  const size_t config_length = at < size ? data[at++] : 0;
  ModelLoadRequest request;
  request.config = take(config_length);
  const size_t weights_length = at < size ? size_t{data[at++]} * 16 : 0;
  std::string weights = take(weights_length);
  if (!weights.empty()) {
    request.files["warmup/data.bin"] = weights;
    request.files["1/weights.bin"] = std::move(weights);
  }
  request.files["1/model.onnx"] = take(size);

  Server& server = TheServer();
  const absl::Status status = server.repository.Load("fuzzed", request);
  FUZZ_CHECK(status.ok() || absl::IsInvalidArgument(status) || absl::IsNotFound(status) ||
                 absl::IsResourceExhausted(status),
             "Load: %s", status.ToString().c_str());
  FUZZ_CHECK(!HasControlCharacter(status.message()), "an unescaped message: %s",
             status.ToString().c_str());
  if (status.ok()) {
    auto served = server.engine.FindModel("fuzzed", "");
    FUZZ_CHECK(served.ok(), "loaded but not served: %s", served.status().ToString().c_str());
    const ModelMetadata& md = (*served)->metadata();
    FUZZ_CHECK(md.name == "fuzzed" && !md.inputs.empty() && md.outputs.size() == 1,
               "metadata of a loaded model");
    if ((*served)->batching()) {
      const BatchingOptions& b = *(*served)->batching();
      FUZZ_CHECK(b.priority_levels >= 0 && b.priority_levels <= kMaxPriorityLevels &&
                     b.default_priority_level <= b.priority_levels &&
                     b.max_concurrent_batches >= 1 && b.max_queue_size >= 0 &&
                     b.max_batch_rows >= 0,
                 "batching options out of range");
    }
    uint64_t runs = 0;
    for (const WarmupSample& sample : (*served)->warmup()) {
      runs += sample.count;
      for (const WarmupInput& input : sample.inputs) {
        FUZZ_CHECK(input.bytes.empty(), "warmup data kept after the load");
      }
    }
    const ModelStatistics stats = (*served)->statistics();
    FUZZ_CHECK(stats.execution_count == runs && stats.success.count == runs,
               "%llu warmup runs, but the statistics count %llu",
               static_cast<unsigned long long>(runs),
               static_cast<unsigned long long>(stats.execution_count));
    CheckConfigLoadsBack(server, **served, request);
  }
  const absl::Status unloaded = server.repository.Unload("fuzzed");
  FUZZ_CHECK(unloaded.ok(), "Unload after a load that %s: %s", status.ok() ? "worked" : "failed",
             unloaded.ToString().c_str());
  FUZZ_CHECK(server.repository.Index().empty(), "the index kept %zu entries",
             server.repository.Index().size());
  FUZZ_CHECK(absl::IsNotFound(server.engine.FindModel("fuzzed", "").status()),
             "the engine kept the model");
  return 0;
}
