#include "server/core/inference_engine.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <new>
#include <stdexcept>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/common/allocation.h"
#include "server/common/client_text.h"
#include "server/common/logging.h"
#include "server/common/model_name.h"
#include "server/common/status_macros.h"
#include "server/core/input_binding.h"
#include "server/core/overload.h"
#include "server/tensor/datatype.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace {

// What a request's own objects take beside its tensors: the view, the bound
// inputs, the prepared plan, the queue entry, the answer's envelope.
constexpr int64_t kRequestBookkeepingBytes = 4096;

// Room for the response's envelope (model name and version, output names,
// datatypes and shapes, field tags) beside the tensor bytes and the echoed id.
constexpr int64_t kResponseEnvelopeBytes = 1024;

// Bytes of the response's tensors: the outputs' own, or their largest decimal
// text for a front end that writes them as text (outputs of the built-in
// operators and of resident models have the datatype of the first input).
// The answer's tensor bytes: raw, or as the front end writes them.
int64_t ResponseTensorBytes(const PreparedInference& prepared, DataType type,
                            const InferRequestView& request) {
  if (request.output_element_bytes == nullptr) return prepared.output_bytes();
  const int64_t per_element = request.output_element_bytes(type);
  int64_t bytes = 0;
  for (const auto& [name, shape] : prepared.output_shapes()) {
    const absl::StatusOr<int64_t> n = ElementCount(shape);
    bytes = SaturatingAdd(bytes, SaturatingMul(n.ok() ? *n : INT64_MAX, per_element));
  }
  return bytes;
}

