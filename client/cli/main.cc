// gemmserve-cli: health checks, model metadata, inference and load generation
// against a gemmserve (or any KServe v2 gRPC) server from the command line,
// and a no-op server to measure the protocol's own cost. It is also the
// Docker HEALTHCHECK, hence the strict exit codes: 0 success, 1 failure (RPC
// or file error), 2 usage error. The commands live in commands.h; this file
// parses the command line and dispatches.
//
// Flags are absl flags, but the command line is parsed here rather than by
// absl::ParseCommandLine: that one exits with status 1 on a bad flag and on
// --help, which would read as "unhealthy" or "RPC failed" to a script.
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cli/commands.h"
#include "client/cli/perf.h"
#include "client/cpp/client.h"

ABSL_FLAG(std::string, url, "127.0.0.1:8001", "server address, host:port");
ABSL_FLAG(std::string, url_file, "",
          "read the server address from this file, as gemmserve --address_file writes it (a "
          "wildcard host becomes loopback); --url when the file cannot be read");
ABSL_FLAG(int64_t, timeout_ms, 0,
          "deadline of the call (perf: of each call), milliseconds; 0 means none");
ABSL_FLAG(std::string, output, "", "infer: write the model's only output to this .npy file");
ABSL_FLAG(std::string, output_dir, "", "infer: write each output to DIR/NAME.npy");
ABSL_FLAG(uint64_t, seed, 0, "infer, perf: seed of the random inputs (perf: and arrivals)");
ABSL_FLAG(std::string, u2_datatype, "BF16",
          "infer: datatype of '<u2' (uint16) .npy inputs, BF16 or FP16");
ABSL_FLAG(std::string, model, "", "perf: the model to load");
ABSL_FLAG(int32_t, concurrency, 0,
          "perf: callers (closed loop) or most calls in flight (open loop); 0: 1 or 64");
ABSL_FLAG(double, duration, 10, "perf: seconds measured, after the warm-up");
ABSL_FLAG(double, warmup, 1, "perf: seconds of load before measuring");
ABSL_FLAG(double, rate, 0, "perf: open loop, Poisson arrivals per second; 0 is closed loop");
ABSL_FLAG(int64_t, rows, 1, "perf: size of an input's variable (-1) first dimension");
ABSL_FLAG(std::string, json_out, "", "perf: also write the results as JSON to this file");
ABSL_FLAG(int32_t, request_pool, 64,
          "perf: distinct requests made before the run (fresh values and group indices each, "
          "up to 256 MiB of them), sent in turn; 1 sends one request throughout");
ABSL_FLAG(std::string, concurrency_range, "",
          "perf: closed-loop levels START:END:STEP, a run each (instead of --concurrency)");
ABSL_FLAG(std::string, request_rate_range, "",
          "perf: open-loop rates START:END:STEP in requests/s, a run each (instead of --rate)");
ABSL_FLAG(std::string, input_data, "random",
          "perf: random (fresh values per request), zero (all zeros, one request), or "
          "perf_analyzer's JSON input data file (a request per entry)");
ABSL_FLAG(std::string, protocol, "grpc",
          "perf: grpc, or http: the REST API with the binary tensor extension (--url is then "
          "the HTTP port)");
ABSL_FLAG(std::string, shared_memory, "none",
          "perf: none, or system: tensors in system shared memory regions the run creates "
          "(the server needs --allow_client_shm)");
ABSL_FLAG(bool, streaming, false,
          "perf: send every request over one ModelStreamInfer stream (gRPC's bidirectional "
          "stream), as perf_analyzer's --streaming");
ABSL_FLAG(std::string, f, "", "perf: also write perf_analyzer's CSV, a row per level");
ABSL_FLAG(std::string, host, "127.0.0.1", "noop-server: address to listen on");
ABSL_FLAG(int32_t, port, 0, "noop-server: port; 0 picks a free one");

