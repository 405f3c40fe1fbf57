// The subcommands of gemmserve-cli, one function each, taking parsed options
// and returning the process's exit status. They print their results on
// stdout and their errors on stderr ("gemmserve-cli: CODE: message"); main.cc
// only parses the command line and dispatches here.
//
// Exit status, strict because the CLI is also the Docker HEALTHCHECK:
// kExitOk (0) success, kExitFailure (1) an RPC, file or server failure,
// kExitUsage (2) a usage error.
//
//   absl::StatusOr<Client> client = Client::Connect("127.0.0.1:8001");
//   if (!client.ok()) return Usage(client.status().message());
//   return RunMetadata(*client, {"matmul"}, absl::Seconds(5));
#ifndef GEMMSERVE_CLIENT_CLI_COMMANDS_H_
#define GEMMSERVE_CLIENT_CLI_COMMANDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cli/perf.h"
#include "client/cpp/client.h"

namespace gemmserve::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Prints `error` and the short usage on stderr; returns kExitUsage.
int Usage(absl::string_view error);

// Prints the status code and message on stderr; returns kExitFailure.
int Fail(const absl::Status& status);

// health [SERVICE]: prints SERVING / NOT_SERVING / ...; 0 only if SERVING.
int RunHealth(const Client& client, const std::vector<std::string>& args, absl::Duration timeout);

// metadata MODEL: the model's versions, platform, inputs and outputs.
int RunMetadata(const Client& client, const std::vector<std::string>& args, absl::Duration timeout);

struct InferOptions {
  std::string output;                // the only output to this .npy file
  std::string output_dir;            // each output to DIR/NAME.npy
  uint64_t seed = 0;                 // of the random: operands
  std::string u2_datatype = "BF16";  // of '<u2' .npy inputs: BF16 or FP16
};

// infer MODEL NAME=SPEC...: runs MODEL once and prints or writes the outputs.
int RunInfer(const Client& client, const std::vector<std::string>& args, absl::Duration timeout,
             const InferOptions& options);

// What `perf` runs besides its PerfOptions: the levels of
// --concurrency_range or --request_rate_range (empty: the options' own
// single level) and where its reports go.
struct PerfPlan {
  std::vector<int> concurrency_levels;  // closed loop, a run each
  std::vector<double> rate_levels;      // open loop, a run each
  std::string json_out;                 // one object, or an array for several levels
  std::string csv_out;                  // -f: perf_analyzer's CSV
};

// perf: the load generator (perf.h). Reads the model's metadata and config
// (each RPC bounded by options.timeout, or 30 s without one), then runs each
// level in turn: reads the model's statistics, runs the load, reads them
// again, and prints the level's report with the server's breakdown. Writes
// the JSON and CSV reports unless their paths are empty. 0 when the load
// ran, server errors included; 1 when the server is unreachable, the
// metadata fails or a report cannot be written; 2 for bad options.
// With options.http, everything goes over REST to `address` (HOST:PORT of
// the HTTP port); else over gRPC through `client`.
int RunPerf(const Client& client, const std::string& address, const PerfOptions& options,
            const PerfPlan& plan);

// noop-server: serves NoopServer on host:port, prints
// "noop-server listening on HOST:PORT" on stdout, and returns 0 after SIGTERM
// or SIGINT. Call it before any other thread starts: it blocks the two
// signals so that only its own sigwait receives them.
int RunNoopServer(const std::string& host, int port);

}  // namespace gemmserve::client

#endif  // GEMMSERVE_CLIENT_CLI_COMMANDS_H_