absl::Status CheckOutputLimits(const PreparedInference& prepared, int64_t response_tensor_bytes,
                               absl::string_view output_form, int64_t id_bytes,
                               const EngineOptions& options) {
  const int64_t bytes = prepared.output_bytes();
  auto describe = [&] {
    std::string shapes;
    for (const auto& [name, shape] : prepared.output_shapes()) {
      absl::StrAppend(&shapes, shapes.empty() ? "" : ", ", "'", name, "' ", ShapeToString(shape));
    }
    return shapes;
  };
  if (bytes > options.max_output_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "output ", describe(), " would be ", bytes, " bytes, over the server's limit of ",
        options.max_output_bytes, " (raise it with --max_output_bytes)"));
  }
  const int64_t response_bytes =
      SaturatingAdd(response_tensor_bytes, id_bytes + kResponseEnvelopeBytes);
  if (response_bytes > options.max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "output ", describe(), " would be ", bytes, " bytes, making a response of about ",
        response_bytes, " bytes with the request id", output_form,
        ", over the message limit of ", options.max_message_bytes,
        " (raise it with --max_message_bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace

// One accepted request: everything needed to compute and answer it. It is
// answered exactly once: by compute or rejection through Answer(), or, if it
// is destroyed unanswered (an allocation failure dropped the container that
// held it), by its destructor. Disarm() is for a request the batcher refused
// before it was ever accepted: Submit returns that refusal instead.
class InferenceEngine::Pending final : public BatchTask {
 public:
  Pending(ServedModel* served, Clock* clock, std::unique_ptr<InferRequestView> request,
          std::unique_ptr<PreparedInference> prepared, std::function<bool()> is_cancelled,
          DoneCallback done, absl::Time arrival, DataType type, int64_t input_bytes,
          Reservation held)
      : type_(type),
        input_bytes_(input_bytes),
        served_(served),
        clock_(clock),
        request_(std::move(request)),
        prepared_(std::move(prepared)),
        is_cancelled_(std::move(is_cancelled)),
        done_(std::move(done)),
        arrival_(arrival),
        held_(std::move(held)) {}
  ~Pending() override {
    if (done_) {
      GEMMSERVE_LOG(ERROR) << "a request to model '" << served_->metadata().name
                           << "' was dropped unanswered (out of memory); answering it now";
      Answer(AllocationFailure("this request"));
    }
    Release();
  }

  int64_t rows() const override { return prepared_->rows(); }
  bool IsCancelled() const override { return is_cancelled_ && is_cancelled_(); }
  // From the batcher: timed out or cancelled while queued. (A model's queue
  // is emptied before the model can go, so served_ is alive.)
  void Reject(absl::Status status) override {
    served_->RecordFailure(clock_->Now() - arrival_);
    Answer(std::move(status));
  }

  // A result carries what the request is counted at to the front end,
  // which holds it until the answer is written; an error frees it here.
  void Answer(absl::StatusOr<InferResult> result) {
    if (result.ok()) {
      result->held = std::move(held_);
    } else {
      Release();
    }
    if (!done_) return;
    DoneCallback done = std::move(done_);
    done_ = nullptr;
    std::move(done)(std::move(result));
  }
  bool answered() const { return !done_; }
  // Refused before acceptance: no answer; Submit returns the refusal.
  void Disarm() {
    done_ = nullptr;
    Release();
  }
  // Refused by a model that was replaced meanwhile: the request, whole, to
  // be submitted again; nothing is held for it any more.
  struct Withdrawn {
    std::unique_ptr<InferRequestView> request;
    std::function<bool()> is_cancelled;
    DoneCallback done;
  };
  Withdrawn Withdraw() {
    Release();
    Withdrawn w{std::move(request_), std::move(is_cancelled_), std::move(done_)};
    done_ = nullptr;
    return w;
  }

  const InferRequestView& request() const { return *request_; }
  const DataType type_;
  const int64_t input_bytes_;
  PreparedInference* prepared() { return prepared_.get(); }
  absl::Time arrival() const { return arrival_; }

 private:
  ServedModel* served_;
  Clock* clock_;
  std::unique_ptr<InferRequestView> request_;
  std::unique_ptr<PreparedInference> prepared_;
  std::function<bool()> is_cancelled_;
  DoneCallback done_;
  absl::Time arrival_;
  Reservation held_;

  void Release() { held_.Release(); }
};

namespace {

EngineOptions WithThreads(EngineOptions options) {
  if (options.compute_threads <= 0) {
    options.compute_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  return options;
}

}  // namespace

InferenceEngine::InferenceEngine(EngineOptions options, Clock* clock)
    : options_(WithThreads(options)),
      clock_(clock),
      ledger_(std::make_shared<Reservation::Ledger>(options_.metrics)),
      pool_(options_.compute_threads) {}

InferenceEngine::~InferenceEngine() {
  // Accepted work completes: every queue is cut now, and the pool (destroyed
  // next) runs what it holds before its threads join.
  std::vector<std::shared_ptr<ServedModel>> served;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [name, entry] : models_) {
      for (auto& [version, model] : entry.served) served.push_back(model);
    }
  }
  for (auto& model : served) CloseQueue(model.get());
}

namespace {

absl::Status WarmupStopped() {
  return absl::UnavailableError(
      "the server is shutting down: the model's warmup was stopped and the model was not "
      "loaded; retry on another replica");
}

// What a warmup sample's failure is reported as: the model refusing the
// sample is the config's fault; the server's own troubles keep their codes.
absl::Status WarmupFailed(const WarmupSample& sample, const absl::Status& s) {
  const std::string message =
      absl::StrCat("model_warmup '", ClientText(sample.name), "': ", s.message());
  switch (s.code()) {
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kDeadlineExceeded: return absl::Status(s.code(), message);
    default: return absl::InvalidArgumentError(message);
  }
}

}  // namespace

