#include "server/core/inference_engine.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"
#include "server/core/input_binding.h"
#include "server/core/overload.h"

namespace gemmserve {
namespace {

// Room for the response's envelope (model name and version, output names,
// datatypes and shapes, field tags) beside the tensor bytes and the echoed id.
constexpr int64_t kResponseEnvelopeBytes = 1024;

absl::Status CheckOutputLimits(const PreparedInference& prepared, int64_t id_bytes,
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
  const int64_t response_bytes = bytes + id_bytes + kResponseEnvelopeBytes;
  if (response_bytes > options.max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "output ", describe(), " would be ", bytes, " bytes, making a response of about ",
        response_bytes, " bytes with the request id, over the message limit of ",
        options.max_message_bytes, " (raise it with --max_message_bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace

void ServedModel::Stat::Add(absl::Duration d, uint64_t n) {
  count.fetch_add(n, std::memory_order_relaxed);
  ns.fetch_add(static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Nanoseconds(d))) * n,
               std::memory_order_relaxed);
}

ServedModel::ServedModel(std::unique_ptr<Model> model, std::optional<BatchingOptions> batching)
    : model_(std::move(model)), batching_(batching) {}

ModelStatistics ServedModel::statistics() const {
  ModelStatistics s;
  s.name = model_->metadata().name;
  s.version = model_->metadata().versions.front();
  s.last_inference_ms = last_inference_ms_.load();
  s.inference_count = inference_count_.load();
  s.execution_count = execution_count_.load();
  s.success = success_.Get();
  s.fail = fail_.Get();
  s.queue = queue_.Get();
  s.compute_infer = compute_infer_.Get();
  return s;
}

// One accepted request: everything needed to compute and answer it.
class InferenceEngine::Pending final : public BatchTask {
 public:
  Pending(ServedModel* served, Clock* clock, std::unique_ptr<InferRequestView> request,
          std::unique_ptr<PreparedInference> prepared, std::function<bool()> is_cancelled,
          DoneCallback done, absl::Time arrival, DataType type, int64_t input_bytes,
          std::atomic<int64_t>* inflight_bytes, int64_t cost)
      : type_(type),
        input_bytes_(input_bytes),
        served_(served),
        clock_(clock),
        request_(std::move(request)),
        prepared_(std::move(prepared)),
        is_cancelled_(std::move(is_cancelled)),
        done_(std::move(done)),
        arrival_(arrival),
        inflight_bytes_(inflight_bytes),
        cost_(cost) {}
  // A task dropped unanswered (the batcher refused it) releases its bytes too.
  ~Pending() override { Release(); }

  int64_t rows() const override { return prepared_->rows(); }
  bool IsCancelled() const override { return is_cancelled_ && is_cancelled_(); }
  // From the batcher: timed out or cancelled while queued. (A model's queue
  // is emptied before the model can go, so served_ is alive.)
  void Reject(absl::Status status) override {
    served_->fail_.Add(clock_->Now() - arrival_);
    Answer(std::move(status));
  }

