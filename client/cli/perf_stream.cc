#include "client/cli/perf_stream.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/client_context.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace gemmserve::client {
namespace {

using google::protobuf::internal::WireFormatLite;
using Clock = std::chrono::steady_clock;

constexpr char kModelStreamInferMethod[] = "/inference.GRPCInferenceService/ModelStreamInfer";
// ModelStreamInferResponse: error_message = 1, infer_response = 2;
// ModelInferResponse: id = 3; ModelInferRequest: id = 3.
constexpr int kErrorMessageField = 1;
constexpr int kInferResponseField = 2;
constexpr int kIdField = 3;

// Reads the id out of a serialized ModelInferResponse of `length` bytes.
bool ReadResponseId(google::protobuf::io::CodedInputStream& in, uint32_t length,
                    std::string* id) {
  const auto limit = in.PushLimit(static_cast<int>(length));
  while (uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == kIdField &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::ReadString(&in, id)) return false;
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return false;
    }
  }
  // Ended at the limit, not short of it (truncated) nor at an end-group tag.
  if (!in.ConsumedEntireMessage() || in.BytesUntilLimit() != 0) return false;
  in.PopLimit(limit);
  return true;
}

}  // namespace

std::optional<StreamAnswerHead> ReadStreamAnswerHead(const grpc::ByteBuffer& response) {
  grpc::ByteBuffer copy(response);  // the reader takes a mutable buffer; slices are shared
  grpc::ProtoBufferReader reader(&copy);
  google::protobuf::io::CodedInputStream in(&reader);
  in.SetTotalBytesLimit(INT32_MAX);
  StreamAnswerHead head;
  while (uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const bool delimited =
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    if (field == kErrorMessageField && delimited) {
      if (!WireFormatLite::ReadString(&in, &head.error_message)) return std::nullopt;
    } else if (field == kInferResponseField && delimited) {
      uint32_t length;
      if (!in.ReadVarint32(&length) || !ReadResponseId(in, length, &head.id)) return std::nullopt;
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return std::nullopt;
    }
  }
  if (!in.ConsumedEntireMessage()) return std::nullopt;
  return head;
}

grpc::ByteBuffer WithRequestId(const grpc::ByteBuffer& request, const std::string& id) {
  std::vector<grpc::Slice> slices;
  (void)request.Dump(&slices);
  std::string field;
  field.push_back(static_cast<char>(WireFormatLite::MakeTag(
      kIdField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED)));
  field.push_back(static_cast<char>(id.size()));  // ids are short: one varint byte
  field += id;
  slices.emplace_back(field);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

namespace {

// One stream of requests. Writes go one at a time from a queue; gRPC is
// never called under mu_ (a reaction may run inline and take it).
class StreamLoadRun final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamLoadRun(std::shared_ptr<grpc::Channel> channel, std::vector<grpc::ByteBuffer> requests,
                const PerfOptions& options)
      : stub_(std::move(channel)),
        method_(kModelStreamInferMethod),
        requests_(std::move(requests)),
        options_(options),
        open_loop_(options.rate > 0) {}

  PerfResult Run() {
    const PerfWindow window = PerfWindow::StartingNow(options_);
    window_ = window;
    stub_.PrepareBidiStreamingCall(&context_, method_, grpc::StubOptions(), this);
    StartRead(&response_);
    if (!open_loop_) {
      absl::MutexLock lock(&mu_);
      for (int i = 0; i < options_.concurrency; ++i) QueueLocked();
    }
    StartCall();
    Pump();
    if (open_loop_) {
      SendArrivals();
    } else {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithDeadline(absl::Condition(&done_), absl::FromChrono(
          std::chrono::system_clock::now() + (window_.end - Clock::now())));
    }
    Drain();
    absl::MutexLock lock(&mu_);
    return MakePerfResult(options_, std::move(latencies_us_), errors_, dropped_);
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      write_pending_ = false;
      if (!ok) queue_.clear();  // the stream is over; OnDone says why
    }
    Pump();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream is over; OnDone follows
    const Clock::time_point now = Clock::now();
    std::optional<StreamAnswerHead> head = ReadStreamAnswerHead(response_);
    {
      absl::MutexLock lock(&mu_);
      auto it = head ? sent_.find(head->id) : sent_.end();
      const bool in_window = window_.Measures(now);
      if (it == sent_.end()) {
        if (in_window) ++errors_["UNKNOWN_ANSWER"];
      } else {
        if (in_window && head->error_message.empty()) {
          latencies_us_.push_back(
              std::chrono::duration_cast<std::chrono::microseconds>(now - it->second).count());
        } else if (in_window) {
          ++errors_["STREAM"];
        }
        sent_.erase(it);
      }
      if (!open_loop_ && !stopping_ && now < window_.end) QueueLocked();
    }
    Pump();
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    if (!status.ok() && !cancelled_) {
      ++errors_[std::string(
          absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())))];
    }
    done_ = true;
  }

 private:
  // The next request of the pool, with the next id, to be written.
  void QueueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string id = absl::StrCat(next_id_++);
    queue_.push_back(WithRequestId(requests_[next_id_ % requests_.size()], id));
    sent_.emplace(id, Clock::now());
  }

  // Starts the next write, or ends the writing once stopped.
  void Pump() {
    grpc::ByteBuffer* write = nullptr;
    bool writes_done = false;
    {
      absl::MutexLock lock(&mu_);
      if (write_pending_ || writes_done_ || done_) return;
      if (!queue_.empty()) {
        writing_ = std::move(queue_.front());
        queue_.pop_front();
        write_pending_ = true;
        write = &writing_;
      } else if (stopping_) {
        writes_done_ = writes_done = true;
      }
    }
    if (write != nullptr) StartWrite(write);
    if (writes_done) StartWritesDone();
  }

  void SendArrivals() {
    SendPoissonArrivals(options_, window_, [&](Clock::time_point arrival) {
      {
        absl::MutexLock lock(&mu_);
        if (done_) return false;
        if (sent_.size() < static_cast<size_t>(options_.concurrency)) {
          QueueLocked();
        } else if (arrival >= window_.begin) {
          ++dropped_;
        }
      }
      Pump();
      return true;
    });
  }

  // Writes no more and ends the stream; answers still missing after
  // kDrainGrace are cancelled. Returns once OnDone ran.
  void Drain() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    Pump();
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&done_), kDrainGrace)) {
      cancelled_ = true;
      mu_.Unlock();
      context_.TryCancel();
      mu_.Lock();
      mu_.Await(absl::Condition(&done_));
    }
  }

  grpc::GenericStub stub_;
  const std::string method_;  // gRPC keeps a pointer to it while the call lives
  const std::vector<grpc::ByteBuffer> requests_;
  const PerfOptions options_;
  const bool open_loop_;
  PerfWindow window_;  // set before the call
  grpc::ClientContext context_;
  grpc::ByteBuffer response_;  // one read at a time

  absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer writing_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, Clock::time_point> sent_ ABSL_GUARDED_BY(mu_);  // unanswered
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool write_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int64_t> latencies_us_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> errors_ ABSL_GUARDED_BY(mu_);
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

PerfResult RunStreamLoad(std::shared_ptr<grpc::Channel> channel,
                         std::vector<grpc::ByteBuffer> requests, const PerfOptions& options) {
  StreamLoadRun run(std::move(channel), std::move(requests), options);
  return run.Run();
}

}  // namespace gemmserve::client
