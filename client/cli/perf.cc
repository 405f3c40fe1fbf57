#include "client/cli/perf.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <atomic>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>

#include <grpcpp/client_context.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/cli/perf_stream.h"
#include "client/cpp/client.h"
#include "client/cpp/random_tensor.h"
#include "server/common/status_macros.h"
#include "server/tensor/datatype.h"
#include "server/tensor/shape.h"

namespace gemmserve::client {
namespace {

constexpr char kModelInferMethod[] = "/inference.GRPCInferenceService/ModelInfer";
constexpr char kGroupIndicesName[] = "group_indices";
constexpr char kWeightsName[] = "weights";
constexpr char kGroupsParameter[] = "groups";


constexpr double kMaxRate = 1e6;
constexpr absl::Duration kMaxDuration = absl::Hours(24);

// ------------------------------------------------------------------ inputs

std::vector<int64_t> ResolveShape(const inference::ModelMetadataResponse::TensorMetadata& tensor,
                                  const std::vector<ShapeOverride>& overrides, int64_t rows) {
  for (const ShapeOverride& o : overrides) {
    if (o.name == tensor.name()) return o.dims;
  }
  std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) shape[i] = i == 0 ? rows : 1;
  }
  return shape;
}

bool IsOptional(const inference::ModelConfig* config, const std::string& name) {
  if (config == nullptr) return false;
  for (const inference::ModelInput& input : config->input()) {
    if (input.name() == name) return input.optional();
  }
  return false;
}

// ------------------------------------------------------------------- load

using Clock = std::chrono::steady_clock;

Clock::duration ToClock(absl::Duration d) {
  return std::chrono::duration_cast<Clock::duration>(absl::ToChronoNanoseconds(d));
}

// One run of the load. Calls are started from the driving thread (the
// initial closed-loop calls, every open-loop arrival) and, in closed loop,
// from the completion callbacks on gRPC's threads. mu_ is never held while
// gRPC is called: gRPC may run a completion callback inline, and that takes
// mu_.
class LoadRun {
 public:
  LoadRun(std::shared_ptr<grpc::Channel> channel, std::vector<grpc::ByteBuffer> requests,
          const PerfOptions& options)
      : stub_(std::move(channel)),
        method_(kModelInferMethod),
        requests_(std::move(requests)),
        options_(options),
        open_loop_(options.rate > 0) {}

  PerfResult Run() {
    const PerfWindow window = PerfWindow::StartingNow(options_);
    window_ = window;
    if (open_loop_) {
      SendArrivals();
    } else {
      std::vector<std::shared_ptr<Call>> calls;
      {
        absl::MutexLock lock(&mu_);
        for (int i = 0; i < options_.concurrency; ++i) calls.push_back(RegisterLocked());
      }
      for (const std::shared_ptr<Call>& call : calls) Start(call.get());
      std::this_thread::sleep_until(window_.end);
    }
    Drain();

    absl::MutexLock lock(&mu_);
    return MakePerfResult(options_, std::move(latencies_us_), errors_, dropped_);
  }

 private:
  struct Call {
    grpc::ClientContext context;
    // Each call owns its request buffer (a copy shares the serialized slices,
    // by reference count): no grpc_byte_buffer is used by two calls at once.
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;  // not parsed: only the status counts
    Clock::time_point sent;
  };

