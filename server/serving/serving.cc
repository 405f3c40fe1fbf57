#include "server/serving/serving.h"

#include <algorithm>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/allocation.h"
#include "server/common/client_text.h"
#include "server/common/logging.h"
#include "server/common/status_macros.h"
#include "server/core/overload.h"

namespace gemmserve {

// One inference call between Infer and its answer: what recording the answer
// needs, shared by the engine's callback and Infer's own refusal path.
struct Serving::Call {
  Serving* serving;
  std::shared_ptr<ModelMetrics> model_metrics;
  absl::Time arrival;
  InferDone done;
  // What the front end reserved for the message (InferCall::reserved), and
  // client shared memory: the regions the call holds until it is answered
  // (so none is unregistered under it), the inputs read out of them (counted
  // against --max_inflight_bytes before they are copied, added to
  // `reservation`, which the engine takes over once it accepts the call), and
  // the outputs to write there, each with the index of its lease.
  std::vector<SharedMemoryLease> leases{};
  InferenceEngine::Reservation reservation{};
  std::vector<std::unique_ptr<char[]>> shm_inputs{};
  std::vector<std::pair<OutputShmView, size_t>> shm_outputs{};
  std::unique_ptr<RequestTrace> trace{};  // traced requests only

  // Writes the outputs that go to shared memory; an error replaces the result.
  absl::Status WriteShmOutputs(InferResult& result) {
    for (const auto& output_and_lease : shm_outputs) {
      // Named, not a structured binding: clang 14 cannot capture those.
      const OutputShmView& target = output_and_lease.first;
      const size_t lease = output_and_lease.second;
      auto it = std::find_if(result.outputs.begin(), result.outputs.end(),
                             [&](const NamedTensor& t) { return t.name == target.name; });
      if (it == result.outputs.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("output '", ClientText(target.name),
                         "' has shared memory parameters but the model ", "did not produce it"));
      }
      const auto bytes = it->tensor.bytes();
      if (bytes.size() > target.ref.byte_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("output '", ClientText(target.name), "' is ", bytes.size(),
                         " bytes, over its shared_memory_byte_size of ", target.ref.byte_size));
      }
      GEMMSERVE_RETURN_IF_ERROR(leases[lease].Write(
          target.ref.offset,
          absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())));
      it->shm = SharedMemoryWritten{std::string(target.ref.region), target.ref.offset,
                                    static_cast<uint64_t>(bytes.size())};
    }
    return absl::OkStatus();
  }

  // The trace's stamps from the engine's result; the rest at the answer.
  void StampTrace(const absl::StatusOr<InferResult>& result) {
    trace->computed = result.ok() && result->compute_start != absl::InfinitePast();
    if (trace->computed) {
      trace->model_name = result->model_name;
      trace->model_version = result->model_version;
      trace->queue_start = result->queued;
      trace->compute_start = result->compute_start;
      trace->compute_end = result->compute_end;
      trace->batch_rows = result->batch_rows;
    }
  }

  void Finish(absl::StatusOr<InferResult> result) {
    if (result.ok() && !shm_outputs.empty()) {
      if (absl::Status s = WriteShmOutputs(*result); !s.ok()) result = s;
    }
    // The regions are read (inputs, copied out at admission) and written
    // (outputs, just above): released before the answer goes, so a client
    // that unregisters a region once it has its answer finds it free.
    leases.clear();
    // Answered from here on (the gauge's "accepted and not yet answered"): a
    // stream may read its next request as soon as this answer is handed over.
    serving->metrics_->AddInflight(-1);
    if (trace) StampTrace(result);
    const absl::Status status = std::move(done)(std::move(result));
    if (trace) {
      trace->request_end = absl::Now();
      serving->tracer_->Record(*trace);
    }
    shm_inputs.clear();
    reservation = InferenceEngine::Reservation();
    if (model_metrics) {
      model_metrics->RecordResponse(status.code(), absl::Now() - arrival);
      RejectReason reason;
      if (RejectReasonOf(status.code(), &reason)) {
        model_metrics->RecordRejected(reason);
      } else if (IsQueueFull(status)) {
        model_metrics->RecordRejected(RejectReason::kQueueFull);
      }
    }
    absl::MutexLock lock(&serving->drain_mu_);
    --serving->inflight_;
  }
};

