#include "server/service/stream_infer.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/common/public_status.h"
#include "server/service/infer_codec.h"
#include "server/service/raw_messages.h"
#include "server/service/status_util.h"

namespace gemmserve {

// One stream. Reads, answers and writes meet under `mu_`; gRPC operations
// (StartRead, StartWrite, Finish) are decided under it and started after it
// is released. Only one read and one write are ever outstanding, and Finish
// is called exactly once: when nothing of ours is in flight and no thread is
// between deciding an operation and starting it (`starting_`). gRPC holds
// one reference, dropped in OnDone; each Serving call holds one until its
// answer is queued, so the reactor outlives every thread that touches it.
class StreamInferReactor final : public StreamReactorBase {
 public:
  StreamInferReactor(Serving* serving, StreamRegistry* registry,
                     grpc::CallbackServerContext* context, int max_inflight)
      : serving_(serving), registry_(registry), context_(context), max_inflight_(max_inflight) {}

  // Authenticates from the stream's metadata, then starts reading.
  void Begin() {
    std::optional<absl::string_view> authorization = MetadataValue(*context_, "authorization");
    if (authorization) authorization_ = std::string(*authorization);
    has_authorization_ = authorization.has_value();
    traceparent_ = MetadataValue(*context_, "traceparent");
    absl::Status refused = serving_->AdmitStream(authorization);
    // Or the front end's own drain (StreamRegistry::DrainAll) has begun.
    if (refused.ok() && registry_->draining()) refused = Serving::ShuttingDown();
    if (refused.ok()) return Step();
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;  // drained already
      finished_ = true;
    }
    Finish(ToGrpcStatus(refused));
  }

  // StreamRegistry::DrainAll: reads no more. When nothing was in flight the
  // stream is ended here, by the caller, with the returned status.
  std::optional<grpc::Status> MarkDraining() {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    return TakeFinishLocked();
  }

