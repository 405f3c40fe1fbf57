#include "server/remote/grpc_remote_experts.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "grpc_service.grpc.pb.h"
#include "server/common/client_text.h"
#include "server/common/logging.h"
#include "server/common/status_macros.h"
#include "server/metrics/metrics.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace {

// Reconnect soon after a replica comes back (gRPC's default backoff grows
// to two minutes); calls are retried by us, once, not by gRPC.
std::shared_ptr<grpc::Channel> ShardChannel(const std::string& target, int64_t max_message_bytes) {
  grpc::ChannelArguments args;
  args.SetServiceConfigJSON(R"({"loadBalancingConfig": [{"round_robin": {}}]})");
  args.SetMaxReceiveMessageSize(static_cast<int>(std::min<int64_t>(max_message_bytes, INT32_MAX)));
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

// What a replica's metadata told the last probe: the tensors' names.
// (Before any probe succeeded: the names scripts/make_moe_layer.py writes.)
struct ShardNames {
  std::string x = "x", ids = "ids", w = "w", out = "out";
};

struct Replica {
  std::string address;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub;
  absl::Mutex mu;
  bool ready ABSL_GUARDED_BY(mu) = false;
  std::string why ABSL_GUARDED_BY(mu) = "not probed yet";
  ShardNames names ABSL_GUARDED_BY(mu);
};

struct Shard {
  int index = 0;
  ExpertRange range;
  std::vector<std::unique_ptr<Replica>> replicas;
  std::atomic<uint32_t> next{0};
  prometheus::Histogram* latency = nullptr;
  prometheus::Counter* errors = nullptr;

  std::string Name() const {
    return absl::StrCat("shard ", index, " (experts ", ExpertRangeText(range), ")");
  }
};

// One shard's part of a call: its tokens, the request, and what came back.
struct ShardCall {
  Shard* shard = nullptr;
  std::vector<int64_t> tokens;
  inference::ModelInferRequest request;
  inference::ModelInferResponse response;
  std::unique_ptr<grpc::ClientContext> context;
  grpc::Status status;
  absl::Duration took;  // sent to answered
  Replica* replica = nullptr;
  absl::Status result;
};

// What a shard call's gRPC status says, as a Status (the shard's message
// made safe to show and cut to 200 bytes: it reaches the router's caller).
absl::Status ShardStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      ClientText(status.error_message(), 200));
}

class GrpcRemoteExperts final : public RemoteExperts {
 public:
  GrpcRemoteExperts(const ShardedLayerPlan& plan, const ShardClientOptions& options);
  ~GrpcRemoteExperts() override;

  absl::Status AddRoutedExperts(const RemoteExpertsCall& call, float* acc) const override;
  absl::Status Available() const override;
  int64_t WorkBytes(int64_t m) const override;

 private:
  void ProbeLoop();
  void Probe(const Shard& shard, Replica& r) const;
  absl::Status CheckConfig(const Shard& shard, const inference::ModelConfigResponse& c) const;
  absl::Status CheckMetadata(const inference::ModelMetadataResponse& md, ShardNames* names) const;
  // The replica to ask: the next ready one after `not_this` (any when none
  // is ready); null when the shard has no other.
  Replica* Choose(Shard& shard, const Replica* not_this) const;
  bool BuildRequest(const RemoteExpertsCall& call, ShardCall* sc) const;
  // Starts every call in `calls` and waits for all of them.
  void RunCalls(const std::vector<ShardCall*>& calls, absl::Time deadline) const;
  absl::Status AddAnswer(const RemoteExpertsCall& call, const ShardCall& sc, float* acc) const;
  void CountExperts(const RemoteExpertsCall& call) const;

  const ShardedLayerPlan plan_;
  const ShardClientOptions options_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<prometheus::Counter*> expert_tokens_;  // [G]
  prometheus::Histogram* overhead_ = nullptr;
  absl::Notification stop_;
  std::thread prober_;
};