Serving::Serving(ServingParts parts)
    : metrics_(std::move(parts.metrics)),
      engine_(std::move(parts.engine)),
      repository_(std::move(parts.repository)),
      auth_(std::move(parts.auth)),
      shm_(std::move(parts.shm)),
      tracer_(std::move(parts.tracer)),
      max_message_bytes_(engine_->options().max_message_bytes),
      allow_log_file_setting_(parts.allow_log_file_setting) {}

Serving::~Serving() {
  // Found by TSan (http_test): a test that destroyed Serving once it had its
  // answer freed the mutex Call::Finish was about to take.
  WaitUntilIdle(absl::InfiniteFuture());
}

std::string Serving::ShmOwner(std::optional<absl::string_view> authorization) const {
  return auth_ == nullptr ? std::string() : std::string(authorization.value_or(""));
}

absl::Status Serving::ResolveSharedMemory(const InferCall& call, InferRequestView& request,
                                          Call& state) {
  bool any = !request.output_shm.empty();
  uint64_t input_bytes = 0;
  for (const InputTensorView& input : request.inputs) {
    if (!input.shm) continue;
    any = true;
    input_bytes = input.shm->byte_size > std::numeric_limits<uint64_t>::max() - input_bytes
                      ? std::numeric_limits<uint64_t>::max()
                      : input_bytes + input.shm->byte_size;
  }
  if (!any) return absl::OkStatus();
  // The inputs are copied out of the regions before the engine sees the
  // request: they are bounded as a message on the socket would be, and held
  // against --max_inflight_bytes before the copy is allocated, so that many
  // callers at once cannot make the server allocate more than it accepts.
  if (input_bytes > static_cast<uint64_t>(max_message_bytes_)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the request's shared memory inputs are ", input_bytes,
                     " bytes, over the message limit of ", max_message_bytes_,
                     " (raise it with --max_message_bytes)"));
  }
  const std::string owner = ShmOwner(call.authorization);
  // The regions first (a request naming none of the caller's is refused as
  // such, also when the server is full), then the room, then the copies.
  const size_t first_input_lease = state.leases.size();
  for (const InputTensorView& input : request.inputs) {
    if (!input.shm) continue;
    GEMMSERVE_ASSIGN_OR_RETURN(SharedMemoryLease lease, shm_->Acquire(owner, input.shm->region));
    state.leases.push_back(std::move(lease));
  }
  GEMMSERVE_RETURN_IF_ERROR(engine_->Grow(&state.reservation, static_cast<int64_t>(input_bytes),
                                          "the request's shared memory inputs"));
  size_t lease = first_input_lease;
  for (InputTensorView& input : request.inputs) {
    if (!input.shm) continue;
    std::unique_ptr<char[]> bytes(new char[std::max<uint64_t>(input.shm->byte_size, 1)]);
    absl::Status read = state.leases[lease++].Read(input.shm->offset, input.shm->byte_size,
                                                   bytes.get());
    if (!read.ok()) {
      return absl::Status(read.code(),
                          absl::StrCat("input '", ClientText(input.name), "': ", read.message()));
    }
    input.contents = ContentsKind::kRaw;
    input.data = bytes.get();
    input.count = static_cast<int64_t>(input.shm->byte_size);
    request.message_bytes += input.count;
    state.shm_inputs.push_back(std::move(bytes));
  }
  for (const OutputShmView& output : request.output_shm) {
    GEMMSERVE_ASSIGN_OR_RETURN(SharedMemoryLease lease, shm_->Acquire(owner, output.ref.region));
    if (output.ref.offset > lease.byte_size() ||
        output.ref.byte_size > lease.byte_size() - output.ref.offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output '", ClientText(output.name), "': shared memory region '",
          ClientText(output.ref.region), "' holds ", lease.byte_size(), " bytes; offset ",
          output.ref.offset, " and byte size ", output.ref.byte_size, " pass its end"));
    }
    state.shm_outputs.emplace_back(output, state.leases.size());
    state.leases.push_back(std::move(lease));
  }
  return absl::OkStatus();
}

std::vector<std::string> Serving::Extensions() const {
  std::vector<std::string> extensions = {"binary_tensor_data", "model_repository", "statistics",
                                         "model_configuration", "logging", "trace"};
  if (shm_->enabled()) extensions.push_back("system_shared_memory");
  return extensions;
}