  void Answer(absl::StatusOr<InferResult> result) {
    Release();
    if (done_) std::move(done_)(std::move(result));
    done_ = nullptr;
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
  std::atomic<int64_t>* inflight_bytes_;
  int64_t cost_;

  void Release() {
    if (cost_ > 0) inflight_bytes_->fetch_sub(cost_, std::memory_order_relaxed);
    cost_ = 0;
  }
};

InferenceEngine::InferenceEngine(EngineOptions options, Clock* clock)
    : options_(options), clock_(clock), pool_(options.compute_threads) {}

InferenceEngine::~InferenceEngine() {
  // Accepted work completes: every queue is cut now, and the pool (destroyed
  // next) runs what it holds before its threads join.
  std::vector<std::shared_ptr<ServedModel>> served;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [name, model] : models_) served.push_back(model);
  }
  for (auto& model : served) {
    if (model->batcher_) {
      model->batcher_->Close();
      model->batcher_->Poll();
    }
  }
}

void InferenceEngine::Install(std::unique_ptr<Model> model,
                              std::optional<BatchingOptions> batching) {
  auto served = std::make_shared<ServedModel>(std::move(model), batching);
  if (options_.metrics) served->metrics_ = options_.metrics->ForModel(served->metadata().name);
  if (batching) {
    std::weak_ptr<ServedModel> weak = served;
    served->batcher_ = std::make_shared<DynamicBatcher>(
        *batching, clock_,
        [this, weak](DynamicBatcher::Batch batch) {
          std::shared_ptr<ServedModel> self = weak.lock();
          std::vector<std::unique_ptr<Pending>> pending;
          pending.reserve(batch.size());
          for (auto& task : batch) pending.emplace_back(static_cast<Pending*>(task.release()));
          if (!self) {  // cannot happen while a batcher of it runs; answer anyway
            for (auto& p : pending) p->Answer(absl::UnavailableError("model was unloaded"));
            return;
          }
          if (self->metrics_) self->metrics_->SetQueueDepth(self->batcher_->queued());
          pool_.Schedule([this, self, pending = std::move(pending)](int threads) mutable {
            RunBatch(self, std::move(pending), threads);
            self->batcher_->BatchDone();
          });
        },
        [this] { timer_.Wake(); });
    timer_.Register(served->batcher_);
  }
  std::shared_ptr<ServedModel> old;
  {
    absl::MutexLock lock(&mu_);
    unavailable_.erase(served->metadata().name);
    auto& slot = models_[served->metadata().name];
    old = std::move(slot);
    slot = std::move(served);
  }
  if (old && old->batcher_) {
    old->batcher_->Close();  // its queue still runs, on the old weights
    old->batcher_->Poll();
  }
}

void InferenceEngine::MarkUnavailable(absl::string_view name, absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  if (models_.find(name) == models_.end()) unavailable_[std::string(name)] = std::string(reason);
}

absl::Status InferenceEngine::Remove(absl::string_view name, absl::string_view reason) {
  std::shared_ptr<ServedModel> old;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(name);
    if (it == models_.end()) {
      return absl::NotFoundError(absl::StrCat("model '", ClientText(name), "' is not loaded"));
    }
    old = std::move(it->second);
    models_.erase(it);
    unavailable_[std::string(name)] = std::string(reason);
  }
  if (old->batcher_) {
    old->batcher_->Close();
    old->batcher_->Poll();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ServedModel>> InferenceEngine::Find(
    absl::string_view name, absl::string_view version) const {
  if (name.empty()) return absl::InvalidArgumentError("model name is empty");
  std::shared_ptr<ServedModel> served;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(name);
    if (it == models_.end()) {
      auto gone = unavailable_.find(name);
      if (gone != unavailable_.end()) {
        return absl::UnavailableError(absl::StrCat("model '", gone->first, "' is not available (",
                                                   gone->second, "); retry later"));
      }
      return absl::NotFoundError(absl::StrCat("unknown model '", ClientText(name), "'"));
    }
    served = it->second;
  }
  const std::vector<std::string>& versions = served->metadata().versions;
  if (!version.empty() && std::find(versions.begin(), versions.end(), version) == versions.end()) {
    return absl::NotFoundError(absl::StrCat("model '", served->metadata().name,
                                            "' has no version '", ClientText(version), "'"));
  }
  return served;
}

absl::StatusOr<std::shared_ptr<const ServedModel>> InferenceEngine::FindModel(
    absl::string_view name, absl::string_view version) const {
  GEMMSERVE_ASSIGN_OR_RETURN(std::shared_ptr<ServedModel> served, Find(name, version));
  return std::shared_ptr<const ServedModel>(std::move(served));
}

ModelMetrics* InferenceEngine::MetricsFor(absl::string_view model_name) const {
  if (options_.metrics == nullptr) return nullptr;
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model_name);
  return it != models_.end() ? it->second->metrics_ : options_.metrics->Unknown();
}

std::vector<std::shared_ptr<const ServedModel>> InferenceEngine::models() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<const ServedModel>> out;
  for (const auto& [name, served] : models_) out.push_back(served);
  return out;
}