  // A call is registered (under mu_) before it starts, so that Drain() sees
  // every call that may still run; cancelling one not started yet is fine,
  // gRPC then cancels it as it starts.
  std::shared_ptr<Call> RegisterLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto call = std::make_shared<Call>();
    calls_.emplace(call.get(), call);
    return call;
  }

  void Start(Call* call) {
    call->sent = Clock::now();
    if (options_.timeout != absl::InfiniteDuration()) {
      call->context.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
    }
    call->request =
        requests_[next_request_.fetch_add(1, std::memory_order_relaxed) % requests_.size()];
    stub_.UnaryCall(&call->context, method_, grpc::StubOptions(), &call->request, &call->response,
                    [this, call](grpc::Status status) { OnDone(call, std::move(status)); });
  }

  void OnDone(Call* call, const grpc::Status& status) {
    const Clock::time_point done = Clock::now();
    std::shared_ptr<Call> finished;  // the call is destroyed below, unless Drain() holds it
    std::shared_ptr<Call> next;
    {
      absl::MutexLock lock(&mu_);
      auto it = calls_.find(call);
      finished = std::move(it->second);
      calls_.erase(it);
      ++finishing_;
      if (window_.Measures(done)) {
        if (status.ok()) {
          latencies_us_.push_back(
              std::chrono::duration_cast<std::chrono::microseconds>(done - call->sent).count());
        } else {
          ++errors_[std::string(
              absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())))];
        }
      }
      if (!open_loop_ && !stopping_ && done < window_.end) next = RegisterLocked();
    }
    if (next != nullptr) Start(next.get());
    // Our references go before this callback counts as finished, and so
    // before Drain() can return: the last one destroys the Call, whose
    // ClientContext holds a reference to the channel. Destroyed after Run()
    // returned, it could drop the channel's last reference on this gRPC
    // thread, and ~Channel then shuts down and deletes the callback
    // completion queue this thread is still polling (it joins the polling
    // threads, this one included), or races with the process's exit.
    finished.reset();
    next.reset();
    absl::MutexLock lock(&mu_);
    --finishing_;
  }

  // Open loop: a call per arrival, unless `concurrency` are in flight.
  void SendArrivals() {
    SendPoissonArrivals(options_, window_, [&](Clock::time_point arrival) {
      std::shared_ptr<Call> call;
      {
        absl::MutexLock lock(&mu_);
        if (calls_.size() < static_cast<size_t>(options_.concurrency)) {
          call = RegisterLocked();
        } else if (arrival >= window_.begin) {
          ++dropped_;
        }
      }
      if (call != nullptr) Start(call.get());
      return true;
    });
  }

  // Stops new calls, lets those in flight finish for kDrainGrace, cancels the
  // rest and waits for their callbacks (a cancelled call completes at once),
  // so that no callback can run, and no Call be alive, once Run() returns.
  void Drain() {
    const auto all_done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return calls_.empty() && finishing_ == 0;
    };
    std::vector<std::shared_ptr<Call>> pending;
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      mu_.AwaitWithTimeout(absl::Condition(&all_done), kDrainGrace);
      for (const auto& [raw, call] : calls_) pending.push_back(call);
    }
    for (const std::shared_ptr<Call>& call : pending) call->context.TryCancel();
    pending.clear();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&all_done));
  }

  grpc::GenericStub stub_;
  const std::string method_;                      // gRPC keeps a pointer to it while a call lives
  const std::vector<grpc::ByteBuffer> requests_;  // taken in turn
  std::atomic<uint64_t> next_request_{0};
  const PerfOptions options_;
  const bool open_loop_;
  PerfWindow window_;  // set before any call

  absl::Mutex mu_;
  std::unordered_map<Call*, std::shared_ptr<Call>> calls_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int finishing_ ABSL_GUARDED_BY(mu_) = 0;  // OnDone() calls past the erase from calls_
  std::vector<int64_t> latencies_us_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> errors_ ABSL_GUARDED_BY(mu_);
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

// The load of serialized requests, unary or over one stream.
PerfResult RunSerialized(std::shared_ptr<grpc::Channel> channel,
                         std::vector<grpc::ByteBuffer> requests, const PerfOptions& options) {
  if (options.streaming) return RunStreamLoad(std::move(channel), std::move(requests), options);
  LoadRun run(std::move(channel), std::move(requests), options);
  PerfResult result = run.Run();
  return result;
}

}  // namespace

PerfWindow PerfWindow::StartingNow(const PerfOptions& options) {
  PerfWindow w;
  w.start = Clock::now();
  w.begin = w.start + ToClock(options.warmup);
  w.end = w.begin + ToClock(options.duration);
  return w;
}

void SendPoissonArrivals(const PerfOptions& options, const PerfWindow& window,
                         absl::FunctionRef<bool(PerfWindow::Clock::time_point)> arrive) {
  std::mt19937_64 rng(options.seed);
  std::exponential_distribution<double> gap_s(options.rate);
  PerfWindow::Clock::time_point arrival = window.start;
  while (true) {
    arrival += std::chrono::duration_cast<PerfWindow::Clock::duration>(
        std::chrono::duration<double>(gap_s(rng)));
    if (arrival >= window.end) return;
    std::this_thread::sleep_until(arrival);
    if (!arrive(arrival)) return;
  }
}