absl::Status InferenceEngine::Warm(const std::shared_ptr<ServedModel>& served,
                                   const std::vector<WarmupSample>& samples, absl::Time deadline,
                                   const std::function<bool()>& stopped) {
  // Every resident byte first: the samples' data may leave weights unread
  // (a group index of 0 reads one expert).
  served->model().TouchResident();
  for (const WarmupSample& sample : samples) {
    std::vector<InputTensorView> inputs;
    for (const WarmupInput& input : sample.inputs) {
      InputTensorView view;
      view.name = input.name;
      view.datatype = DataTypeName(input.type);
      view.shape = input.shape;
      view.contents = ContentsKind::kRaw;
      view.data = input.bytes.data();
      view.count = static_cast<int64_t>(input.bytes.size());
      inputs.push_back(view);
    }
    for (uint32_t run = 0; run < std::max<uint32_t>(1, sample.count); ++run) {
      if (stopped && stopped()) return WarmupStopped();
      absl::Status status = WarmOnce(served, inputs, deadline, stopped);
      // A run cut short by the stop fails as the stop, not as the sample.
      if (stopped && stopped()) return WarmupStopped();
      if (!status.ok()) return WarmupFailed(sample, status);
    }
  }
  return absl::OkStatus();
}

absl::Status InferenceEngine::WarmOnce(const std::shared_ptr<ServedModel>& served,
                                       const std::vector<InputTensorView>& inputs,
                                       absl::Time deadline, const std::function<bool()>& stopped) {
  absl::Status status;
  absl::StatusOr<InferResult> result;
  absl::Notification answered;
  // Client traffic may hold --max_inflight_bytes for a while: a full server
  // is waited out (until the deadline or the stop), not failed at once.
  for (absl::Duration pause = absl::Milliseconds(1);;
       pause = std::min(2 * pause, absl::Milliseconds(100))) {
    auto request = std::make_unique<InferRequestView>();
    request->model_name = served->metadata().name;
    request->inputs = inputs;
    request->deadline = deadline;
    request->timeout_us = uint64_t{1} << 62;  // the deadline bounds it, not the queue's
    DoneCallback done = [&](absl::StatusOr<InferResult> r) {
      result = std::move(r);
      answered.Notify();
    };
    std::shared_ptr<ServedModel> admitted;
    std::unique_ptr<Pending> pending;
    // A stop cancels the request as a client's cancel does: if still
    // queued, it is never computed.
    status = CatchAllocationFailure("a warmup request", [&] {
      return AdmitTo(served, clock_->Now(), std::move(request), stopped, done,
                     /*reserved=*/nullptr, &admitted, &pending);
    });
    if (status.ok()) {
      try {
        status = Dispatch(served, pending);
      } catch (const std::exception& e) {
        // Whatever held the request was destroyed, and so answered it.
        GEMMSERVE_LOG(ERROR) << "a warmup request failed: " << e.what();
      }
      if (!status.ok()) pending->Disarm();
    }
    if (!absl::IsUnavailable(status) || clock_->Now() + pause >= deadline) break;
    if (stopped && stopped()) break;
    absl::SleepFor(pause);
  }
  if (!status.ok()) return status;
  answered.WaitForNotification();
  return result.status();
}

absl::StatusOr<InferenceEngine::Reservation> InferenceEngine::Reserve(int64_t bytes,
                                                                       absl::string_view what) {
  if (bytes <= 0) return Reservation();
  if (bytes > options_.max_inflight_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " would hold ", bytes, " bytes, over the server's limit of ",
                     options_.max_inflight_bytes, " (raise it with --max_inflight_bytes)"));
  }
  return Hold(bytes, /*prepaid=*/0, what);
}

absl::Status InferenceEngine::Grow(Reservation* reservation, int64_t more, absl::string_view what) {
  if (more <= 0) return absl::OkStatus();
  const int64_t total = SaturatingAdd(reservation->bytes(), more);
  if (total > options_.max_inflight_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " would hold ", total, " bytes, over the server's limit of ",
                     options_.max_inflight_bytes, " (raise it with --max_inflight_bytes)"));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(Reservation added, Hold(more, reservation->bytes(), what));
  reservation->Absorb(std::move(added));
  return absl::OkStatus();
}

