// The load generator behind `gemmserve-cli perf`: drives one model of a KServe
// v2 gRPC server with ModelInfer calls and reports throughput and latency,
// like Triton's perf_analyzer.
//
// Two modes:
//   closed loop (rate == 0): `concurrency` callers, each sending its next
//     request as soon as the answer to its previous one arrives;
//   open loop (rate > 0): Poisson arrivals at `rate` requests/s (exponential
//     gaps drawn from a generator seeded with `seed`), sent whatever the
//     answers do; `concurrency` caps the requests in flight, and an arrival
//     that finds the cap reached is not sent but counted in client_dropped.
//
// A run lasts warmup + duration. Only calls that complete inside the
// measurement window [start + warmup, start + warmup + duration) count, and
// only open-loop arrivals inside it count as dropped; calls still in flight at
// the end get a short grace period, then are cancelled, and are not counted.
// Latency is measured from the start of the call to its completion, for
// successful calls only; failed calls are counted by status code.
//
// Requests are made before the run (MakePerfInputPool): `request_pool`
// distinct ones, each with its own random values and group indices (a new
// seed each), so that consecutive calls route tokens to different experts as
// a server's clients do, rather than keeping one set of experts hot in the
// cache. Each is serialized once; calls take them in turn and send the bytes
// through the gRPC callback API on one channel, and answers are not parsed,
// so the client spends as little CPU as possible beside the server it
// measures. The pool holds at most kPerfPoolMaxBytes of tensors (fewer
// requests when they are large; at least one).
//
//   GEMMSERVE_ASSIGN_OR_RETURN(Client client, Client::Connect("127.0.0.1:8001"));
//   PerfOptions options;
//   options.model = "matmul";
//   options.shapes = {{"A", {2, 3}}, {"B", {3, 4}}};
//   GEMMSERVE_ASSIGN_OR_RETURN(auto metadata, client.ModelMetadata("matmul"));
//   GEMMSERVE_ASSIGN_OR_RETURN(std::vector<HostTensor> inputs,
//                              MakePerfInputs(metadata, nullptr, options));
//   GEMMSERVE_ASSIGN_OR_RETURN(PerfResult result,
//                              RunLoad(client.channel(), std::move(inputs), options));
//   std::cout << FormatPerfReport(result);
#ifndef GEMMSERVE_CLIENT_CLI_PERF_H_
#define GEMMSERVE_CLIENT_CLI_PERF_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/channel.h>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cpp/host_tensor.h"
#include "grpc_service.pb.h"
#include "model_config.pb.h"