absl::StatusOr<ShapeOverride> ParseShapeOverride(absl::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--shape '", text, "' is not NAME:d1,d2,..."));
  }
  ShapeOverride shape{std::string(text.substr(0, colon)), {}};
  const absl::string_view dims = text.substr(colon + 1);
  if (dims.empty()) return shape;
  for (absl::string_view d : absl::StrSplit(dims, ',')) {
    int64_t value;
    if (!absl::SimpleAtoi(d, &value) || value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shape '", text, "': bad dimension '", d, "'"));
    }
    shape.dims.push_back(value);
  }
  return shape;
}

absl::Status CheckPerfOptions(const PerfOptions& options) {
  if (options.model.empty()) return absl::InvalidArgumentError("perf needs --model");
  if (options.concurrency < 1 || options.concurrency > kPerfMaxConcurrency) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--concurrency must be in [1, ", kPerfMaxConcurrency, "], got ", options.concurrency));
  }
  if (options.duration <= absl::ZeroDuration() || options.duration > kMaxDuration) {
    return absl::InvalidArgumentError("--duration must be in (0, 86400] seconds");
  }
  if (options.warmup < absl::ZeroDuration() || options.warmup > kMaxDuration) {
    return absl::InvalidArgumentError("--warmup must be in [0, 86400] seconds");
  }
  if (!(options.rate >= 0 && options.rate <= kMaxRate)) {  // NaN fails too
    return absl::InvalidArgumentError(
        absl::StrCat("--rate must be in [0, ", kMaxRate, "] requests/s"));
  }
  if (options.rows < 0) return absl::InvalidArgumentError("--rows must not be negative");
  if (options.request_pool < 1 || options.request_pool > 100000) {
    return absl::InvalidArgumentError("--request_pool must be in [1, 100000]");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the timeout of a call must be positive");
  }
  for (size_t i = 0; i < options.shapes.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (options.shapes[i].name == options.shapes[j].name) {
        return absl::InvalidArgumentError(
            absl::StrCat("--shape names input '", options.shapes[i].name, "' twice"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<HostTensor>> MakePerfInputs(
    const inference::ModelMetadataResponse& metadata, const inference::ModelConfig* config,
    const PerfOptions& options) {
  std::vector<std::string> names;
  for (const auto& input : metadata.inputs()) names.push_back(input.name());
  for (const ShapeOverride& o : options.shapes) {
    if (std::find(names.begin(), names.end(), o.name) == names.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--shape names '", o.name, "', but model '",
                                                     metadata.name(), "' has inputs ",
                                                     absl::StrJoin(names, ", ")));
    }
  }

  int64_t config_groups = 0;  // 0: no "groups" parameter
  if (config != nullptr) {
    auto it = config->parameters().find(kGroupsParameter);
    if (it != config->parameters().end() &&
        (!absl::SimpleAtoi(it->second.string_value(), &config_groups) || config_groups <= 0)) {
      return absl::FailedPreconditionError(
          absl::StrCat("model '", metadata.name(), "' has parameter groups='",
                       it->second.string_value(), "', not a positive integer"));
    }
  }

  struct Planned {
    std::string name;
    DataType type;
    std::vector<int64_t> shape;
  };
  std::vector<Planned> planned;
  for (const auto& input : metadata.inputs()) {
    const bool overridden =
        std::any_of(options.shapes.begin(), options.shapes.end(),
                    [&](const ShapeOverride& o) { return o.name == input.name(); });
    if (!overridden && IsOptional(config, input.name())) continue;
    absl::StatusOr<DataType> type = ParseDataType(input.datatype());
    if (!type.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("input '", input.name(), "' of model '", metadata.name(), "' has datatype ",
                       input.datatype(), ": ", type.status().message()));
    }
    planned.push_back({input.name(), *type, ResolveShape(input, options.shapes, options.rows)});
  }

  int64_t groups = config_groups;
  if (groups == 0) {
    groups = 1;
    for (const Planned& p : planned) {
      if (p.name == kWeightsName && !p.shape.empty() && p.shape[0] > 0) groups = p.shape[0];
    }
  }

  std::mt19937_64 rng(options.seed);
  std::vector<HostTensor> inputs;
  for (Planned& p : planned) {
    const bool is_index_type = !IsFloatingPoint(p.type);
    const bool is_index =
        is_index_type &&
        (p.name == kGroupIndicesName ||
         (config_groups > 0 && (p.type == DataType::kINT32 || p.type == DataType::kINT64)));
    absl::StatusOr<HostTensor> tensor =
        RandomTensor(p.name, p.type, std::move(p.shape), rng, is_index ? groups : 0);
    if (!tensor.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(tensor.status().message(), " (see --shape and --rows)"));
    }
    // Zero bytes are a zero of every datatype and a valid group index.
    if (options.zero_data) std::fill(tensor->bytes.begin(), tensor->bytes.end(), '\0');
    inputs.push_back(*std::move(tensor));
  }
  return inputs;
}