absl::StatusOr<InferenceEngine::Reservation> InferenceEngine::Hold(int64_t bytes, int64_t prepaid,
                                                                    absl::string_view what) {
  const int64_t held = ledger_->held.fetch_add(bytes, std::memory_order_relaxed);
  if (held > options_.max_inflight_bytes - bytes) {
    ledger_->held.fetch_sub(bytes, std::memory_order_relaxed);
    return QueueFullError(absl::StrCat("queue full: the server holds ", held - prepaid,
                                       " bytes of accepted requests and ", what, " would add ",
                                       prepaid + bytes, ", over --max_inflight_bytes=",
                                       options_.max_inflight_bytes, "; retry later"));
  }
  if (ledger_->metrics) ledger_->metrics->AddInflightBytes(bytes);
  return Reservation(ledger_, bytes);
}

absl::Status InferenceEngine::Submit(InferRequestView request_view,
                                     std::function<bool()> is_cancelled, DoneCallback done,
                                     Reservation* reserved) {
  auto request = std::make_unique<InferRequestView>(std::move(request_view));
  // A model replaced between the lookup and the queue (a reload) closes its
  // queue: the request is then admitted again, to the model served now.
  for (int attempt = 0;; ++attempt) {
    std::shared_ptr<ServedModel> served;
    std::unique_ptr<Pending> pending;
    GEMMSERVE_RETURN_IF_ERROR(CatchAllocationFailure("the request's bookkeeping", [&] {
      return Admit(std::move(request), std::move(is_cancelled), done, reserved, &served,
                   &pending);
    }));
    // `pending` owns `done` now: from here every path answers it once, but
    // for a refusal by the batcher, which leaves it with us.
    absl::Status dispatched;
    try {
      dispatched = Dispatch(served, pending);
    } catch (const std::exception& e) {
      // Whatever held the request was destroyed, and so answered it.
      GEMMSERVE_LOG(ERROR) << "accepting a request failed: " << e.what();
      return absl::OkStatus();
    }
    if (dispatched.ok()) return absl::OkStatus();
    if (IsModelClosed(dispatched) && attempt < 3) {
      Pending::Withdrawn back = pending->Withdraw();
      request = std::move(back.request);
      is_cancelled = std::move(back.is_cancelled);
      done = std::move(back.done);
      continue;
    }
    pending->Disarm();
    return dispatched;
  }
}

absl::Status InferenceEngine::Admit(std::unique_ptr<InferRequestView> request,
                                    std::function<bool()> is_cancelled, DoneCallback& done,
                                    Reservation* reserved,
                                    std::shared_ptr<ServedModel>* served_out,
                                    std::unique_ptr<Pending>* pending) {
  const absl::Time arrival = clock_->Now();
  GEMMSERVE_ASSIGN_OR_RETURN(std::shared_ptr<ServedModel> served,
                             Find(request->model_name, request->model_version));
  return AdmitTo(std::move(served), arrival, std::move(request), std::move(is_cancelled), done,
                 reserved, served_out, pending);
}