namespace gemmserve::client {

// Calls still in flight when the window closes get this long to finish
// before they are cancelled (unary and streaming loads alike); they are not
// counted either way, the grace only spares the server a burst of
// cancellations.
inline constexpr absl::Duration kDrainGrace = absl::Seconds(2);

// `--shape NAME:d1,d2,...`: the shape to send for one input.
struct ShapeOverride {
  std::string name;
  std::vector<int64_t> dims;
};

struct PerfOptions {
  std::string model;
  // Closed loop: the number of callers. Open loop: the cap on calls in flight.
  int concurrency = 1;
  absl::Duration duration = absl::Seconds(10);
  absl::Duration warmup = absl::Seconds(1);
  double rate = 0;  // requests per second; 0 is the closed loop
  std::vector<ShapeOverride> shapes;
  int64_t rows = 1;  // the first dimension of an input when it is -1
  absl::Duration timeout = absl::InfiniteDuration();  // deadline of each call
  uint64_t seed = 0;                                  // input values and open-loop arrivals
  int request_pool = 64;  // distinct requests, taken in turn; 1 sends one request throughout
  // `--input_data zero`: every input all zeros (indices 0), one request
  // throughout; else random values (`--input_data random`, the default).
  bool zero_data = false;
  // `--input_data FILE.json`: perf_analyzer's input data file, a request per
  // entry (perf_input_data.h); empty: zero or random data.
  std::string input_data_file;
  // `--shared_memory system`: inputs are read from, and outputs written to,
  // system shared memory regions this run creates and registers (one request
  // throughout, as perf_analyzer sends it); RunPerf sets them up.
  bool system_shared_memory = false;
  // `--protocol=http`: the REST API instead of gRPC (perf_http.h).
  bool http = false;
  // `--streaming`: every request over one ModelStreamInfer stream
  // (perf_stream.h); gRPC only.
  bool streaming = false;
};

inline constexpr int kPerfMaxConcurrency = 10000;
inline constexpr int64_t kPerfPoolMaxBytes = int64_t{256} << 20;

// The time frame of one run, shared by every load generator (gRPC, HTTP,
// stream): it starts when made; calls are measured from start + warmup for
// `duration`.
struct PerfWindow {
  using Clock = std::chrono::steady_clock;
  Clock::time_point start, begin, end;
  static PerfWindow StartingNow(const PerfOptions& options);
  bool Measures(Clock::time_point t) const { return t >= begin && t < end; }
};

// The open loop's arrivals: calls `arrive(t)` at each arrival of a Poisson
// process of options.rate per second (exponential gaps drawn from a
// generator seeded with options.seed) in [window.start, window.end),
// sleeping until each is due; arrivals due while it was late go at once,
// which keeps the rate. Stops early when `arrive` returns false.
void SendPoissonArrivals(const PerfOptions& options, const PerfWindow& window,
                         absl::FunctionRef<bool(PerfWindow::Clock::time_point)> arrive);

// Parses "NAME:d1,d2,..." ("NAME:" is a scalar). INVALID_ARGUMENT otherwise.
absl::StatusOr<ShapeOverride> ParseShapeOverride(absl::string_view text);

// INVALID_ARGUMENT for options out of range (they are the user's): an empty
// model, concurrency outside [1, 10000], a duration outside (0, 1 day], a
// negative or over-1-day warm-up, a negative or over-1e6 rate, a negative row
// count, a non-positive timeout, a request pool outside [1, 100000], or an
// input named in two ShapeOverrides.
absl::Status CheckPerfOptions(const PerfOptions& options);

// One tensor per input of `metadata`, in its order, filled with RandomTensor
// values (seeded with options.seed):
//   - datatype: the one the metadata reports;
//   - shape: the ShapeOverride naming the input, else the metadata's, with a
//     variable (-1) dimension set to options.rows when it is the first one and
//     to 1 otherwise;
//   - an input the model `config` marks optional is left out unless a
//     ShapeOverride names it;
//   - an index input, i.e. one named "group_indices", or any INT32/INT64 input
//     of a model whose config has a "groups" parameter, holds indices in
//     [0, G): G is that parameter; without it, the first dimension of the
//     input "weights" as sent, if there is one and it is positive; else 1.
// `config` may be null (the server has no ModelConfig RPC).
// INVALID_ARGUMENT when a ShapeOverride names no input of the model (a usage
// error); FAILED_PRECONDITION when the metadata or config is unusable: a
// datatype gemmserve does not know, a bad "groups" parameter, or inputs over
// the random-data limit.
absl::StatusOr<std::vector<HostTensor>> MakePerfInputs(
    const inference::ModelMetadataResponse& metadata, const inference::ModelConfig* config,
    const PerfOptions& options);

// The requests of a run (one with options.zero_data): options.request_pool sets of MakePerfInputs,
// the i-th made with seed options.seed + i, as many as fit in kPerfPoolMaxBytes (at least one).
// Errors as MakePerfInputs.
absl::StatusOr<std::vector<std::vector<HostTensor>>> MakePerfInputPool(
    const inference::ModelMetadataResponse& metadata, const inference::ModelConfig* config,
    const PerfOptions& options);

// Latency statistics of the successful calls, in microseconds.
struct LatencySummary {
  int64_t p50_us = 0;
  int64_t p90_us = 0;
  int64_t p95_us = 0;
  int64_t p99_us = 0;
  int64_t max_us = 0;
  double mean_us = 0;
};

// Nearest-rank percentiles: pX is the smallest value with at least X% of the
// values at or below it. Empty input gives nullopt.
std::optional<LatencySummary> SummarizeLatencies(std::vector<int64_t> latencies_us);

// What one request carries, for the report.
struct PerfInput {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
};

// The server's side of a level, from the model's ModelStatistics read just
// before and just after the level's run (warm-up included): the requests it
// answered successfully meanwhile and, per such request, the mean time they
// spent queued and in each compute phase, in microseconds.
struct ServerBreakdown {
  int64_t requests = 0;
  double queue_us = 0;
  double compute_input_us = 0;
  double compute_infer_us = 0;
  double compute_output_us = 0;
};

// The difference `after` - `before` of one model's statistics; nullopt when
// no request succeeded in between or the counters went backwards (the model
// was reloaded).
std::optional<ServerBreakdown> ServerBreakdownBetween(const inference::ModelStatistics& before,
                                                      const inference::ModelStatistics& after);

struct PerfResult {
  std::string model;
  std::vector<PerfInput> inputs;
  int distinct_requests = 1;  // the pool's size
  bool open_loop = false;
  int concurrency = 0;
  double rate = 0;  // open loop only
  double duration_s = 0;
  int64_t ok = 0;
  std::map<std::string, int64_t> errors;  // status code name -> calls
  int64_t client_dropped = 0;             // open loop only
  double throughput = 0;                  // successful calls per second
  std::optional<LatencySummary> latency;  // nullopt without successful calls
  std::optional<ServerBreakdown> server;  // nullopt without server statistics
  bool system_shared_memory = false;      // the tensors went through shared memory
  bool http = false;                      // sent over the REST API
  bool streaming = false;                 // sent over one ModelStreamInfer stream
};

// A run's result from what its callers recorded in the measured window:
// the options' mode, rate and duration, the successful calls' latencies,
// the failures by status code name and the client's drops.
PerfResult MakePerfResult(const PerfOptions& options, std::vector<int64_t> latencies_us,
                          std::map<std::string, int64_t> errors, int64_t dropped);

// The inputs of a pool of requests for the report: names and datatypes must
// agree (INVALID_ARGUMENT otherwise); dimensions that differ are -1, and a
// shape whose rank differs is empty.
absl::StatusOr<std::vector<PerfInput>> DescribePool(
    const std::vector<std::vector<HostTensor>>& pool);

// The levels of `--concurrency_range` or `--request_rate_range` (`flag`
// names it in messages): "START", "START:END" or "START:END:STEP", giving
// START, START + STEP, ... while at most END (STEP defaults to 1). With
// `integral` every part must be an integer. INVALID_ARGUMENT for text that
// is not a range, START > END, a step that is not positive, a level that is
// not positive, or more than kPerfMaxLevels levels.
inline constexpr int kPerfMaxLevels = 1000;
absl::StatusOr<std::vector<double>> ParsePerfRange(absl::string_view flag, absl::string_view text,
                                                   bool integral);

// Runs the load on `channel` (a server error is a result, not a failure).
// INVALID_ARGUMENT for bad options, as CheckPerfOptions.
absl::StatusOr<PerfResult> RunLoad(std::shared_ptr<grpc::Channel> channel,
                                   std::vector<HostTensor> inputs, const PerfOptions& options);
// The same with a pool of requests (MakePerfInputPool), taken in turn: every
// request must have the same inputs, shapes and datatypes.
absl::StatusOr<PerfResult> RunLoadPool(std::shared_ptr<grpc::Channel> channel,
                                       std::vector<std::vector<HostTensor>> pool,
                                       const PerfOptions& options);

// The same with requests the caller built (ModelInferRequests with
// shared-memory parameters, say), taken in turn; `inputs` describes them for
// the report.
absl::StatusOr<PerfResult> RunLoadRequests(
    std::shared_ptr<grpc::Channel> channel,
    const std::vector<inference::ModelInferRequest>& requests, std::vector<PerfInput> inputs,
    const PerfOptions& options);

// The report on stdout:
//   model matmul, closed loop, concurrency 4, 10.0 s
//     inputs A FP32 [2,3], B FP32 [3,4]; 64 distinct requests
//     requests 12345 ok, 0 errors; throughput 1234.5 infer/s
//     latency p50 812 us, p90 1203 us, p95 1500 us, p99 2101 us, max 3100 us, mean 850 us
//     server: queue 120 us, compute infer 610 us per request    (with a ServerBreakdown)
//     errors: UNAVAILABLE 3, DEADLINE_EXCEEDED 1          (only with errors)
// Open loop names the rate and the cap in the first line and adds a line with
// the client's drops.
std::string FormatPerfReport(const PerfResult& result);

// {"model", "inputs": {"NAME": {"datatype", "shape"}}, "distinct_requests",
// "mode" ("closed_loop" / "open_loop"),
// "concurrency", "rate" (null in closed loop), "duration_s", "ok", "errors": {"CODE": n},
// "client_dropped", "throughput", "p50_us", "p90_us", "p95_us", "p99_us", "max_us", "mean_us"} —
// the latencies are null without successful calls; "server": {"requests", "queue_us",
// "compute_input_us", "compute_infer_us", "compute_output_us"} or null,
// "shared_memory" ("none"/"system"), "protocol" ("grpc"/"http"), "streaming".
std::string PerfResultJson(const PerfResult& result);

// perf_analyzer's CSV (`-f FILE`): a header, then a row per level, in
// microseconds:
//   Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,
//   Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,
//   p50 latency,p90 latency,p95 latency,p99 latency
// The first column is "Request Rate" when the levels are open-loop rates.
// Client Send and Client Recv are 0: requests are serialized before the run
// and answers are not parsed. Network+Server Send/Recv is the mean latency
// less the server's queue and compute times (at least 0); the server columns
// are 0 for a level without a ServerBreakdown, the latencies 0 without
// successful calls.
std::string PerfCsv(const std::vector<PerfResult>& results);

}  // namespace gemmserve::client

#endif  // GEMMSERVE_CLIENT_CLI_PERF_H_
