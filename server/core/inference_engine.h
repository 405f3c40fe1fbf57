// InferenceEngine: the serving core. It holds the served models (built-in or
// loaded from the repository), validates a request on the caller's thread
// (cheap checks only: names, datatypes, shapes, sizes and limits, all before
// any allocation), queues it in the model's dynamic batcher or runs it on its
// own, and computes on the worker pool.
//
// Contract of Submit:
//   - On a validation error, RESOURCE_EXHAUSTED for a request that alone
//     would hold more than --max_inflight_bytes, or UNAVAILABLE when the
//     model's queue is full or the accepted requests hold the limit, it
//     returns that status and never calls `done`.
//   - Otherwise it returns OK at once (scheduling never blocks) and calls
//     `done` exactly once, on a worker or timer thread, with the result; a
//     tiny request (options.inline_max_flops) to an idle model is computed,
//     and `done` called, on the caller's thread before Submit returns.
//   - What a request holds is counted before any of it is allocated: the
//     request message, every copy, output, list and scratch buffer its model
//     reports (PreparedInference::held_bytes) and the response message.
//   - No exception escapes: an allocation failure anywhere (the caller's
//     thread, a worker, batch assembly) answers the requests it touched with
//     RESOURCE_EXHAUSTED, and the model goes on serving. A request that is
//     dropped unanswered on any path is answered as it is destroyed, so no
//     client (and no graceful shutdown) ever waits on a lost completion.
//   - The tensor bytes the request points to must stay valid until `done`
//     has been called (the engine keeps the view itself).
//   - `is_cancelled` is polled while the request waits and before compute;
//     a request whose client has gone finishes with CANCELLED, one whose
//     deadline or queue timeout passed with DEADLINE_EXCEEDED, either way
//     without being computed.
//
// Models are swapped atomically: Install replaces a model of the same name
// and Remove takes it away, while requests already accepted finish on the
// weights they were accepted with (they hold the old model).
//
//   InferenceEngine engine(options);
//   engine.Install(MakeMatMulModel(), BatchingOptions{});
//   absl::Status s = engine.Submit(request, [] { return false; },
//       [](absl::StatusOr<InferResult> r) { ... });
#ifndef GEMMSERVE_SERVER_CORE_INFERENCE_ENGINE_H_
#define GEMMSERVE_SERVER_CORE_INFERENCE_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/core/clock.h"
#include "server/core/dynamic_batcher.h"
#include "server/core/inference_request.h"
#include "server/core/model.h"
#include "server/core/model_statistics.h"
#include "server/core/model_warmup.h"
#include "server/core/served_model.h"
#include "server/core/reservation.h"
#include "server/core/worker_pool.h"
#include "server/metrics/metrics.h"

namespace gemmserve {

// One version of a model to serve (InferenceEngine::InstallVersions).
struct ModelVersion {
  std::unique_ptr<Model> model;
  std::optional<BatchingOptions> batching;  // none: one request at a time
};

struct EngineOptions {
  // Threads that compute, BLIS's and OpenMP's included (--compute_threads);
  // 0: one per core.
  int compute_threads = 0;
  // Largest total output of one request (--max_output_bytes).
  int64_t max_output_bytes = int64_t{4} << 30;
  // Largest response message (--max_message_bytes); outputs that cannot fit
  // are refused before compute.
  int64_t max_message_bytes = int64_t{1} << 30;
  // Requests of at most this many flops run on the caller's thread when their
  // model is idle (--inline_max_flops): a hand-off to a worker and back costs
  // tens of microseconds, more than such a request computes.
  int64_t inline_max_flops = 65536;
  // Bytes of accepted, unanswered requests (everything Submit counts) the
  // engine holds at most (--max_inflight_bytes); a request that would pass it
  // gets UNAVAILABLE at once, one that alone is larger RESOURCE_EXHAUSTED.
  // Bounds memory under overload.
  int64_t max_inflight_bytes = int64_t{8} << 30;
  // Where the engine records queueing, batches, flops and bytes; may be null.
  Metrics* metrics = nullptr;
};

class InferenceEngine {
 public:
  using DoneCallback = absl::AnyInvocable<void(absl::StatusOr<InferResult>) &&>;

  // Bytes held against --max_inflight_bytes (reservation.h).
  using Reservation = gemmserve::Reservation;