absl::Status InferenceEngine::AdmitTo(std::shared_ptr<ServedModel> served, absl::Time arrival,
                                      std::unique_ptr<InferRequestView> request,
                                      std::function<bool()> is_cancelled, DoneCallback& done,
                                      Reservation* reserved,
                                      std::shared_ptr<ServedModel>* served_out,
                                      std::unique_ptr<Pending>* pending) {
  const ModelMetadata& metadata = served->metadata();
  for (absl::string_view wanted : request->requested_outputs) {
    bool known = std::any_of(metadata.outputs.begin(), metadata.outputs.end(),
                             [&](const TensorSpec& s) { return s.name == wanted; });
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown output '", ClientText(wanted), "' requested from model '", metadata.name, "'"));
    }
  }
  GEMMSERVE_ASSIGN_OR_RETURN(BoundInputs bound, BindInputs(metadata, *request));
  GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<PreparedInference> prepared,
                             served->model().Prepare(bound));
  prepared->set_deadline(request->deadline);
  const DataType type = bound.empty() ? DataType::kFP32 : bound.front().type;
  const int64_t response_tensor_bytes =
      ResponseTensorBytes(*prepared, type, *request);
  GEMMSERVE_RETURN_IF_ERROR(CheckOutputLimits(*prepared, response_tensor_bytes,
                                              request->output_form,
                                              static_cast<int64_t>(request->id.size()), options_));
  int64_t input_bytes = 0;
  for (const BoundInput& b : bound) input_bytes = SaturatingAdd(input_bytes, b.byte_size);
  // Everything the request holds until it is answered: the front end's
  // message, what the model computes with, and the response it is copied into.
  int64_t cost =
      SaturatingAdd(request->message_bytes, prepared->held_bytes(options_.compute_threads));
  cost = SaturatingAdd(SaturatingAdd(cost, response_tensor_bytes), kRequestBookkeepingBytes);
  if (cost > options_.max_inflight_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the request would hold ", cost,
                     " bytes (its message, input copies, outputs, "
                     "bookkeeping and scratch), over the server's limit of ",
                     options_.max_inflight_bytes, " (raise it with --max_inflight_bytes)"));
  }
  // What the front end reserved is held already (it is part of the message).
  const int64_t prepaid = reserved == nullptr ? 0 : std::min(reserved->bytes(), cost);
  // Held: the Pending, then the answer, releases it. Until it exists, `hold` does.
  GEMMSERVE_ASSIGN_OR_RETURN(Reservation hold, Hold(cost - prepaid, prepaid, "this request"));
  if (reserved != nullptr) hold.Absorb(reserved->Take(prepaid));
  *pending = std::make_unique<Pending>(
      served.get(), clock_, std::move(request), std::move(prepared), std::move(is_cancelled),
      std::move(done), arrival, type, input_bytes, std::move(hold));
  served->RecordAdmitted(cost);
  *served_out = std::move(served);
  return absl::OkStatus();
}

absl::Status InferenceEngine::Dispatch(const std::shared_ptr<ServedModel>& served,
                                       std::unique_ptr<Pending>& pending) {
  const uint64_t priority = pending->request().priority;
  const absl::Duration timeout = absl::Microseconds(
      static_cast<int64_t>(std::min<uint64_t>(pending->request().timeout_us, uint64_t{1} << 62)));
  const absl::Time deadline = pending->request().deadline;
  const bool tiny = pending->request().may_run_inline && pending->prepared()->may_run_inline() &&
                    pending->prepared()->flops() <= options_.inline_max_flops;
  DynamicBatcher* const batcher = served->batcher();
  if (tiny && (!batcher || batcher->TryBeginInline())) {
    // The batcher counts this as a running batch until BatchDone, whatever
    // happens to the request.
    struct InlineBatch {
      DynamicBatcher* batcher;
      absl::Time answers_began = absl::InfiniteFuture();
      ~InlineBatch() {
        if (batcher) batcher->BatchDone(answers_began);
      }
    } inline_batch{batcher};
    PendingBatch batch;
    batch.push_back(std::move(pending));
    inline_batch.answers_began = RunBatch(served, std::move(batch), /*threads=*/1);
    return absl::OkStatus();
  }
  if (batcher) {
    std::unique_ptr<BatchTask> task = std::move(pending);
    absl::Status queued = batcher->Enqueue(task, priority, deadline, timeout);
    served->RecordQueueDepth();
    if (!queued.ok()) pending.reset(static_cast<Pending*>(task.release()));  // still ours
    return queued;
  }
  pool_.Schedule([this, served, pending = std::move(pending)](int threads) mutable {
    PendingBatch batch;
    batch.push_back(std::move(pending));
    RunBatch(served, std::move(batch), threads);
  });
  return absl::OkStatus();
}

void InferenceEngine::ScheduleBatch(const std::weak_ptr<ServedModel>& weak,
                                    DynamicBatcher::Batch batch) {
  std::shared_ptr<ServedModel> self = weak.lock();
  if (!self) {  // cannot happen while a batcher of it runs; answer anyway
    for (auto& task : batch) {
      static_cast<Pending*>(task.get())->Answer(absl::UnavailableError("model was unloaded"));
    }
    return;
  }
  try {
    PendingBatch pending;
    pending.reserve(batch.size());
    for (auto& task : batch) pending.emplace_back(static_cast<Pending*>(task.release()));
    self->RecordQueueDepth();
    pool_.Schedule([this, self, pending = std::move(pending)](int threads) mutable {
      const absl::Time answers_began = RunBatch(self, std::move(pending), threads);
      self->batcher()->BatchDone(answers_began);
    });
  } catch (const std::exception& e) {
    // The requests were destroyed with the containers, and so answered; the
    // batch will not run, so its slot is free again.
    GEMMSERVE_LOG(ERROR) << "handing a batch of model '" << self->metadata().name
                         << "' to the workers failed: " << e.what();
    self->batcher()->BatchDone();
  }
}