namespace gemmserve::client {
namespace {

// The flags this program accepts, in the order --help lists them.
constexpr absl::string_view kFlagNames[] = {"url",
                                            "url_file",
                                            "timeout_ms",
                                            "output",
                                            "output_dir",
                                            "seed",
                                            "u2_datatype",
                                            "model",
                                            "concurrency",
                                            "duration",
                                            "warmup",
                                            "rate",
                                            "rows",
                                            "json_out",
                                            "request_pool",
                                            "concurrency_range",
                                            "request_rate_range",
                                            "input_data",
                                            "shared_memory",
                                            "protocol",
                                            "streaming",
                                            "f",
                                            "host",
                                            "port"};

// The address to call: --url_file's (what the server wrote once it was
// listening, so a container's health check follows the port the server was
// given), else --url.
std::string ServerAddress() {
  const std::string path = absl::GetFlag(FLAGS_url_file);
  if (!path.empty()) {
    std::ifstream in(path);
    std::string address;
    if (in && std::getline(in, address) && !address.empty()) {
      for (absl::string_view wildcard : {"0.0.0.0:", "[::]:"}) {
        if (absl::StartsWith(address, wildcard)) {
          address = absl::StrCat(wildcard == "[::]:" ? "[::1]:" : "127.0.0.1:",
                                 address.substr(wildcard.size()));
        }
      }
      return address;
    }
  }
  return absl::GetFlag(FLAGS_url);
}

// --shape repeats and its values hold commas, so it is no absl flag: the
// parser collects its values itself.
constexpr absl::string_view kShapeFlag = "shape";

constexpr int kOpenLoopDefaultConcurrency = 64;

// The commands and their arguments, as --help prints them.
constexpr char kCommandsUsage[] = R"(usage: gemmserve-cli [flags] COMMAND [ARGS...]

commands:
  health [SERVICE]          grpc.health.v1 check of the server (or of SERVICE);
                            prints SERVING or NOT_SERVING, exits 0 only if SERVING
  metadata MODEL            prints the model's versions, platform, inputs, outputs
  infer MODEL NAME=SPEC...  runs MODEL on one input per NAME=SPEC operand and
                            prints each output (large ones abbreviated), or
                            writes it with --output / --output_dir. SPEC is:
      path.npy                      a NumPy file (C order, little-endian; '<u2'
                                    holds BF16 bits, see --u2_datatype)
      random:DTYPE:DIMS             random values: floats uniform in [-1, 1],
                                    signed integers in [-8, 8], unsigned in [0, 8]
      random_index:DTYPE:DIMS:G     random integers in [0, G), e.g. group indices
    DTYPE is a KServe datatype (FP32, BF16, INT64, ...), DIMS is like 3x4 (empty
    for a scalar). Random inputs come from one generator seeded with --seed, so
    a command line always sends the same data.
  perf --model=MODEL        load generator, like Triton's perf_analyzer: sends
                            ModelInfer calls for --duration seconds after a
                            --warmup and prints throughput and latency
                            percentiles (of the calls that complete in that
                            window; errors are counted by status code).
      closed loop (default)         --concurrency callers, each sending its
                                    next call when the previous one returns
      open loop (--rate=R)          Poisson arrivals at R calls/s whatever the
                                    answers; --concurrency caps the calls in
                                    flight, and arrivals over the cap are
                                    reported as dropped by the client
    Inputs follow the model's metadata: its datatype, and its shape with a -1
    first dimension set to --rows and other -1s set to 1, unless
    --shape=NAME:d1,d2,... (repeatable) gives the shape. Values are random as
    above; group_indices (and any INT32/INT64 input of a model with a "groups"
    parameter) hold valid indices in [0, G), G being that parameter or the
    first dimension of the input "weights". Optional inputs are sent only when
    a --shape names them. --request_pool (default 64) distinct requests are
    made first, each with fresh values and group indices, and sent in turn, so
    consecutive calls route to different experts as a server's clients do
    (at most 256 MiB of them; 1 sends one request throughout). Exit status 0
    once the load ran, even with server errors.
      --concurrency_range=S:E:T     one closed-loop run per level S, S+T, ... E
      --request_rate_range=S:E:T    one open-loop run per rate (capped by
                                    --concurrency, default 64)
      -f FILE.csv                   perf_analyzer's CSV, a row per level
      --input_data=zero             all-zero inputs (one request throughout)
                                    instead of random ones
      --input_data=FILE.json        perf_analyzer's input data: {"data": [{"A":
                                    [...], "B": {"content": [...], "shape":
                                    [...]}}, ...]}, one request per entry, sent
                                    in turn ("b64" for raw bytes)
      --protocol=http               the REST API (binary tensors, a kept-alive
                                    connection per caller, at most 1024) instead
                                    of gRPC; --url names the HTTP port
      --streaming                   every request over one ModelStreamInfer
                                    stream, --concurrency of them unanswered
      --shared_memory=system        inputs and outputs in system shared memory
                                    regions the run creates and registers (one
                                    request throughout; needs a server on this
                                    host run with --allow_client_shm)
    Each level's report adds the server's mean queue and compute time per
    request, from ModelStatistics read before and after the level.
  noop-server               serves a model "matmul" like gemmserve's (inputs A,
                            B, output Y) whose ModelInfer computes nothing: it
                            returns a zero Y of shape [rows of A, columns of B].
                            Prints "noop-server listening on HOST:PORT" and
                            stops on SIGTERM or SIGINT. Use it with perf to
                            measure the cost of gRPC alone.