namespace {

// One request of the pool, serialized; `described` gets its inputs.
absl::StatusOr<grpc::ByteBuffer> SerializeRequest(const inference::ModelInferRequest& request) {
  if (request.ByteSizeLong() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("the request would be ", request.ByteSizeLong(),
                                                   " bytes, over protobuf's 2 GiB"));
  }
  grpc::ByteBuffer serialized;
  bool own_buffer = false;
  grpc::Status status = grpc::SerializationTraits<inference::ModelInferRequest>::Serialize(
      request, &serialized, &own_buffer);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot serialize the request: ", status.error_message()));
  }
  return serialized;
}

absl::StatusOr<grpc::ByteBuffer> Serialize(const std::string& model, std::vector<HostTensor> inputs,
                                           std::vector<PerfInput>* described) {
  described->clear();
  for (const HostTensor& input : inputs) {
    described->push_back({input.name, input.datatype, input.shape});
  }
  return SerializeRequest(MakeInferRequest(model, std::move(inputs)));
}

// Whether `b` has the inputs of `*a`, by name and datatype; dimensions that
// differ become -1 in `*a` (the report's "varies"), and so does a whole
// shape of another rank (empty).
bool SameInputs(std::vector<PerfInput>* a, const std::vector<PerfInput>& b) {
  if (a->size() != b.size()) return false;
  for (size_t i = 0; i < b.size(); ++i) {
    PerfInput& x = (*a)[i];
    if (x.name != b[i].name || x.datatype != b[i].datatype) return false;
    if (x.shape.size() != b[i].shape.size()) {
      x.shape.clear();
      continue;
    }
    for (size_t d = 0; d < x.shape.size(); ++d) {
      if (x.shape[d] != b[i].shape[d]) x.shape[d] = -1;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<HostTensor>>> MakePerfInputPool(
    const inference::ModelMetadataResponse& metadata, const inference::ModelConfig* config,
    const PerfOptions& options) {
  std::vector<std::vector<HostTensor>> pool;
  int64_t bytes = 0;
  // Zero data makes every request the same: one is enough.
  const int distinct = options.zero_data ? 1 : std::max(options.request_pool, 1);
  for (int i = 0; i < distinct; ++i) {
    PerfOptions one = options;
    one.seed = options.seed + static_cast<uint64_t>(i);
    GEMMSERVE_ASSIGN_OR_RETURN(std::vector<HostTensor> inputs,
                               MakePerfInputs(metadata, config, one));
    int64_t size = 0;
    for (const HostTensor& t : inputs) size += static_cast<int64_t>(t.bytes.size());
    if (!pool.empty() && bytes + size > kPerfPoolMaxBytes) break;
    bytes += size;
    pool.push_back(std::move(inputs));
  }
  return pool;
}

absl::StatusOr<PerfResult> RunLoad(std::shared_ptr<grpc::Channel> channel,
                                   std::vector<HostTensor> inputs, const PerfOptions& options) {
  std::vector<std::vector<HostTensor>> pool;
  pool.push_back(std::move(inputs));
  return RunLoadPool(std::move(channel), std::move(pool), options);
}

absl::StatusOr<PerfResult> RunLoadPool(std::shared_ptr<grpc::Channel> channel,
                                       std::vector<std::vector<HostTensor>> pool,
                                       const PerfOptions& options) {
  GEMMSERVE_RETURN_IF_ERROR(CheckPerfOptions(options));
  if (pool.empty()) return absl::InvalidArgumentError("perf: no request to send");
  std::vector<grpc::ByteBuffer> requests;
  std::vector<PerfInput> described, first;
  for (std::vector<HostTensor>& inputs : pool) {
    GEMMSERVE_ASSIGN_OR_RETURN(grpc::ByteBuffer serialized,
                               Serialize(options.model, std::move(inputs), &described));
    if (requests.empty()) {
      first = described;
    } else if (!SameInputs(&first, described)) {
      return absl::InvalidArgumentError(
          "perf: the pool's requests differ in their inputs' names or datatypes");
    }
    requests.push_back(std::move(serialized));
  }
  pool.clear();  // the serialized copies are all that is sent
  const int distinct = static_cast<int>(requests.size());
  PerfResult result = RunSerialized(std::move(channel), std::move(requests), options);
  result.inputs = std::move(first);
  result.distinct_requests = distinct;
  return result;
}

PerfResult MakePerfResult(const PerfOptions& options, std::vector<int64_t> latencies_us,
                          std::map<std::string, int64_t> errors, int64_t dropped) {
  PerfResult result;
  result.model = options.model;
  result.open_loop = options.rate > 0;
  result.concurrency = options.concurrency;
  result.rate = options.rate;
  result.duration_s = absl::ToDoubleSeconds(options.duration);
  result.ok = static_cast<int64_t>(latencies_us.size());
  result.errors = std::move(errors);
  result.client_dropped = dropped;
  result.throughput = static_cast<double>(result.ok) / result.duration_s;
  result.latency = SummarizeLatencies(std::move(latencies_us));
  result.system_shared_memory = options.system_shared_memory;
  result.http = options.http;
  result.streaming = options.streaming;
  return result;
}

absl::StatusOr<std::vector<PerfInput>> DescribePool(
    const std::vector<std::vector<HostTensor>>& pool) {
  std::vector<PerfInput> first;
  for (size_t i = 0; i < pool.size(); ++i) {
    std::vector<PerfInput> described;
    for (const HostTensor& t : pool[i]) described.push_back({t.name, t.datatype, t.shape});
    if (i == 0) {
      first = std::move(described);
    } else if (!SameInputs(&first, described)) {
      return absl::InvalidArgumentError(
          "perf: the pool's requests differ in their inputs' names or datatypes");
    }
  }
  return first;
}

absl::StatusOr<PerfResult> RunLoadRequests(
    std::shared_ptr<grpc::Channel> channel,
    const std::vector<inference::ModelInferRequest>& requests, std::vector<PerfInput> inputs,
    const PerfOptions& options) {
  GEMMSERVE_RETURN_IF_ERROR(CheckPerfOptions(options));
  if (requests.empty()) return absl::InvalidArgumentError("perf: no request to send");
  std::vector<grpc::ByteBuffer> serialized;
  for (const inference::ModelInferRequest& request : requests) {
    GEMMSERVE_ASSIGN_OR_RETURN(grpc::ByteBuffer bytes, SerializeRequest(request));
    serialized.push_back(std::move(bytes));
  }
  PerfResult result = RunSerialized(std::move(channel), std::move(serialized), options);
  result.inputs = std::move(inputs);
  result.distinct_requests = static_cast<int>(requests.size());
  result.system_shared_memory = options.system_shared_memory;
  result.http = options.http;
  result.streaming = options.streaming;
  return result;
}

absl::StatusOr<std::vector<double>> ParsePerfRange(absl::string_view flag, absl::string_view text,
                                                   bool integral) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " '", text, "': ", why, " (expected START[:END[:STEP]])"));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() > 3) return bad("too many parts");
  double values[3] = {0, 0, 1};
  for (size_t i = 0; i < parts.size(); ++i) {
    double v = 0;
    int64_t n = 0;
    if (integral ? !absl::SimpleAtoi(parts[i], &n) : !absl::SimpleAtod(parts[i], &v)) {
      return bad(absl::StrCat("'", parts[i], "' is not ", integral ? "an integer" : "a number"));
    }
    if (integral) v = static_cast<double>(n);
    if (!std::isfinite(v)) return bad("not a finite number");
    values[i] = v;
  }
  if (parts.size() == 1) values[1] = values[0];
  const double start = values[0], end = values[1], step = values[2];
  if (start <= 0) return bad("levels must be positive");
  if (end < start) return bad("END is below START");
  if (step <= 0) return bad("STEP must be positive");
  if ((end - start) / step >= kPerfMaxLevels) {
    return bad(absl::StrCat("more than ", kPerfMaxLevels, " levels"));
  }
  std::vector<double> levels;
  // Levels by multiplication, not repeated addition, so that 0.1 steps do
  // not drift; a tolerance keeps END itself in when it is on the grid.
  for (int i = 0;; ++i) {
    const double level = start + step * i;
    if (level > end + step * 1e-9) break;
    levels.push_back(level);
  }
  return levels;
}

}  // namespace gemmserve::client