  explicit InferenceEngine(EngineOptions options, Clock* clock = RealClock::Get());
  ~InferenceEngine();

  // The engine owns where every model name stands (ModelState): one table,
  // read by requests (READY serves; LOADING, FAILED and UNLOADED answer
  // UNAVAILABLE; a name not in it NOT_FOUND) and by the repository's index.
  //
  // Serves `model` under its metadata name, replacing every version of that
  // name (kReady). With `batching`, concurrent requests are merged by a
  // DynamicBatcher.
  void Install(std::unique_ptr<Model> model, std::optional<BatchingOptions> batching);
  // The same, after running every `warmup` sample through the model: one
  // version, InstallVersions' contract.
  absl::Status Install(std::unique_ptr<Model> model, std::optional<BatchingOptions> batching,
                       std::vector<WarmupSample> warmup, std::function<bool()> stopped = {});
  // Serves exactly `versions` under `name` (Triton's version policy chose
  // them), each with its own batcher and statistics: they replace every
  // version served before at once, and a version no longer served closes its
  // queue, whose requests (and those computing) still finish on it. Before
  // any is served, every `warmup` sample runs through each version (one copy
  // of the samples for all), one request at a time, on the path a client's
  // request takes (so its statistics count them), all within kWarmupDeadline
  // of the start; meanwhile the name stays as it was (a model already served
  // serves on). A sample a version answers with an error is not served: the
  // error, naming the sample, is returned (INVALID_ARGUMENT, or
  // RESOURCE_EXHAUSTED / UNAVAILABLE when the server lacked the memory), and
  // nothing is installed. Once `stopped` (may be empty: never) answers true,
  // no further warmup request is run or computed and nothing is installed:
  // UNAVAILABLE (the server is shutting down). Each model's metadata names
  // `name` and one version, a number; INVALID_ARGUMENT when `versions` is
  // empty or holds a version twice.
  absl::Status InstallVersions(const std::string& name, std::vector<ModelVersion> versions,
                               std::vector<WarmupSample> warmup = {},
                               std::function<bool()> stopped = {});
  // The name stays known but serves no more (kUnloaded). NOT_FOUND for a
  // name not known.
  absl::Status Remove(absl::string_view name);
  // The name is forgotten, model and all: requests get NOT_FOUND. NOT_FOUND
  // for a name not known.
  absl::Status Forget(absl::string_view name);
  // A load of `name` begins (kLoading) or failed (kFailed, with `reason`);
  // both leave a model that is being served alone (it keeps serving).
  void MarkLoading(absl::string_view name);
  void MarkFailed(absl::string_view name, absl::string_view reason);
  // Every name known, by name: one row per version served (ascending), or
  // one row saying where a name without a served version stands.
  std::vector<ModelStatus> States() const;

  // The served version `version` of `name`; its highest served version when
  // `version` is empty. NOT_FOUND for an unknown name or a version not
  // served; UNAVAILABLE for a model that is unloaded, loading or failed to
  // load; INVALID_ARGUMENT for a name no model can have (ValidateModelName).
  absl::StatusOr<std::shared_ptr<const ServedModel>> FindModel(absl::string_view name,
                                                               absl::string_view version) const;
  // The versions of `name` served, ascending; empty when none is.
  std::vector<std::string> Versions(absl::string_view name) const;
  // Every served version of every model.
  std::vector<std::shared_ptr<const ServedModel>> models() const;

  // The metrics a response for `model_name` counts under: the served model's,
  // or the "_unknown" label's. Null when the engine records no metrics.
  std::shared_ptr<ModelMetrics> MetricsFor(absl::string_view model_name) const;

  // RESOURCE_EXHAUSTED when `bytes` alone pass --max_inflight_bytes; the
  // queue-full UNAVAILABLE (QueueFullError) when what accepted requests hold
  // leaves no room for them now. Nothing is held on an error.
  absl::StatusOr<Reservation> Reserve(int64_t bytes, absl::string_view what);
  // Adds `more` bytes to `reservation` (an empty one included), with the
  // errors of Reserve for what it would then hold; unchanged on an error.
  absl::Status Grow(Reservation* reservation, int64_t more, absl::string_view what);