flags (anywhere on the line, as --flag=VALUE or --flag VALUE):
)";

// Exit status and examples, after the flags.
constexpr char kExamplesUsage[] = R"(
exit status: 0 success, 1 failure (the status code and message go to stderr),
2 usage error

examples:
  gemmserve-cli --url=127.0.0.1:8001 health
  gemmserve-cli metadata matmul
  gemmserve-cli infer matmul A=a.npy B=random:FP32:4x5 --output=y.npy
  gemmserve-cli infer grouped_matmul input=random:FP32:8x16 \
      weights=random:FP32:4x16x32 group_indices=random_index:INT64:8x2:4
  gemmserve-cli perf --model=matmul --shape=A:64,256 --shape=B:256,512 \
      --concurrency=8 --duration=10 --json_out=perf.json
  gemmserve-cli perf --model=grouped_matmul --rate=200 --shape=input:4,256 \
      --shape=weights:16,256,128 --shape=group_indices:4,2
  gemmserve-cli noop-server --port=8101 &
  gemmserve-cli --url=127.0.0.1:8101 perf --model=matmul --shape=A:64,256 --shape=B:256,512
)";

std::string UsageText() {
  std::string text = kCommandsUsage;
  for (absl::string_view name : kFlagNames) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    absl::StrAppend(&text,
                    absl::StrFormat("  --%-28s %s\n", absl::StrCat(name, "=", flag->DefaultValue()),
                                    flag->Help()));
  }
  absl::StrAppend(&text, absl::StrFormat("  --%-28s %s\n", "shape=NAME:d1,d2,...",
                                         "perf: shape of input NAME (repeat per input)"));
  absl::StrAppend(&text, kExamplesUsage);
  return text;
}

struct CommandLine {
  std::vector<std::string> positionals;
  std::vector<std::string> shapes;  // --shape values, in order
  bool help = false;
};

// Sets the flags named in kFlagNames from argv and collects the rest; "--"
// ends the flags. Each takes a value, from
// "=VALUE" or from the next argument (a bool flag alone is true). Like absl,
// "-flag" equals "--flag".
absl::StatusOr<CommandLine> ParseCommandLine(int argc, char** argv) {
  CommandLine line;
  bool flags_done = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      line.positionals.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    if (arg == "help" || arg == "h") {
      line.help = true;
      continue;
    }
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    bool known = name == kShapeFlag;
    for (absl::string_view n : kFlagNames) known |= n == name;
    if (!known) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    absl::string_view value;
    if (eq != absl::string_view::npos) {
      value = arg.substr(eq + 1);
    } else if (flag != nullptr && flag->IsOfType<bool>()) {
      value = "true";  // a bool flag alone is set, as absl takes it
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
    }
    if (name == kShapeFlag) {
      line.shapes.emplace_back(value);
      continue;
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", error));
    }
  }
  return line;
}

