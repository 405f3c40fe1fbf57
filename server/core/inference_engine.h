// InferenceEngine: the serving core. It owns the models and the worker pool,
// validates a request on the caller's thread (cheap checks only: names,
// datatypes, shapes, sizes and limits, all before any allocation), and runs
// the computation on the pool.
//
// Contract of Submit:
//   - On a validation error it returns that status and never calls `done`.
//   - Otherwise it returns OK at once (scheduling never blocks) and calls
//     `done` exactly once, on a worker thread, with the result.
//   - The tensor bytes the request points to must stay valid until `done`
//     has been called (the engine keeps the view itself).
//   - `is_cancelled` is polled on the worker before compute starts; a request
//     whose client has gone (cancelled, or its deadline passed) finishes with
//     CANCELLED without being computed.
//
//   InferenceEngine engine(options, {MakeMatMulModel(), MakeGroupedMatMulModel()});
//   absl::Status s = engine.Submit(request, [] { return false; },
//       [](absl::StatusOr<InferResult> r) { ... });
#ifndef GEMMSERVE_SERVER_CORE_INFERENCE_ENGINE_H_
#define GEMMSERVE_SERVER_CORE_INFERENCE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "server/core/inference_request.h"
#include "server/core/model.h"
#include "server/core/worker_pool.h"

namespace gemmserve {

struct EngineOptions {
  int compute_threads = 1;
  // Largest total output of one request (--max_output_bytes).
  int64_t max_output_bytes = int64_t{4} << 30;
  // Largest response message (--max_message_bytes); outputs that cannot fit
  // are refused before compute.
  int64_t max_message_bytes = int64_t{1} << 30;
};

class InferenceEngine {
 public:
  using DoneCallback = absl::AnyInvocable<void(absl::StatusOr<InferResult>) &&>;

  InferenceEngine(EngineOptions options, std::vector<std::unique_ptr<Model>> models);

  // NOT_FOUND for an unknown name or a version the model does not have;
  // INVALID_ARGUMENT for an empty name.
  absl::StatusOr<const Model*> FindModel(absl::string_view name, absl::string_view version) const;
  std::vector<const Model*> models() const;

  absl::Status Submit(InferRequestView request, std::function<bool()> is_cancelled,
                      DoneCallback done);

  const EngineOptions& options() const { return options_; }

 private:
  const EngineOptions options_;
  std::vector<std::unique_ptr<Model>> models_;
  WorkerPool pool_;  // last: joined first, while the models are still alive
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_INFERENCE_ENGINE_H_
