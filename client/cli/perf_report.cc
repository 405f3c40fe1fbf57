// gemmserve-cli perf's reports: the text report, its JSON, perf_analyzer's
// CSV, the latency percentiles and the server's breakdown from its
// statistics (perf.h declares them).
#include "client/cli/perf.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/tensor/shape.h"

namespace gemmserve::client {
namespace {

// ---------------------------------------------------------------- reports

std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// Most frequent first, then by name.
std::vector<std::pair<std::string, int64_t>> ErrorsByCount(
    const std::map<std::string, int64_t>& errors) {
  std::vector<std::pair<std::string, int64_t>> sorted(errors.begin(), errors.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return sorted;
}

}  // namespace

std::optional<LatencySummary> SummarizeLatencies(std::vector<int64_t> latencies_us) {
  if (latencies_us.empty()) return std::nullopt;
  std::sort(latencies_us.begin(), latencies_us.end());
  const size_t n = latencies_us.size();
  const auto percentile = [&](int p) {
    const size_t rank = (n * p + 99) / 100;  // ceil(n * p / 100), at least 1 as n, p > 0
    return latencies_us[rank - 1];
  };
  LatencySummary summary;
  summary.p50_us = percentile(50);
  summary.p90_us = percentile(90);
  summary.p95_us = percentile(95);
  summary.p99_us = percentile(99);
  summary.max_us = latencies_us.back();
  double sum = 0;
  for (int64_t v : latencies_us) sum += static_cast<double>(v);
  summary.mean_us = sum / static_cast<double>(n);
  return summary;
}

std::string FormatPerfReport(const PerfResult& result) {
  int64_t error_count = 0;
  for (const auto& [code, n] : result.errors) error_count += n;
  std::string text = result.open_loop
                         ? absl::StrFormat(
                               "model %s, open loop, %g infer/s (Poisson), at most %d in flight, "
                               "%.1f s\n",
                               result.model, result.rate, result.concurrency, result.duration_s)
                         : absl::StrFormat("model %s, closed loop, concurrency %d, %.1f s\n",
                                           result.model, result.concurrency, result.duration_s);
  std::vector<std::string> inputs;
  for (const PerfInput& input : result.inputs) {
    inputs.push_back(
        absl::StrCat(input.name, " ", input.datatype, " ", ShapeToString(input.shape)));
  }
  absl::StrAppend(&text, "  inputs ", inputs.empty() ? "(none)" : absl::StrJoin(inputs, ", "), "; ",
                  result.distinct_requests,
                  result.distinct_requests == 1 ? " request throughout" : " distinct requests",
                  result.system_shared_memory ? "; tensors in system shared memory" : "",
                  result.http ? "; over HTTP/REST" : "",
                  result.streaming ? "; over one ModelStreamInfer stream\n" : "\n");
  absl::StrAppendFormat(&text, "  requests %d ok, %d errors; throughput %.1f infer/s\n", result.ok,
                        error_count, result.throughput);
  if (result.open_loop) {
    absl::StrAppendFormat(&text, "  dropped by the client %d (%d in flight already)\n",
                          result.client_dropped, result.concurrency);
  }
  if (result.latency) {
    const LatencySummary& l = *result.latency;
    absl::StrAppendFormat(&text,
                          "  latency p50 %d us, p90 %d us, p95 %d us, p99 %d us, max %d us, "
                          "mean %.0f us\n",
                          l.p50_us, l.p90_us, l.p95_us, l.p99_us, l.max_us, l.mean_us);
  } else {
    text += "  latency: no successful requests\n";
  }
  if (result.server) {
    const ServerBreakdown& b = *result.server;
    absl::StrAppendFormat(&text, "  server: queue %.0f us, compute infer %.0f us per request",
                          b.queue_us, b.compute_infer_us);
    if (b.compute_input_us > 0 || b.compute_output_us > 0) {
      absl::StrAppendFormat(&text, " (input %.0f us, output %.0f us)", b.compute_input_us,
                            b.compute_output_us);
    }
    absl::StrAppendFormat(&text, "; %d requests answered\n", b.requests);
  }
  if (!result.errors.empty()) {
    std::vector<std::string> parts;
    for (const auto& [code, n] : ErrorsByCount(result.errors)) {
      parts.push_back(absl::StrCat(code, " ", n));
    }
    absl::StrAppend(&text, "  errors: ", absl::StrJoin(parts, ", "), "\n");
  }
  return text;
}

std::string PerfResultJson(const PerfResult& result) {
  std::vector<std::string> errors;
  for (const auto& [code, n] : ErrorsByCount(result.errors)) {
    errors.push_back(absl::StrCat(JsonString(code), ": ", n));
  }
  const auto latency = [&](int64_t LatencySummary::*field) {
    return result.latency ? absl::StrCat((*result.latency).*field) : std::string("null");
  };
  std::vector<std::string> inputs;
  for (const PerfInput& input : result.inputs) {
    inputs.push_back(absl::StrFormat("%s: {\"datatype\": %s, \"shape\": [%s]}",
                                     JsonString(input.name), JsonString(input.datatype),
                                     absl::StrJoin(input.shape, ", ")));
  }
  const std::string server =
      result.server
          ? absl::StrFormat(
                "{\"requests\": %d, \"queue_us\": %.3f, \"compute_input_us\": %.3f, "
                "\"compute_infer_us\": %.3f, \"compute_output_us\": %.3f}",
                result.server->requests, result.server->queue_us, result.server->compute_input_us,
                result.server->compute_infer_us, result.server->compute_output_us)
          : std::string("null");
  return absl::StrFormat(
      "{\"model\": %s, \"inputs\": {%s}, \"distinct_requests\": %d, \"mode\": \"%s\", "
      "\"concurrency\": %d, \"rate\": %s, "
      "\"duration_s\": %.10g, \"ok\": %d, \"errors\": {%s}, \"client_dropped\": %d, "
      "\"throughput\": %.3f, \"p50_us\": %s, \"p90_us\": %s, \"p95_us\": %s, \"p99_us\": %s, "
      "\"max_us\": %s, \"mean_us\": %s, \"server\": %s, \"shared_memory\": \"%s\", "
      "\"protocol\": \"%s\", \"streaming\": %s}\n",
      JsonString(result.model), absl::StrJoin(inputs, ", "), result.distinct_requests,
      result.open_loop ? "open_loop" : "closed_loop", result.concurrency,
      result.open_loop ? absl::StrFormat("%.10g", result.rate) : "null", result.duration_s,
      result.ok, absl::StrJoin(errors, ", "), result.client_dropped, result.throughput,
      latency(&LatencySummary::p50_us), latency(&LatencySummary::p90_us),
      latency(&LatencySummary::p95_us), latency(&LatencySummary::p99_us),
      latency(&LatencySummary::max_us),
      result.latency ? absl::StrFormat("%.3f", result.latency->mean_us) : "null", server,
      result.system_shared_memory ? "system" : "none", result.http ? "http" : "grpc",
      result.streaming ? "true" : "false");
}

std::optional<ServerBreakdown> ServerBreakdownBetween(const inference::ModelStatistics& before,
                                                      const inference::ModelStatistics& after) {
  const inference::InferStatistics& a = before.inference_stats();
  const inference::InferStatistics& b = after.inference_stats();
  if (b.success().count() <= a.success().count()) return std::nullopt;
  const auto diff = [](const inference::StatisticDuration& x, const inference::StatisticDuration& y,
                       double* out) {
    if (y.ns() < x.ns()) return false;
    *out = static_cast<double>(y.ns() - x.ns());
    return true;
  };
  ServerBreakdown breakdown;
  breakdown.requests = static_cast<int64_t>(b.success().count() - a.success().count());
  double queue, input, infer, output;
  if (!diff(a.queue(), b.queue(), &queue) || !diff(a.compute_input(), b.compute_input(), &input) ||
      !diff(a.compute_infer(), b.compute_infer(), &infer) ||
      !diff(a.compute_output(), b.compute_output(), &output)) {
    return std::nullopt;
  }
  const double per_request_us = 1e3 * static_cast<double>(breakdown.requests);
  breakdown.queue_us = queue / per_request_us;
  breakdown.compute_input_us = input / per_request_us;
  breakdown.compute_infer_us = infer / per_request_us;
  breakdown.compute_output_us = output / per_request_us;
  return breakdown;
}

std::string PerfCsv(const std::vector<PerfResult>& results) {
  const bool rates = !results.empty() && results.front().open_loop;
  std::string csv =
      absl::StrCat(rates ? "Request Rate" : "Concurrency",
                   ",Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
                   "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
                   "p50 latency,p90 latency,p95 latency,p99 latency\n");
  for (const PerfResult& r : results) {
    const ServerBreakdown b = r.server.value_or(ServerBreakdown{});
    const LatencySummary l = r.latency.value_or(LatencySummary{});
    const double server_us =
        b.queue_us + b.compute_input_us + b.compute_infer_us + b.compute_output_us;
    const auto us = [](double v) { return static_cast<int64_t>(std::llround(v)); };
    absl::StrAppend(&csv, rates ? absl::StrFormat("%g", r.rate) : absl::StrCat(r.concurrency), ",",
                    absl::StrFormat("%.2f", r.throughput), ",0,",
                    r.latency ? us(std::max(0.0, l.mean_us - server_us)) : 0, ",", us(b.queue_us),
                    ",", us(b.compute_input_us), ",", us(b.compute_infer_us), ",",
                    us(b.compute_output_us), ",0,", l.p50_us, ",", l.p90_us, ",", l.p95_us, ",",
                    l.p99_us, "\n");
  }
  return csv;
}

}  // namespace gemmserve::client