// Seconds from a flag; NaN and infinities are usage errors, ranges are
// checked by CheckPerfOptions.
absl::StatusOr<absl::Duration> FlagSeconds(absl::string_view name, double seconds) {
  if (!std::isfinite(seconds)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be a finite number"));
  }
  return absl::Seconds(seconds);
}

// The perf options from the flags; `args` may name the model instead of
// --model.
absl::StatusOr<PerfOptions> PerfOptionsFromFlags(const CommandLine& line,
                                                 const std::vector<std::string>& args,
                                                 absl::Duration timeout) {
  PerfOptions options;
  options.model = absl::GetFlag(FLAGS_model);
  if (args.size() > 1 || (args.size() == 1 && !options.model.empty())) {
    return absl::InvalidArgumentError("perf takes one model, as --model=MODEL");
  }
  if (args.size() == 1) options.model = args[0];
  options.rate = absl::GetFlag(FLAGS_rate);
  options.concurrency = absl::GetFlag(FLAGS_concurrency);
  if (options.concurrency == 0) {
    options.concurrency = options.rate > 0 ? kOpenLoopDefaultConcurrency : 1;
  }
  absl::StatusOr<absl::Duration> duration = FlagSeconds("duration", absl::GetFlag(FLAGS_duration));
  if (!duration.ok()) return duration.status();
  options.duration = *duration;
  absl::StatusOr<absl::Duration> warmup = FlagSeconds("warmup", absl::GetFlag(FLAGS_warmup));
  if (!warmup.ok()) return warmup.status();
  options.warmup = *warmup;
  options.rows = absl::GetFlag(FLAGS_rows);
  options.timeout = timeout;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.request_pool = absl::GetFlag(FLAGS_request_pool);
  const std::string input_data = absl::GetFlag(FLAGS_input_data);
  if (input_data.empty()) {
    return absl::InvalidArgumentError("--input_data: expected random, zero or a JSON file");
  }
  options.zero_data = input_data == "zero";
  if (input_data != "random" && input_data != "zero") options.input_data_file = input_data;
  const std::string shared_memory = absl::GetFlag(FLAGS_shared_memory);
  if (shared_memory != "none" && shared_memory != "system") {
    return absl::InvalidArgumentError(
        absl::StrCat("--shared_memory '", shared_memory,
                     "': expected none or system (CUDA memory is not served)"));
  }
  options.system_shared_memory = shared_memory == "system";
  const std::string protocol = absl::GetFlag(FLAGS_protocol);
  if (protocol != "grpc" && protocol != "http") {
    return absl::InvalidArgumentError(
        absl::StrCat("--protocol '", protocol, "': expected grpc or http"));
  }
  options.http = protocol == "http";
  options.streaming = absl::GetFlag(FLAGS_streaming);
  if (options.streaming && options.http) {
    return absl::InvalidArgumentError("--streaming is a gRPC stream; not with --protocol=http");
  }
  for (const std::string& text : line.shapes) {
    absl::StatusOr<ShapeOverride> shape = ParseShapeOverride(text);
    if (!shape.ok()) return shape.status();
    options.shapes.push_back(*std::move(shape));
  }
  absl::Status valid = CheckPerfOptions(options);
  if (!valid.ok()) return valid;
  return options;
}

