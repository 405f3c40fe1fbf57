#include "server/serving/serving.h"

#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/allocation.h"
#include "server/common/status_macros.h"
#include "server/core/overload.h"
#include "server/models/builtin_models.h"

namespace gemmserve {
namespace {

absl::Status Validate(const ServingOptions& o) {
  const EngineOptions& e = o.engine;
  if (e.compute_threads < 0)
    return absl::InvalidArgumentError("--compute_threads must not be negative");
  if (e.max_output_bytes < 0) {
    return absl::InvalidArgumentError("--max_output_bytes must not be negative");
  }
  if (e.max_message_bytes <= 0) {
    return absl::InvalidArgumentError("--max_message_bytes must be positive");
  }
  if (e.max_inflight_bytes <= 0) {
    return absl::InvalidArgumentError("--max_inflight_bytes must be positive");
  }
  if (o.metrics_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port ", o.metrics_port, " is not a port number"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string HostForPort(const std::string& host) {
  return host.find(':') != std::string::npos && host.front() != '[' ? absl::StrCat("[", host, "]")
                                                                    : host;
}

BatchingOptions DefaultBuiltinBatching() {
  BatchingOptions b;
  b.max_queue_delay = absl::Microseconds(100);
  b.max_batch_rows = 4096;
  b.max_queue_size = 1024;
  return b;
}

// One inference call between Infer and its answer: what recording the answer
// needs, shared by the engine's callback and Infer's own refusal path.
struct Serving::Call {
  Serving* serving;
  std::shared_ptr<ModelMetrics> model_metrics;
  absl::Time arrival;
  InferDone done;

  void Finish(absl::StatusOr<InferResult> result) {
    const absl::Status status = std::move(done)(std::move(result));
    serving->metrics_->AddInflight(-1);
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

absl::StatusOr<std::unique_ptr<Serving>> Serving::Start(ServingOptions options) {
  GEMMSERVE_RETURN_IF_ERROR(Validate(options));
  std::unique_ptr<Serving> s(new Serving);
  s->metrics_host_ = HostForPort(options.host);
  options.metrics.version = kServerVersion;
  GEMMSERVE_ASSIGN_OR_RETURN(
      s->metrics_,
      Metrics::Start(
          options.metrics_port < 0 ? "" : absl::StrCat(s->metrics_host_, ":", options.metrics_port),
          options.metrics));
  if (!options.auth_token_file.empty()) {
    GEMMSERVE_ASSIGN_OR_RETURN(s->auth_, TokenAuthenticator::FromFile(options.auth_token_file));
  }
  options.engine.metrics = s->metrics_.get();
  s->engine_ = std::make_unique<InferenceEngine>(options.engine);
  // The built-in models merge concurrent requests' problem lists into one
  // kernel call (README: built-in models).
  s->engine_->Install(MakeMatMulModel(), options.builtin_batching);
  s->engine_->Install(MakeGroupedMatMulModel(), options.builtin_batching);
  s->repository_ = std::make_unique<ModelRepository>(
      options.model_repository, s->engine_.get(),
      std::vector<std::string>{kGroupedMatMulModelName, kMatMulModelName});
  s->repository_->LoadAll();
  return s;
}

Serving::~Serving() = default;

std::string Serving::metrics_address() const {
  if (metrics_->port() == 0) return "";
  return absl::StrCat(metrics_host_, ":", metrics_->port());
}

absl::Status Serving::Authenticate(std::optional<absl::string_view> authorization) const {
  return auth_ == nullptr ? absl::OkStatus() : auth_->Check(authorization);
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
    std::move(done)(absl::UnavailableError("server is shutting down; retry on another replica"))
        .IgnoreError();
    return;
  }
  metrics_->AddInflight(1);
  *state = Call{this, engine_->MetricsFor(call.model_name), absl::Now(), std::move(done)};
  auto finish = [state](absl::StatusOr<InferResult> result) { state->Finish(std::move(result)); };
  // An error here means the engine never took `finish` (Submit's contract).
  absl::Status refused = Authenticate(call.authorization);
  if (refused.ok()) refused = call.request.status();
  if (refused.ok()) {
    refused = CatchAllocationFailure("the request", [&] {
      return engine_->Submit(*std::move(call.request), std::move(call.is_cancelled), finish);
    });
  }
  if (!refused.ok()) finish(refused);
}

void Serving::StartDraining() {
  absl::MutexLock lock(&drain_mu_);
  draining_ = true;
}

bool Serving::draining() const {
  absl::MutexLock lock(&drain_mu_);
  return draining_;
}

bool Serving::WaitUntilIdle(absl::Time deadline) {
  absl::MutexLock lock(&drain_mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(drain_mu_) { return inflight_ == 0; };
  return drain_mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

}  // namespace gemmserve
