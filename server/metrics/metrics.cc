#include "server/metrics/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/common/model_name.h"

namespace gemmserve {
namespace {

constexpr const char* kReasonNames[] = {"queue_full", "deadline", "cancelled", "invalid",
                                        "over_limit"};

std::vector<double> DefaultLatencyBuckets() {
  std::vector<double> b;
  for (double v = 25e-6; v < 60; v *= 2) b.push_back(v);  // 25 us .. ~52 s
  return b;
}

std::vector<double> PowersOfTwo(double last) {
  std::vector<double> b;
  for (double v = 1; v <= last; v *= 2) b.push_back(v);
  return b;
}

}  // namespace

bool RejectReasonOf(absl::StatusCode code, RejectReason* reason) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument: *reason = RejectReason::kInvalid; return true;
    case absl::StatusCode::kResourceExhausted: *reason = RejectReason::kOverLimit; return true;
    case absl::StatusCode::kDeadlineExceeded: *reason = RejectReason::kDeadline; return true;
    case absl::StatusCode::kCancelled: *reason = RejectReason::kCancelled; return true;
    default: return false;
  }
}

void ModelMetrics::RecordResponse(absl::StatusCode code, absl::Duration since_arrival) {
  const int c = static_cast<int>(code);
  if (c >= 0 && c < kCodes) requests_[c]->Increment();
  request_duration_->Observe(absl::ToDoubleSeconds(since_arrival));
}

void ModelMetrics::RecordQueue(absl::Duration d) {
  queue_duration_->Observe(absl::ToDoubleSeconds(d));
}

void ModelMetrics::RecordBatch(int64_t requests, int64_t rows, absl::Duration compute) {
  batch_requests_->Observe(static_cast<double>(requests));
  batch_rows_->Observe(static_cast<double>(rows));
  compute_duration_->Observe(absl::ToDoubleSeconds(compute));
}

void ModelMetrics::RecordFlops(DataType type, int64_t flops) {
  const int t = static_cast<int>(type);
  if (t >= 0 && t < kDataTypes && flops > 0) flops_[t]->Increment(static_cast<double>(flops));
}

void ModelMetrics::RecordBytes(int64_t in, int64_t out) {
  if (in > 0) bytes_in_->Increment(static_cast<double>(in));
  if (out > 0) bytes_out_->Increment(static_cast<double>(out));
}

void ModelMetrics::RecordWeightBytes(int64_t bytes) {
  if (bytes > 0) weight_bytes_->Increment(static_cast<double>(bytes));
}

void ModelMetrics::RecordRejected(RejectReason reason) {
  rejected_[static_cast<int>(reason)]->Increment();
}

void ModelMetrics::SetQueueDepth(int64_t depth) { queue_depth_->Set(static_cast<double>(depth)); }

void ModelMetrics::RecordAdmitted(int64_t bytes) {
  if (bytes > 0) admitted_bytes_->Increment(static_cast<double>(bytes));
}

absl::StatusOr<std::vector<double>> Metrics::ParseBuckets(absl::string_view text) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    double v;
    if (!absl::SimpleAtod(part, &v) || !(v > 0) || (!out.empty() && v <= out.back())) {
      return absl::InvalidArgumentError(
          "--latency_buckets: expected increasing positive seconds, e.g. 0.0001,0.001,0.01");
    }
    out.push_back(v);
  }
  return out;
}

// Every family, registered once at Start; a model's series are Add()ed to
// them and Remove()d when its ModelMetrics goes.
struct Metrics::Families {
  prometheus::Family<prometheus::Counter>* requests;
  prometheus::Family<prometheus::Histogram>* request_duration;
  prometheus::Family<prometheus::Histogram>* queue_duration;
  prometheus::Family<prometheus::Histogram>* compute_duration;
  prometheus::Family<prometheus::Histogram>* batch_requests;
  prometheus::Family<prometheus::Histogram>* batch_rows;
  prometheus::Family<prometheus::Gauge>* queue_depth;
  prometheus::Family<prometheus::Counter>* flops;
  prometheus::Family<prometheus::Counter>* bytes;
  prometheus::Family<prometheus::Counter>* rejected;
  prometheus::Family<prometheus::Counter>* admitted_bytes;
  prometheus::Family<prometheus::Counter>* weight_bytes;
};