// The levels and report files of perf from the flags.
absl::StatusOr<PerfPlan> PerfPlanFromFlags() {
  PerfPlan plan;
  plan.json_out = absl::GetFlag(FLAGS_json_out);
  plan.csv_out = absl::GetFlag(FLAGS_f);
  const std::string concurrency = absl::GetFlag(FLAGS_concurrency_range);
  const std::string rates = absl::GetFlag(FLAGS_request_rate_range);
  if (!concurrency.empty() && !rates.empty()) {
    return absl::InvalidArgumentError(
        "--concurrency_range and --request_rate_range are alternatives; give one");
  }
  if (!concurrency.empty()) {
    if (absl::GetFlag(FLAGS_concurrency) != 0 || absl::GetFlag(FLAGS_rate) != 0) {
      return absl::InvalidArgumentError(
          "--concurrency_range replaces --concurrency and closes the loop: drop those flags");
    }
    absl::StatusOr<std::vector<double>> levels =
        ParsePerfRange("concurrency_range", concurrency, /*integral=*/true);
    if (!levels.ok()) return levels.status();
    for (double c : *levels) {
      if (c > kPerfMaxConcurrency) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--concurrency_range '", concurrency, "' goes over ", kPerfMaxConcurrency, " callers"));
      }
      plan.concurrency_levels.push_back(static_cast<int>(c));
    }
  }
  if (!rates.empty()) {
    if (absl::GetFlag(FLAGS_rate) != 0) {
      return absl::InvalidArgumentError("--request_rate_range replaces --rate: drop it");
    }
    absl::StatusOr<std::vector<double>> levels =
        ParsePerfRange("request_rate_range", rates, /*integral=*/false);
    if (!levels.ok()) return levels.status();
    plan.rate_levels = *std::move(levels);
  }
  return plan;
}

int Main(int argc, char** argv) {
  absl::StatusOr<CommandLine> line = ParseCommandLine(argc, argv);
  if (!line.ok()) return Usage(line.status().message());
  if (line->help) {
    std::cout << UsageText();
    return kExitOk;
  }
  if (line->positionals.empty()) return Usage("no command given");
  const int64_t timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  if (timeout_ms < 0) return Usage("--timeout_ms must not be negative");
  const absl::Duration timeout =
      timeout_ms == 0 ? absl::InfiniteDuration() : absl::Milliseconds(timeout_ms);

  const std::string command = line->positionals[0];
  const std::vector<std::string> args(line->positionals.begin() + 1, line->positionals.end());
  if (command != "health" && command != "metadata" && command != "infer" && command != "perf" &&
      command != "noop-server") {
    return Usage(absl::StrCat("unknown command '", command, "'"));
  }
  if (command != "perf" && !line->shapes.empty()) return Usage("--shape is a flag of perf");
  if (command == "noop-server") {
    if (!args.empty()) return Usage("noop-server takes no arguments");
    return RunNoopServer(absl::GetFlag(FLAGS_host), absl::GetFlag(FLAGS_port));
  }

  absl::StatusOr<Client> client = Client::Connect(ServerAddress());
  if (!client.ok()) return Usage(client.status().message());
  if (command == "health") return RunHealth(*client, args, timeout);
  if (command == "metadata") return RunMetadata(*client, args, timeout);
  if (command == "perf") {
    absl::StatusOr<PerfPlan> plan = PerfPlanFromFlags();
    if (!plan.ok()) return Usage(plan.status().message());
    absl::StatusOr<PerfOptions> options = PerfOptionsFromFlags(*line, args, timeout);
    if (!options.ok()) return Usage(options.status().message());
    if (!plan->rate_levels.empty() && absl::GetFlag(FLAGS_concurrency) == 0) {
      options->concurrency = kOpenLoopDefaultConcurrency;
    }
    return RunPerf(*client, ServerAddress(), *options, *plan);
  }
  InferOptions options;
  options.output = absl::GetFlag(FLAGS_output);
  options.output_dir = absl::GetFlag(FLAGS_output_dir);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.u2_datatype = absl::GetFlag(FLAGS_u2_datatype);
  return RunInfer(*client, args, timeout, options);
}

}  // namespace
}  // namespace gemmserve::client

int main(int argc, char** argv) { return gemmserve::client::Main(argc, argv); }