  // With `reserved`, the request's cost is counted from those bytes on (they
  // must be part of its message_bytes); once it is accepted the request holds
  // them and `reserved` is empty. An error means `done` was not taken. A
  // result hands the request's whole cost to `done` (InferResult::held): the
  // front end holds it until the answer is written.
  absl::Status Submit(InferRequestView request, std::function<bool()> is_cancelled,
                      DoneCallback done, Reservation* reserved = nullptr);

  const EngineOptions& options() const { return options_; }
  int64_t inflight_bytes() const { return ledger_->held.load(); }

 private:
  class Pending;
  using PendingBatch = std::vector<std::unique_ptr<Pending>>;
  absl::StatusOr<std::shared_ptr<ServedModel>> Find(absl::string_view name,
                                                    absl::string_view version) const;
  // Validates the request and counts what it will hold; on success *pending
  // owns it and `done`.
  absl::Status Admit(std::unique_ptr<InferRequestView> request, std::function<bool()> is_cancelled,
                     DoneCallback& done, Reservation* reserved,
                     std::shared_ptr<ServedModel>* served, std::unique_ptr<Pending>* pending);
  // Adds `bytes` to what accepted requests hold (`prepaid` more are held for
  // `what` already), or the queue-full UNAVAILABLE when there is no room.
  absl::StatusOr<Reservation> Hold(int64_t bytes, int64_t prepaid, absl::string_view what);
  // Admit, to `served` (found, or not yet published).
  absl::Status AdmitTo(std::shared_ptr<ServedModel> served, absl::Time arrival,
                       std::unique_ptr<InferRequestView> request,
                       std::function<bool()> is_cancelled, DoneCallback& done,
                       Reservation* reserved, std::shared_ptr<ServedModel>* served_out,
                       std::unique_ptr<Pending>* pending);
  // A served model with its batcher (when `batching`), not yet published.
  std::shared_ptr<ServedModel> MakeServed(std::unique_ptr<Model> model,
                                          const std::optional<BatchingOptions>& batching);
  // Runs the warmup samples on `served`, not yet published, each run before
  // `deadline`; the first error.
  absl::Status Warm(const std::shared_ptr<ServedModel>& served,
                    const std::vector<WarmupSample>& samples, absl::Time deadline,
                    const std::function<bool()>& stopped);
  // One run of a warmup sample's `inputs`: OK, or why it failed.
  absl::Status WarmOnce(const std::shared_ptr<ServedModel>& served,
                        const std::vector<InputTensorView>& inputs, absl::Time deadline,
                        const std::function<bool()>& stopped);
  // Runs it inline, queues it or schedules it, taking `pending`; an error
  // only when the batcher refused it, which leaves `pending` with the caller.
  absl::Status Dispatch(const std::shared_ptr<ServedModel>& served,
                        std::unique_ptr<Pending>& pending);
  // Hands a batch the batcher cut to the pool.
  void ScheduleBatch(const std::weak_ptr<ServedModel>& weak, DynamicBatcher::Batch batch);
  // Computes a batch and answers every request in it, whatever happens.
  // Both return when the batch's compute ended and its answers began (for
  // the batcher: their clients may come back from then on).
  absl::Time RunBatch(const std::shared_ptr<ServedModel>& served, PendingBatch batch, int threads);
  absl::Time RunBatchOrThrow(ServedModel& served, PendingBatch& batch, int threads);
  // Remove (the name stays, kUnloaded) or Forget (the name goes).
  absl::Status Retire(absl::string_view name, bool forget);
  // UNAVAILABLE saying why a name with no version served does not serve.
  static absl::Status NotServing(const ModelStatus& status);
  // Closes a replaced or removed model's queue; what it holds still runs.
  static void CloseQueue(ServedModel* served);

  const EngineOptions options_;
  Clock* const clock_;
  // Shared with every reservation handed out, which may outlive the engine.
  const std::shared_ptr<Reservation::Ledger> ledger_;
  mutable absl::Mutex mu_;
  struct Entry {
    ModelStatus status;  // where the name stands while no version is served
    // By version number; not empty exactly when kReady.
    std::map<int64_t, std::shared_ptr<ServedModel>> served;
  };
  std::map<std::string, Entry, std::less<>> models_ ABSL_GUARDED_BY(mu_);
  BatcherTimer timer_;  // outlives the pool: finishing batches may wake it
  WorkerPool pool_;     // destroyed first: runs what is scheduled, then joins
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_CORE_INFERENCE_ENGINE_H_