std::unique_ptr<Metrics> Metrics::Create(MetricsOptions options) {
  std::unique_ptr<Metrics> m(new Metrics);
  if (options.latency_buckets.empty()) options.latency_buckets = DefaultLatencyBuckets();
  m->options_ = std::move(options);
  m->registry_ = std::make_shared<prometheus::Registry>();
  prometheus::Registry& r = *m->registry_;
  prometheus::BuildGauge()
      .Name("gemmserve_build_info")
      .Help("Build of the running server; the value is 1.")
      .Register(r)
      .Add({{"version", m->options_.version}})
      .Set(1);
  m->inflight_ = &prometheus::BuildGauge()
                      .Name("gemmserve_inflight_requests")
                      .Help("Inference requests accepted and not yet answered.")
                      .Register(r)
                      .Add({});
  m->inflight_bytes_ = &prometheus::BuildGauge()
                            .Name("gemmserve_inflight_bytes")
                            .Help(
                                "Bytes that accepted, unanswered requests hold, as counted "
                                "against --max_inflight_bytes.")
                            .Register(r)
                            .Add({});
  m->families_ = RegisterFamilies(r);
  m->unknown_ = m->ForModel(kUnknownModelLabel);
  return m;
}

Metrics::Metrics() = default;

std::unique_ptr<Metrics::Families> Metrics::RegisterFamilies(prometheus::Registry& r) {
  return std::make_unique<Families>(Families{
      &prometheus::BuildCounter()
           .Name("gemmserve_requests_total")
           .Help("Inference requests answered, by gRPC status code.")
           .Register(r),
      &prometheus::BuildHistogram()
           .Name("gemmserve_request_duration_seconds")
           .Help("Arrival to response of inference requests, server side.")
           .Register(r),
      &prometheus::BuildHistogram()
           .Name("gemmserve_queue_duration_seconds")
           .Help("Arrival to the start of the request's kernel call.")
           .Register(r),
      &prometheus::BuildHistogram()
           .Name("gemmserve_compute_duration_seconds")
           .Help("Duration of each kernel call (one batch).")
           .Register(r),
      &prometheus::BuildHistogram()
           .Name("gemmserve_batch_requests")
           .Help("Requests per kernel call.")
           .Register(r),
      &prometheus::BuildHistogram()
           .Name("gemmserve_batch_rows")
           .Help("Rows (tokens) per kernel call.")
           .Register(r),
      &prometheus::BuildGauge()
           .Name("gemmserve_queue_depth")
           .Help("Requests waiting in the model's batcher.")
           .Register(r),
      &prometheus::BuildCounter()
           .Name("gemmserve_flops_total")
           .Help("Floating-point (or integer) operations computed, 2*M*N*K.")
           .Register(r),
      &prometheus::BuildCounter()
           .Name("gemmserve_bytes_total")
           .Help("Tensor bytes received (in) and sent (out).")
           .Register(r),
      &prometheus::BuildCounter()
           .Name("gemmserve_rejected_total")
           .Help("Requests refused or dropped, by reason.")
           .Register(r),
      &prometheus::BuildCounter()
           .Name("gemmserve_admitted_bytes_total")
           .Help("Bytes accepted requests were counted at against --max_inflight_bytes "
                 "(inputs, outputs, bookkeeping and scratch).")
           .Register(r),
      &prometheus::BuildCounter()
           .Name("gemmserve_weight_bytes_total")
           .Help("Bytes of weights the kernel calls used, each expert's (or B's) once per "
                 "call as stored (quantized integers with their scales, panels, or row-major); "
                 "its rate is the weights' share of memory bandwidth.")
           .Register(r),
  });
}