  // A message read is parsed here, outside the lock (only one read is ever
  // outstanding, so `reading_` is this thread's). One that does not parse
  // ends the reading: the requests accepted before it are answered, then the
  // stream ends with INVALID_ARGUMENT naming it (TakeFinishLocked).
  void OnReadDone(bool ok) override {
    std::unique_ptr<inference::ModelInferRequest> request;
    bool parsed = false;
    if (ok) {
      request = std::make_unique<inference::ModelInferRequest>();
      parsed = ParseRawMessage(reading_, *request);
      reading_.Clear();
    }
    {
      absl::MutexLock lock(&mu_);
      read_pending_ = false;
      if (!ok) {
        reads_done_ = true;  // half-closed by the client, or cancelled
      } else if (!parsed) {
        reads_done_ = true;
        unparsed_message_ = read_count_ + 1;
        request.reset();
      } else {
        ++read_count_;
        ++inflight_;
      }
    }
    if (request != nullptr) Submit(std::move(request));
    Step();
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      write_pending_ = false;
      writes_.pop_front();  // and with it the answer's held bytes
      --inflight_;
      if (!ok) cancelled_ = true;  // the stream is broken: nothing more reaches the client
    }
    Step();
  }

  void OnCancel() override {
    cancelled_flag_.store(true, std::memory_order_relaxed);
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
    }
    Step();
  }

  void OnDone() override {
    registry_->Remove(this);
    Unref();
  }

 private:
  struct Answer {
    std::unique_ptr<inference::ModelInferRequest> request;
    grpc::ByteBuffer response;  // a serialized ModelStreamInferResponse
    Reservation held;           // the answer's bytes, counted until written
  };

  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  void Submit(std::unique_ptr<inference::ModelInferRequest> request) {
    Serving::InferCall call;
    call.model_name = request->model_name();
    if (has_authorization_) call.authorization = authorization_;
    call.traceparent = traceparent_;  // the stream's, for each of its requests
    call.request = DecodeInferRequest(*request);
    call.is_cancelled = [this] { return cancelled_flag_.load(std::memory_order_relaxed); };
    auto answer = std::make_unique<Answer>();
    answer->request = std::move(request);
    Answer* raw = answer.release();  // owned by the callback until queued
    refs_.fetch_add(1, std::memory_order_relaxed);
    serving_->Infer(std::move(call), [this, raw](absl::StatusOr<InferResult> result) {
      std::unique_ptr<Answer> answer(raw);
      const absl::Status status = Encode(std::move(result), *answer);
      Step(std::move(answer));
      Unref();
      return status;
    });
  }

  // The answer to `answer->request`: its response, or its error with its
  // id, serialized here (on the worker) so that the writer only sends it.
  static absl::Status Encode(absl::StatusOr<InferResult> result, Answer& answer) {
    const std::string& id = answer.request->id();
    inference::ModelStreamInferResponse response;
    absl::Status status = result.status();
    if (result.ok()) {
      status = EncodeInferResponse(*result, id, response.mutable_infer_response());
      answer.held = std::move(result->held);
    }
    if (!status.ok()) {
      response.Clear();
      response.set_error_message(std::string(PublicStatus(status).message()));
      response.mutable_infer_response()->set_id(id);
      response.mutable_infer_response()->set_model_name(answer.request->model_name());
    }
    answer.request.reset();  // its views are no longer needed
    const grpc::Status serialized = SerializeRawMessage(response, &answer.response);
    if (!serialized.ok() && status.ok()) status = absl::InternalError(serialized.error_message());
    return status;
  }

  // Queues `answer` (if any), then starts whatever the state allows: the
  // next write, the next read, or the end of the stream.
  void Step(std::unique_ptr<Answer> answer = nullptr) {
    grpc::ByteBuffer* write = nullptr;
    bool read = false;
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (answer != nullptr) writes_.push_back(std::move(answer));
      if (finished_) return;
      if (cancelled_) {
        // Answers nobody will read: dropped, and their bytes freed.
        while (writes_.size() > (write_pending_ ? 1u : 0u)) {
          writes_.pop_back();
          --inflight_;
        }
      } else if (!write_pending_ && !writes_.empty()) {
        write_pending_ = true;
        write = &writes_.front()->response;
      }
      if (!read_pending_ && !reads_done_ && !draining_ && !cancelled_ &&
          inflight_ < max_inflight_) {
        read_pending_ = true;
        read = true;
      }
      if (write != nullptr || read) {
        ++starting_;
      } else {
        finish = TakeFinishLocked();
      }
    }
    if (write != nullptr) StartWrite(write);
    if (read) StartRead(&reading_);
    if (write != nullptr || read) {
      absl::MutexLock lock(&mu_);
      --starting_;
      finish = TakeFinishLocked();
    }
    if (finish) Finish(*finish);
  }

  // The stream's final status, once, when it may end: every accepted
  // request answered and written (or dropped, if cancelled), no operation
  // being started, and the client done sending (or the server draining, or
  // the stream cancelled, or a message that did not parse).
  std::optional<grpc::Status> TakeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || write_pending_ || inflight_ > 0 || starting_ > 0) return std::nullopt;
    if (!reads_done_ && !draining_ && !cancelled_) return std::nullopt;
    finished_ = true;
    if (cancelled_) return grpc::Status(grpc::StatusCode::CANCELLED, "the stream was cancelled");
    if (unparsed_message_ > 0) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("message ", unparsed_message_,
                       " of the stream is not an inference.ModelInferRequest (truncated, not "
                       "protobuf, or a string that is not UTF-8); the ",
                       unparsed_message_ - 1,
                       " requests before it were answered, and nothing after it was read"));
    }
    if (draining_ && !reads_done_) return ToGrpcStatus(Serving::ShuttingDown());
    return grpc::Status::OK;
  }

  Serving* const serving_;
  StreamRegistry* const registry_;
  grpc::CallbackServerContext* const context_;
  const int max_inflight_;
  std::string authorization_;  // the stream's token, for each request
  bool has_authorization_ = false;
  std::optional<absl::string_view> traceparent_;  // in the call's metadata
  std::atomic<bool> cancelled_flag_{false};  // polled by the engine
  std::atomic<int> refs_{1};                 // gRPC's, until OnDone

  absl::Mutex mu_;
  grpc::ByteBuffer reading_;                     // the read outstanding's message (one at a time)
  int64_t read_count_ ABSL_GUARDED_BY(mu_) = 0;  // messages parsed and accepted
  int64_t unparsed_message_ ABSL_GUARDED_BY(mu_) = 0;  // 1-based, of the one that failed
  std::deque<std::unique_ptr<Answer>> writes_ ABSL_GUARDED_BY(mu_);  // front: being written
  int inflight_ ABSL_GUARDED_BY(mu_) = 0;  // read, not yet written (or dropped)
  int starting_ ABSL_GUARDED_BY(mu_) = 0;  // threads between deciding an op and starting it
  bool read_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool write_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

void StreamRegistry::DrainAll() {
  std::vector<std::pair<StreamInferReactor*, grpc::Status>> idle;
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    for (StreamInferReactor* stream : streams_) {
      if (std::optional<grpc::Status> end = stream->MarkDraining()) idle.emplace_back(stream, *end);
    }
  }
  // Outside the lock: OnDone (which takes it) may follow Finish at once. A
  // stream whose end was taken here is ours to finish, so it is not gone.
  for (auto& [stream, status] : idle) stream->Finish(status);
}

bool StreamRegistry::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

void StreamRegistry::Add(StreamInferReactor* stream) {
  absl::MutexLock lock(&mu_);
  streams_.insert(stream);
}

void StreamRegistry::Remove(StreamInferReactor* stream) {
  absl::MutexLock lock(&mu_);
  streams_.erase(stream);
}

StreamReactorBase* StartStreamInfer(Serving* serving, StreamRegistry* registry,
                                    grpc::CallbackServerContext* context, int max_inflight) {
  auto* stream = new StreamInferReactor(serving, registry, context, max_inflight);
  registry->Add(stream);
  stream->Begin();
  return stream;
}

}  // namespace gemmserve