absl::Status InferenceEngine::Submit(InferRequestView request_view,
                                     std::function<bool()> is_cancelled, DoneCallback done) {
  const absl::Time arrival = clock_->Now();
  // On the heap, so the bound inputs' pointers into it survive the moves below.
  auto request = std::make_unique<InferRequestView>(std::move(request_view));
  GEMMSERVE_ASSIGN_OR_RETURN(std::shared_ptr<ServedModel> served,
                             Find(request->model_name, request->model_version));
  const ModelMetadata& metadata = served->metadata();
  for (absl::string_view wanted : request->requested_outputs) {
    bool known = std::any_of(metadata.outputs.begin(), metadata.outputs.end(),
                             [&](const TensorSpec& s) { return s.name == wanted; });
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat("unknown output '", ClientText(wanted),
                                                     "' requested from model '", metadata.name,
                                                     "'"));
    }
  }
  GEMMSERVE_ASSIGN_OR_RETURN(BoundInputs bound, BindInputs(metadata, *request));
  GEMMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<PreparedInference> prepared,
                             served->model().Prepare(bound));
  GEMMSERVE_RETURN_IF_ERROR(
      CheckOutputLimits(*prepared, static_cast<int64_t>(request->id.size()), options_));
  int64_t input_bytes = 0;
  for (const BoundInput& b : bound) input_bytes += b.byte_size;
  const DataType type = bound.empty() ? DataType::kFP32 : bound.front().type;
  // Inputs are copied into aligned tensors and outputs allocated: this much
  // memory is held until the request is answered.
  const int64_t cost = input_bytes + prepared->output_bytes();
  const int64_t held = inflight_bytes_.fetch_add(cost, std::memory_order_relaxed);
  if (held + cost > options_.max_inflight_bytes && held > 0) {
    inflight_bytes_.fetch_sub(cost, std::memory_order_relaxed);
    return QueueFullError(absl::StrCat(
        "queue full: the server holds ", held, " bytes of accepted requests and this one needs ",
        cost, " more, over --max_inflight_bytes=", options_.max_inflight_bytes,
        "; retry later"));
  }

  const uint64_t priority = request->priority;
  const absl::Duration timeout = absl::Microseconds(static_cast<int64_t>(
      std::min<uint64_t>(request->timeout_us, uint64_t{1} << 62)));
  const absl::Time deadline = request->deadline;
  const bool tiny = prepared->flops() <= options_.inline_max_flops;
  auto pending = std::make_unique<Pending>(served.get(), clock_, std::move(request),
                                           std::move(prepared), std::move(is_cancelled),
                                           std::move(done), arrival, type, input_bytes,
                                           &inflight_bytes_, cost);
  if (tiny && (!served->batcher_ || served->batcher_->TryBeginInline())) {
    std::vector<std::unique_ptr<Pending>> batch;
    batch.push_back(std::move(pending));
    RunBatch(served, std::move(batch), /*threads=*/1);
    if (served->batcher_) served->batcher_->BatchDone();
    return absl::OkStatus();
  }
  if (served->batcher_) {
    absl::Status queued = served->batcher_->Enqueue(std::move(pending), priority, deadline, timeout);
    if (served->metrics_) served->metrics_->SetQueueDepth(served->batcher_->queued());
    return queued;
  }
  pool_.Schedule([this, served, pending = std::move(pending)](int threads) mutable {
    std::vector<std::unique_ptr<Pending>> batch;
    batch.push_back(std::move(pending));
    RunBatch(served, std::move(batch), threads);
  });
  return absl::OkStatus();
}

void InferenceEngine::RunBatch(const std::shared_ptr<ServedModel>& served,
                               std::vector<std::unique_ptr<Pending>> batch, int threads) {
  const absl::Time start = clock_->Now();
  ModelMetrics* const metrics = served->metrics_;
  // Requests whose client has gone, or whose deadline passed, are not computed.
  std::vector<std::unique_ptr<Pending>> live;
  for (auto& p : batch) {
    absl::Status drop;
    if (p->IsCancelled()) {
      drop = absl::CancelledError("request cancelled before compute");
    } else if (start >= p->request().deadline) {
      drop = absl::DeadlineExceededError("deadline passed before compute; not computed");
    }
    if (drop.ok()) {
      live.push_back(std::move(p));
    } else {
      served->fail_.Add(start - p->arrival());
      p->Answer(std::move(drop));
    }
  }
  if (live.empty()) return;
  std::vector<PreparedInference*> prepared;
  for (auto& p : live) prepared.push_back(p->prepared());
  std::vector<InferOutputs> results = served->model().RunBatch(prepared, threads);
  const absl::Time end = clock_->Now();
  if (metrics) {
    int64_t rows = 0;
    for (auto& p : live) rows += p->rows();
    metrics->RecordBatch(static_cast<int64_t>(live.size()), rows, end - start);
    if (served->batcher_) metrics->SetQueueDepth(served->batcher_->queued());
  }

  served->execution_count_.fetch_add(1, std::memory_order_relaxed);
  served->last_inference_ms_.store(static_cast<uint64_t>(absl::ToUnixMillis(end)));
  const ModelMetadata& metadata = served->metadata();
  for (size_t i = 0; i < live.size(); ++i) {
    Pending& p = *live[i];
    served->queue_.Add(start - p.arrival());
    if (metrics) metrics->RecordQueue(start - p.arrival());
    served->compute_infer_.Add(end - start);
    InferOutputs& outputs = results[i];
    if (!outputs.ok()) {
      served->fail_.Add(end - p.arrival());
      p.Answer(outputs.status());
      continue;
    }
    served->inference_count_.fetch_add(static_cast<uint64_t>(p.rows()),
                                       std::memory_order_relaxed);
    if (metrics) {
      metrics->RecordFlops(p.type_, p.prepared()->flops());
      metrics->RecordBytes(p.input_bytes_, p.prepared()->output_bytes());
    }
    served->success_.Add(end - p.arrival());
    InferResult result{metadata.name, metadata.versions.front(), {}};
    const auto& wanted = p.request().requested_outputs;
    for (NamedTensor& t : *outputs) {
      if (wanted.empty() || std::find(wanted.begin(), wanted.end(), t.name) != wanted.end()) {
        result.outputs.push_back(std::move(t));
      }
    }
    p.Answer(std::move(result));
  }
}

}  // namespace gemmserve