Metrics::~Metrics() {
  // Series of names still held elsewhere are dropped with the registry.
  unknown_.reset();
}

void Metrics::AddInflight(int64_t delta) { inflight_->Increment(static_cast<double>(delta)); }

void Metrics::AddInflightBytes(int64_t delta) {
  inflight_bytes_->Increment(static_cast<double>(delta));
}

size_t Metrics::model_label_count() const {
  absl::MutexLock lock(&mu_);
  return models_.size();
}

std::shared_ptr<ModelMetrics> Metrics::ForModel(absl::string_view model) {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model);
  if (it != models_.end()) {
    if (std::shared_ptr<ModelMetrics> alive = it->second.metrics.lock()) return alive;
  }
  // New, or its last holder is letting go right now: Add() below hands back
  // the series it still has, and its Release leaves them to this one.
  auto mm = std::make_unique<ModelMetrics>();
  mm->name_ = std::string(model);
  const std::string& name = mm->name_;
  Families& f = *families_;
  for (int c = 0; c < ModelMetrics::kCodes; ++c) {
    mm->requests_[c] = &f.requests->Add(
        {{"model", name}, {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(c))}});
  }
  const auto& lat = options_.latency_buckets;
  mm->request_duration_ = &f.request_duration->Add({{"model", name}}, lat);
  mm->queue_duration_ = &f.queue_duration->Add({{"model", name}}, lat);
  mm->compute_duration_ = &f.compute_duration->Add({{"model", name}}, lat);
  mm->batch_requests_ = &f.batch_requests->Add({{"model", name}}, PowersOfTwo(1024));
  mm->batch_rows_ = &f.batch_rows->Add({{"model", name}}, PowersOfTwo(65536));
  mm->queue_depth_ = &f.queue_depth->Add({{"model", name}});
  for (DataType t : kAllDataTypes) {
    mm->flops_[static_cast<int>(t)] =
        &f.flops->Add({{"model", name}, {"datatype", std::string(DataTypeName(t))}});
  }
  mm->bytes_in_ = &f.bytes->Add({{"model", name}, {"direction", "in"}});
  mm->bytes_out_ = &f.bytes->Add({{"model", name}, {"direction", "out"}});
  for (int i = 0; i < ModelMetrics::kReasons; ++i) {
    mm->rejected_[i] = &f.rejected->Add({{"model", name}, {"reason", kReasonNames[i]}});
  }
  mm->admitted_bytes_ = &f.admitted_bytes->Add({{"model", name}});
  mm->weight_bytes_ = &f.weight_bytes->Add({{"model", name}});
  ModelMetrics* raw = mm.get();
  std::shared_ptr<ModelMetrics> shared(mm.release(), [this](ModelMetrics* p) { Release(p); });
  models_[raw->name_] = Entry{shared, raw};
  return shared;
}

void Metrics::Release(ModelMetrics* m) {
  std::unique_ptr<ModelMetrics> owned(m);
  absl::MutexLock lock(&mu_);
  auto it = models_.find(m->name_);
  if (it == models_.end() || it->second.raw != m) return;  // the name lives on in another
  models_.erase(it);
  Families& f = *families_;
  for (prometheus::Counter* c : m->requests_) f.requests->Remove(c);
  f.request_duration->Remove(m->request_duration_);
  f.queue_duration->Remove(m->queue_duration_);
  f.compute_duration->Remove(m->compute_duration_);
  f.batch_requests->Remove(m->batch_requests_);
  f.batch_rows->Remove(m->batch_rows_);
  f.queue_depth->Remove(m->queue_depth_);
  for (prometheus::Counter* c : m->flops_) f.flops->Remove(c);
  f.bytes->Remove(m->bytes_in_);
  f.bytes->Remove(m->bytes_out_);
  for (prometheus::Counter* c : m->rejected_) f.rejected->Remove(c);
  f.admitted_bytes->Remove(m->admitted_bytes_);
  f.weight_bytes->Remove(m->weight_bytes_);
}

}  // namespace gemmserve