absl::Time InferenceEngine::RunBatch(const std::shared_ptr<ServedModel>& served, PendingBatch batch,
                                     int threads) {
  try {
    return RunBatchOrThrow(*served, batch, threads);
  } catch (const std::exception& e) {
    const bool memory = dynamic_cast<const std::bad_alloc*>(&e) != nullptr ||
                        dynamic_cast<const std::length_error*>(&e) != nullptr;
    GEMMSERVE_LOG(ERROR) << "a batch of model '" << served->metadata().name
                         << "' failed: " << e.what();
    const absl::Status status = memory
                                    ? AllocationFailure("the batch")
                                    : absl::InternalError("the batch failed; see the server log");
    const absl::Time answers_began = clock_->Now();
    for (auto& p : batch) {
      if (p && !p->answered()) {
        served->RecordFailure(clock_->Now() - p->arrival());
        p->Answer(status);
      }
    }
    return answers_began;
  }
}

absl::Time InferenceEngine::RunBatchOrThrow(ServedModel& served, PendingBatch& batch, int threads) {
  const absl::Time start = clock_->Now();
  // Requests whose client has gone, or whose deadline passed, are not computed.
  std::vector<Pending*> live;
  for (auto& p : batch) {
    absl::Status drop;
    if (p->IsCancelled()) {
      drop = absl::CancelledError("request cancelled before compute");
    } else if (start >= p->request().deadline) {
      drop = absl::DeadlineExceededError("deadline passed before compute; not computed");
    }
    if (drop.ok()) {
      live.push_back(p.get());
    } else {
      served.RecordFailure(start - p->arrival());
      p->Answer(std::move(drop));
    }
  }
  if (live.empty()) return start;
  std::vector<PreparedInference*> prepared;
  for (Pending* p : live) prepared.push_back(p->prepared());
  std::vector<InferOutputs> results = served.model().RunBatch(prepared, threads);
  if (results.size() != live.size()) {
    results.clear();
    results.resize(live.size());
    for (InferOutputs& r : results) r = absl::InternalError("the model answered a batch wrongly");
  }
  const absl::Time end = clock_->Now();
  int64_t rows = 0;
  int64_t weight_bytes = 0;
  for (Pending* p : live) {
    rows = SaturatingAdd(rows, p->rows());
    weight_bytes = SaturatingAdd(weight_bytes, p->prepared()->weight_bytes_read());
  }
  served.RecordBatch(static_cast<int64_t>(live.size()), rows, weight_bytes, start, end);
  const ModelMetadata& metadata = served.metadata();
  for (size_t i = 0; i < live.size(); ++i) {
    Pending& p = *live[i];
    InferOutputs& outputs = results[i];
    served.RecordAnswer(p.arrival(), start, end, outputs.ok(), p.rows(), p.type_,
                        p.prepared()->flops(), p.input_bytes_, p.prepared()->output_bytes());
    if (!outputs.ok()) {
      p.Answer(outputs.status());
      continue;
    }
    InferResult result{metadata.name, metadata.versions.front(), {}};
    result.queued = p.arrival();
    result.compute_start = start;
    result.compute_end = end;
    result.batch_rows = rows;
    const auto& wanted = p.request().requested_outputs;
    for (NamedTensor& t : *outputs) {
      if (wanted.empty() || std::find(wanted.begin(), wanted.end(), t.name) != wanted.end()) {
        result.outputs.push_back(std::move(t));
      }
    }
    p.Answer(std::move(result));
  }
  return end;
}

}  // namespace gemmserve