GrpcRemoteExperts::GrpcRemoteExperts(const ShardedLayerPlan& plan,
                                     const ShardClientOptions& options)
    : plan_(plan), options_(options) {
  prometheus::Family<prometheus::Histogram>* latency = nullptr;
  prometheus::Family<prometheus::Counter>* errors = nullptr;
  if (plan_.metrics != nullptr) {
    prometheus::Registry& registry = *plan_.metrics->shared_registry();
    latency = &prometheus::BuildHistogram()
                   .Name("gemmserve_shard_call_duration_seconds")
                   .Help("A sharded layer's calls to one shard, from sent to answered")
                   .Register(registry);
    errors = &prometheus::BuildCounter()
                  .Name("gemmserve_shard_call_errors_total")
                  .Help("A sharded layer's calls to one shard that failed (retries included)")
                  .Register(registry);
    auto& tokens = prometheus::BuildCounter()
                       .Name("gemmserve_expert_tokens_total")
                       .Help("Tokens a mixture-of-experts layer routed to each expert")
                       .Register(registry);
    for (int64_t e = 0; e < plan_.g; ++e) {
      expert_tokens_.push_back(&tokens.Add({{"model", plan_.model}, {"expert", absl::StrCat(e)}}));
    }
  }
  const prometheus::Histogram::BucketBoundaries buckets = {
      0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01,
      0.02,    0.05,   0.1,    0.2,    0.5,   1,     2,     5,    10};
  if (plan_.metrics != nullptr) {
    overhead_ = &prometheus::BuildHistogram()
                     .Name("gemmserve_router_overhead_seconds")
                     .Help("A sharded layer's router: its own time per call (routing, the split, "
                           "the calls' overhead, the sum), the slowest shard call excepted")
                     .Register(*plan_.metrics->shared_registry())
                     .Add({{"model", plan_.model}}, buckets);
  }
  for (size_t i = 0; i < plan_.shards.size(); ++i) {
    auto shard = std::make_unique<Shard>();
    shard->index = static_cast<int>(i);
    shard->range = plan_.shards[i].range;
    for (const std::string& address : plan_.shards[i].addresses) {
      auto r = std::make_unique<Replica>();
      r->address = address;
      r->stub = inference::GRPCInferenceService::NewStub(
          ShardChannel(address, options_.max_message_bytes));
      shard->replicas.push_back(std::move(r));
    }
    if (latency != nullptr) {
      const prometheus::Labels labels = {{"model", plan_.model}, {"shard", absl::StrCat(i)}};
      shard->latency = &latency->Add(labels, buckets);
      shard->errors = &errors->Add(labels);
    }
    shards_.push_back(std::move(shard));
  }
  prober_ = std::thread([this] { ProbeLoop(); });
}

GrpcRemoteExperts::~GrpcRemoteExperts() {
  stop_.Notify();
  prober_.join();
}

void GrpcRemoteExperts::ProbeLoop() {
  do {
    for (const auto& shard : shards_) {
      for (const auto& r : shard->replicas) {
        if (stop_.HasBeenNotified()) return;  // each probe takes up to a second
        Probe(*shard, *r);
      }
    }
  } while (!stop_.WaitForNotificationWithTimeout(options_.probe_interval));
}

absl::Status GrpcRemoteExperts::CheckMetadata(const inference::ModelMetadataResponse& md,
                                              ShardNames* names) const {
  const std::string t(DataTypeName(plan_.type));
  if (md.inputs_size() != 3 || md.outputs_size() != 1) {
    return absl::FailedPreconditionError("its model is not a shard (inputs x, ids, w; one output)");
  }
  const auto& x = md.inputs(0);
  if (x.datatype() != t || x.shape_size() != 2 || x.shape(1) != plan_.k) {
    return absl::FailedPreconditionError(
        absl::StrCat("its input '", x.name(), "' is not ", t, " [M, ", plan_.k, "]"));
  }
  for (int j : {1, 2}) {
    const auto& in = md.inputs(j);
    if (in.shape_size() != 2 || in.shape(1) != plan_.s) {
      return absl::FailedPreconditionError(
          absl::StrCat("its input '", in.name(), "' is not [M, ", plan_.s, "]"));
    }
  }
  if (md.outputs(0).datatype() != "FP32") {
    return absl::FailedPreconditionError("its output is not the FP32 partial sum");
  }
  *names = {x.name(), md.inputs(1).name(), md.inputs(2).name(), md.outputs(0).name()};
  return absl::OkStatus();
}