absl::Status Serving::Authenticate(std::optional<absl::string_view> authorization) const {
  return auth_ == nullptr ? absl::OkStatus() : auth_->Check(authorization);
}

absl::Status Serving::ShuttingDown() {
  return absl::UnavailableError("server is shutting down; retry on another replica");
}

absl::Status Serving::AdmitStream(std::optional<absl::string_view> authorization) const {
  GEMMSERVE_RETURN_IF_ERROR(Authenticate(authorization));
  return draining() ? ShuttingDown() : absl::OkStatus();
}

void Serving::Infer(InferCall call, InferDone done) {
  std::shared_ptr<Call> state;
  try {
    state = std::make_shared<Call>();
  } catch (const std::bad_alloc&) {
    std::move(done)(AllocationFailure("the call")).IgnoreError();  // refused: not counted
    return;
  }
  bool draining;
  {
    absl::MutexLock lock(&drain_mu_);
    draining = draining_;
    if (!draining) ++inflight_;
  }
  if (draining) {
    // Refused at the door: not in flight, not counted.
    std::move(done)(ShuttingDown()).IgnoreError();
    return;
  }
  metrics_->AddInflight(1);
  *state = Call{this, engine_->MetricsFor(call.model_name), absl::Now(), std::move(done)};
  if (const uint64_t id = tracer_->Sample(call.model_name); id != 0) {
    state->trace = std::make_unique<RequestTrace>();
    state->trace->id = id;
    state->trace->model_name = std::string(call.model_name);
    state->trace->request_start = state->arrival;
    if (call.traceparent && Tracer::ValidTraceparent(*call.traceparent)) {
      state->trace->traceparent = std::string(*call.traceparent);
    }
  }
  auto finish = [state](absl::StatusOr<InferResult> result) { state->Finish(std::move(result)); };
  state->reservation = std::move(call.reserved);  // the front end's, for the message
  // An error here means the engine never took `finish` (Submit's contract).
  absl::Status refused = Authenticate(call.authorization);
  if (refused.ok()) refused = call.request.status();
  if (refused.ok()) {
    refused = CatchAllocationFailure("the shared memory inputs", [&] {
      return ResolveSharedMemory(call, *call.request, *state);
    });
  }
  if (refused.ok()) {
    refused = CatchAllocationFailure("the request", [&] {
      return engine_->Submit(*std::move(call.request), std::move(call.is_cancelled), finish,
                             &state->reservation);
    });
  }
  if (!refused.ok()) finish(refused);
}

absl::Status Serving::TraceSetting(std::optional<absl::string_view> authorization,
                                  const inference::TraceSettingRequest& request,
                                  inference::TraceSettingResponse* response) {
  GEMMSERVE_RETURN_IF_ERROR(Authenticate(authorization));
  const bool exists =
      !request.model_name().empty() && engine_->FindModel(request.model_name(), "").ok();
  GEMMSERVE_RETURN_IF_ERROR(tracer_->Update(request, exists, response));
  if (!request.settings().empty()) {
    std::vector<std::string> changed;
    for (const auto& [key, value] : request.settings()) changed.push_back(key);
    std::sort(changed.begin(), changed.end());
    GEMMSERVE_LOG(WARNING) << "trace settings"
                           << (request.model_name().empty()
                                   ? std::string()
                                   : absl::StrCat(" of model '", ClientText(request.model_name()),
                                                  "'"))
                           << " set by a client: " << absl::StrJoin(changed, ", ");
  }
  return absl::OkStatus();
}

void Serving::StartDraining() {
  {
    absl::MutexLock lock(&drain_mu_);
    draining_ = true;
  }
  // A load's warmup could hold the shutdown for minutes: loads stop now.
  repository_->StopLoads();
}

bool Serving::draining() const {
  absl::MutexLock lock(&drain_mu_);
  return draining_;
}

bool Serving::WaitUntilWritten(absl::Time deadline) {
  // No request is accepted any more: the count only falls.
  while (engine_->inflight_bytes() > 0) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

bool Serving::WaitUntilIdle(absl::Time deadline) {
  absl::MutexLock lock(&drain_mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(drain_mu_) { return inflight_ == 0; };
  return drain_mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

}  // namespace gemmserve