// The replica's model config names the shard's experts: a server that holds
// other experts (or the whole layer, or the router itself) is not this shard.
absl::Status GrpcRemoteExperts::CheckConfig(const Shard& shard,
                                            const inference::ModelConfigResponse& c) const {
  const auto& p = c.config().parameters();
  auto range = p.find(kExpertRangeParameter);
  const std::string want = ExpertRangeText(shard.range);
  if (range == p.end() || range->second.string_value() != want) {
    return absl::FailedPreconditionError(
        absl::StrCat("its model is not shard ", want, " (parameter expert_range is '",
                     range == p.end() ? "" : ClientText(range->second.string_value(), 32), "')"));
  }
  return absl::OkStatus();
}

// One of a probe's unary calls, `rpc(context, request, response)`, for the
// layer's model name and version, ending by `deadline`.
template <typename Request, typename Response, typename Rpc>
absl::Status AskShard(const ShardedLayerPlan& plan, absl::Time deadline, Rpc rpc,
                      Response* response) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  Request request;
  request.set_name(plan.model);
  request.set_version(plan.version);
  return ShardStatus(rpc(&context, request, response));
}

void GrpcRemoteExperts::Probe(const Shard& shard, Replica& r) const {
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  auto* stub = r.stub.get();
  inference::ModelMetadataResponse md;
  absl::Status fit = AskShard<inference::ModelMetadataRequest>(
      plan_, deadline,
      [stub](auto* context, const auto& request, auto* response) {
        return stub->ModelMetadata(context, request, response);
      },
      &md);
  ShardNames names;
  if (fit.ok()) fit = CheckMetadata(md, &names);
  inference::ModelConfigResponse config;
  if (fit.ok()) {
    fit = AskShard<inference::ModelConfigRequest>(
        plan_, deadline,
        [stub](auto* context, const auto& request, auto* response) {
          return stub->ModelConfig(context, request, response);
        },
        &config);
  }
  if (fit.ok()) fit = CheckConfig(shard, config);
  absl::MutexLock lock(&r.mu);
  if (fit.ok() != r.ready) {
    GEMMSERVE_LOG(INFO) << "model '" << plan_.model << "': shard replica " << r.address
                        << (fit.ok() ? " is ready" : " is not ready: ") << fit.message();
  }
  r.ready = fit.ok();
  r.why = std::string(fit.message());
  if (fit.ok()) r.names = std::move(names);
}

absl::Status GrpcRemoteExperts::Available() const {
  std::string missing;
  for (const auto& shard : shards_) {
    std::string why;
    bool any = false;
    for (const auto& r : shard->replicas) {
      absl::MutexLock lock(&r->mu);
      any = any || r->ready;
      absl::StrAppend(&why, why.empty() ? "" : "; ", r->address, ": ", r->why);
    }
    if (!any)
      absl::StrAppend(&missing, missing.empty() ? "" : "; ", shard->Name(),
                      " has no ready replica (", why, ")");
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::UnavailableError(missing);
}

int64_t GrpcRemoteExperts::WorkBytes(int64_t m) const {
  // Each shard may get every token: x, ids and w out, an FP32 [m, K] back,
  // each twice (the message and gRPC's buffers), plus a token list.
  // A token reaches at most S shards.
  const int64_t per_token = SaturatingAdd(
      SaturatingMul(2, SaturatingAdd(SaturatingMul(plan_.k, DataTypeSize(plan_.type) + 4),
                                     SaturatingMul(plan_.s, 12))),
      8);
  const int64_t shards = static_cast<int64_t>(shards_.size());
  const int64_t reached = std::min(shards, plan_.s);
  return SaturatingAdd(SaturatingMul(SaturatingMul(m, per_token), reached), 4096 * shards);
}

Replica* GrpcRemoteExperts::Choose(Shard& shard, const Replica* not_this) const {
  const size_t n = shard.replicas.size();
  const uint32_t start = shard.next.fetch_add(1, std::memory_order_relaxed);
  Replica* fallback = nullptr;
  for (size_t j = 0; j < n; ++j) {
    Replica* r = shard.replicas[(start + j) % n].get();
    if (r == not_this) continue;
    absl::MutexLock lock(&r->mu);
    if (r->ready) return r;
    if (fallback == nullptr) fallback = r;
  }
  return fallback;
}

// The shard's tokens (those with a pair in its range), their rows of x, ids
// and w, as one binary request. False when no token is routed to it.
bool GrpcRemoteExperts::BuildRequest(const RemoteExpertsCall& call, ShardCall* sc) const {
  const ExpertRange range = sc->shard->range;
  for (int64_t t = 0; t < call.m; ++t) {
    for (int64_t j = 0; j < call.s; ++j) {
      const int64_t id = call.ids[t * call.s + j];
      if (id >= range.first && id < range.last) {
        sc->tokens.push_back(t);
        break;
      }
    }
  }
  if (sc->tokens.empty()) return false;
  ShardNames names;
  {
    absl::MutexLock lock(&sc->replica->mu);
    names = sc->replica->names;
  }
  const int64_t rows = static_cast<int64_t>(sc->tokens.size());
  const int64_t es = DataTypeSize(call.type);
  inference::ModelInferRequest& req = sc->request;
  req.Clear();
  req.set_model_name(plan_.model);
  req.set_model_version(plan_.version);
  auto add = [&](const std::string& name, absl::string_view datatype, int64_t width, int64_t bytes,
                 const void* base) {
    auto* in = req.add_inputs();
    in->set_name(name);
    in->set_datatype(std::string(datatype));
    in->add_shape(rows);
    in->add_shape(width);
    std::string* raw = req.add_raw_input_contents();
    raw->reserve(static_cast<size_t>(rows * width * bytes));  // rows appended, not zeroed first
    for (int64_t r = 0; r < rows; ++r) {
      raw->append(static_cast<const char*>(base) + sc->tokens[r] * width * bytes,
                  static_cast<size_t>(width * bytes));
    }
  };
  add(names.x, DataTypeName(call.type), call.k, es, call.x);
  add(names.ids, "INT64", call.s, 8, call.ids);
  add(names.w, "FP32", call.s, 4, call.w);
  req.add_outputs()->set_name(names.out);
  return true;
}

// The calls on a completion queue of their own, which this thread polls: the
// answers are read on the thread that waits for them, with no hand-off from
// one of gRPC's threads (about 0.1 ms a call on a busy machine).
void GrpcRemoteExperts::RunCalls(const std::vector<ShardCall*>& calls, absl::Time deadline) const {
  if (calls.empty()) return;
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<inference::ModelInferResponse>>>
      rpcs;
  std::vector<absl::Time> sent;
  for (ShardCall* sc : calls) {
    sc->context = std::make_unique<grpc::ClientContext>();
    sc->context->set_deadline(absl::ToChronoTime(deadline));
    sc->response.Clear();
    sent.push_back(absl::Now());
    rpcs.push_back(sc->replica->stub->AsyncModelInfer(sc->context.get(), sc->request, &cq));
    rpcs.back()->Finish(&sc->response, &sc->status, reinterpret_cast<void*>(rpcs.size() - 1));
  }
  for (size_t done = 0; done < calls.size(); ++done) {
    void* tag = nullptr;
    bool ok = false;
    if (!cq.Next(&tag, &ok)) break;  // not before every call has finished
    const size_t j = reinterpret_cast<size_t>(tag);
    ShardCall* sc = calls[j];
    sc->took = absl::Now() - sent[j];
    if (sc->shard->latency != nullptr) sc->shard->latency->Observe(absl::ToDoubleSeconds(sc->took));
  }
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
}

absl::Status GrpcRemoteExperts::AddAnswer(const RemoteExpertsCall& call, const ShardCall& sc,
                                          float* acc) const {
  const int64_t rows = static_cast<int64_t>(sc.tokens.size());
  const inference::ModelInferResponse& res = sc.response;
  if (res.outputs_size() != 1 || res.raw_output_contents_size() != 1 ||
      res.outputs(0).datatype() != "FP32" || res.outputs(0).shape_size() != 2 ||
      res.outputs(0).shape(0) != rows || res.outputs(0).shape(1) != call.k ||
      res.raw_output_contents(0).size() != static_cast<size_t>(rows * call.k * 4)) {
    return absl::InternalError(
        absl::StrCat("its answer is not FP32 [", rows, ", ", call.k, "] in binary"));
  }
  const char* raw = res.raw_output_contents(0).data();
  for (int64_t r = 0; r < rows; ++r) {
    float* dst = acc + sc.tokens[r] * call.k;
    for (int64_t j = 0; j < call.k; ++j) {
      float v;
      std::memcpy(&v, raw + (r * call.k + j) * 4, 4);
      dst[j] += v;
    }
  }
  return absl::OkStatus();
}

void GrpcRemoteExperts::CountExperts(const RemoteExpertsCall& call) const {
  if (expert_tokens_.empty()) return;
  std::vector<int64_t> counts(static_cast<size_t>(plan_.g), 0);
  for (int64_t p = 0; p < call.m * call.s; ++p) ++counts[call.ids[p]];
  for (int64_t e = 0; e < plan_.g; ++e) {
    if (counts[e] > 0) expert_tokens_[e]->Increment(static_cast<double>(counts[e]));
  }
}

absl::Status GrpcRemoteExperts::AddRoutedExperts(const RemoteExpertsCall& call, float* acc) const {
  if (call.k != plan_.k || call.s != plan_.s || call.type != plan_.type) {
    return absl::InternalError("sharded layer: the call differs from the layer");
  }
  CountExperts(call);
  const absl::Time deadline = std::min(call.deadline, absl::Now() + options_.default_timeout);
  std::vector<ShardCall> parts(shards_.size());
  std::vector<ShardCall*> first;
  for (size_t i = 0; i < shards_.size(); ++i) {
    parts[i].shard = shards_[i].get();
    parts[i].replica = Choose(*parts[i].shard, nullptr);
    if (BuildRequest(call, &parts[i])) first.push_back(&parts[i]);
  }
  RunCalls(first, deadline);
  // A replica that is gone or answered nonsense: once more on another.
  std::vector<ShardCall*> again;
  for (ShardCall* sc : first) {
    sc->result = sc->status.ok() ? AddAnswer(call, *sc, acc) : ShardStatus(sc->status);
    if (sc->result.ok()) continue;
    if (sc->shard->errors != nullptr) sc->shard->errors->Increment();
    const bool retry = absl::IsUnavailable(sc->result) || absl::IsInternal(sc->result);
    // Another replica; a shard of one address (a DNS name) is asked again on it:
    // its round_robin moves on to the next of the name's backends.
    Replica* other = retry ? Choose(*sc->shard, sc->replica) : nullptr;
    if (retry && other == nullptr) other = sc->replica;
    if (other != nullptr && absl::Now() < deadline) {
      sc->replica = other;
      again.push_back(sc);
    }
  }
  RunCalls(again, deadline);
  for (ShardCall* sc : again) {
    sc->result = sc->status.ok() ? AddAnswer(call, *sc, acc) : ShardStatus(sc->status);
    if (!sc->result.ok() && sc->shard->errors != nullptr) sc->shard->errors->Increment();
  }
  if (overhead_ != nullptr && call.began != absl::InfinitePast()) {
    absl::Duration slowest;
    for (ShardCall* sc : first) slowest = std::max(slowest, sc->took);
    overhead_->Observe(absl::ToDoubleSeconds(absl::Now() - call.began - slowest));
  }
  for (ShardCall* sc : first) {
    if (sc->result.ok()) continue;
    // The caller's request was valid: a shard's refusal is the server's
    // fault, reported as unavailable, with what the shard said.
    absl::StatusCode code = sc->result.code();
    if (code != absl::StatusCode::kDeadlineExceeded && code != absl::StatusCode::kCancelled &&
        code != absl::StatusCode::kResourceExhausted) {
      code = absl::StatusCode::kUnavailable;
    }
    return absl::Status(
        code, absl::StrCat("model '", plan_.model, "': ", sc->shard->Name(), " at ",
                           sc->replica->address, ": ", ClientText(sc->result.message(), 200)));
  }
  return absl::OkStatus();
}

}  // namespace

RemoteExpertsFactory GrpcRemoteExpertsFactory(ShardClientOptions options) {
  return [options](const ShardedLayerPlan& plan) -> absl::StatusOr<std::shared_ptr<RemoteExperts>> {
    return std::make_shared<GrpcRemoteExperts>(plan, options);
  };
}

}  // namespace gemmserve
