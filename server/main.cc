// gemmserve: the process. Parses flags, starts the server, prints the bound
// address on stdout (tests and scripts read it to learn an ephemeral port), and
// shuts down gracefully on SIGTERM or SIGINT, handled on a thread of its own.
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <thread>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "server/common/logging.h"
#include "server/common/status_macros.h"
#include "server/process/compute_environment.h"
#include "server/root/server.h"

namespace {
// Every flag's default is the options' own (each written once, where its
// layer declares it).
const gemmserve::ServerOptions kDefaults;
const gemmserve::EngineOptions& kEngine = kDefaults.serving.engine;
const gemmserve::GrpcOptions& kGrpc = kDefaults.grpc;
const gemmserve::BatchingOptions& kBuiltin = kDefaults.serving.builtin_batching;
const gemmserve::HttpOptions& kHttp = kDefaults.http;
}  // namespace

ABSL_FLAG(std::string, host, kDefaults.host,
          "Address to listen on (gRPC, HTTP/REST and /metrics).");
ABSL_FLAG(int32_t, grpc_port, kGrpc.port, "gRPC port; 0 picks a free one (printed on stdout).");
ABSL_FLAG(int32_t, http_port, kHttp.port,
          "HTTP/REST port (KServe v2 REST binding); 0 picks a free one (printed on stdout); "
          "-1 serves none.");
ABSL_FLAG(int32_t, http_threads, kHttp.threads,
          "Threads that do the HTTP port's I/O (never compute).");
ABSL_FLAG(int32_t, http_max_connections, kHttp.max_connections,
          "Open HTTP connections at most; more are answered 503 and closed.");
ABSL_FLAG(int64_t, http_max_header_bytes, kHttp.max_header_bytes,
          "Largest HTTP request header, in bytes (431 beyond).");
ABSL_FLAG(int64_t, http_idle_timeout_ms, kHttp.idle_timeout_ms,
          "How long an HTTP connection may wait for (the header of) its next request.");
ABSL_FLAG(int64_t, http_request_timeout_ms, kHttp.request_timeout_ms,
          "How long an HTTP request body may take to arrive, and a response to be taken.");
ABSL_FLAG(int32_t, metrics_port, kDefaults.metrics_port,
          "Prometheus /metrics port; 0 picks a free one (printed on stdout); -1 serves none.");
ABSL_FLAG(std::string, latency_buckets, "",
          "Upper bounds of the latency histograms in seconds, comma-separated and increasing; "
          "empty: 25 us to 52 s, doubling.");
ABSL_FLAG(int32_t, compute_threads, kEngine.compute_threads,
          "Threads that compute, BLIS's and OpenMP's included; 0 means one per core.");
ABSL_FLAG(int64_t, max_message_bytes, kEngine.max_message_bytes,
          "Largest request or response message, in bytes.");
ABSL_FLAG(int64_t, max_output_bytes, kEngine.max_output_bytes,
          "Largest total output of one request, in bytes.");
ABSL_FLAG(std::string, address_file, "",
          "Once listening, write the bound gRPC address (host:port) to this file, so a "
          "container's health check can follow the port (gemmserve-cli --url_file).");
ABSL_FLAG(int32_t, shutdown_grace_seconds, 10,
          "On SIGTERM, how long in-flight calls get to finish.");
ABSL_FLAG(std::string, model_repository, kDefaults.serving.model_repository,
          "Model repository directory (Triton layout: DIR/<model>/<version>/model.onnx and an "
          "optional DIR/<model>/config.pbtxt); empty: built-in models only.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: serve gRPC and HTTP over TLS (with --tls_key).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA: require and verify client certificates it signed (mutual TLS).");
ABSL_FLAG(std::string, auth_token_file, kDefaults.serving.auth_token_file,
          "File of bearer tokens, one per line: inference RPCs need 'authorization: Bearer "
          "<token>' (health checks do not).");
ABSL_FLAG(int64_t, grpc_keepalive_time_ms, kGrpc.keepalive_time_ms,
          "Server keepalive ping interval.");
ABSL_FLAG(int64_t, grpc_keepalive_timeout_ms, kGrpc.keepalive_timeout_ms,
          "Keepalive ping acknowledgement timeout.");
ABSL_FLAG(int32_t, grpc_max_concurrent_streams, kGrpc.max_concurrent_streams,
          "Concurrent calls per HTTP/2 connection.");
ABSL_FLAG(int32_t, grpc_max_stream_inflight, kGrpc.max_stream_inflight,
          "Requests of one ModelStreamInfer stream accepted and not yet answered, at most; "
          "beyond, the stream is not read until an answer is written.");
ABSL_FLAG(int32_t, grpc_max_connections, kGrpc.max_connections,
          "Open gRPC connections at most (plaintext port); more are closed at once and their "
          "clients retry. Each holds a descriptor.");
ABSL_FLAG(int64_t, grpc_max_connection_idle_ms, kGrpc.max_connection_idle_ms,
          "Close connections idle this long (0: never).");
ABSL_FLAG(int64_t, grpc_max_connection_age_ms, kGrpc.max_connection_age_ms,
          "Close connections after this age, gracefully (0: never).");
ABSL_FLAG(int64_t, max_inflight_bytes, kEngine.max_inflight_bytes,
          "Bytes of accepted, unanswered requests held at most, counted before anything is "
          "allocated (messages, copies, outputs, bookkeeping, scratch, responses); a request "
          "that would pass it gets UNAVAILABLE at once, one larger than it alone "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, inline_max_flops, kEngine.inline_max_flops,
          "Requests of at most this many flops run on the gRPC thread when their model is idle "
          "(a hand-off to a worker costs more than they compute); 0: none that computes.");
ABSL_FLAG(int64_t, builtin_max_queue_delay_us, absl::ToInt64Microseconds(kBuiltin.max_queue_delay),
          "Dynamic batching of the built-in models: longest wait for a batch to fill while "
          "another batch runs, in microseconds.");
ABSL_FLAG(int64_t, builtin_max_batch_rows, kBuiltin.max_batch_rows,
          "Dynamic batching of the built-in models: rows per kernel call (0: no limit).");
ABSL_FLAG(int64_t, builtin_max_queue_size, kBuiltin.max_queue_size,
          "Dynamic batching of the built-in models: queued requests beyond this get "
          "UNAVAILABLE (0: no limit).");

ABSL_FLAG(bool, allow_client_shm, kDefaults.serving.shm.allow_client_shm,
          "Let clients register POSIX shared-memory regions and send tensors through them "
          "(Triton's system shared memory). The server opens the objects with its own rights: "
          "allow it only for trusted local clients.");
ABSL_FLAG(bool, allow_log_file_setting, kDefaults.serving.allow_log_file_setting,
          "Let clients change log_file through LogSettings (gRPC, POST /v2/logging): the "
          "server then writes its log to a path the client picks. Off: refused.");
ABSL_FLAG(std::string, trace_file, kDefaults.serving.trace_file,
          "Where request traces go (Triton's trace JSON; with --trace_log_frequency N, every N "
          "traces to FILE.0, FILE.1, ...). Fixed at start: clients cannot change it. Empty: "
          "tracing cannot be turned on.");
ABSL_FLAG(std::string, trace_level, "OFF",
          "Tracing at start: OFF, or TIMESTAMPS (needs --trace_file); TraceSetting changes it.");
ABSL_FLAG(int64_t, trace_rate, *kDefaults.serving.trace.rate,
          "Trace one request in this many (1: every request).");
ABSL_FLAG(int64_t, trace_count, *kDefaults.serving.trace.count,
          "Traces to take, then stop; -1: no limit.");
ABSL_FLAG(int64_t, trace_log_frequency, *kDefaults.serving.trace.log_frequency,
          "Write every N traces to a file of their own (FILE.0, FILE.1, ...); 0: all to FILE "
          "when the server stops.");
ABSL_FLAG(int64_t, trace_max_files, kDefaults.serving.trace_bounds.max_files,
          "Trace files kept at most (FILE and FILE.<k>): a new one removes the oldest this "
          "server wrote, as a log rotates.");
ABSL_FLAG(int64_t, trace_max_bytes, kDefaults.serving.trace_bounds.max_bytes,
          "Bytes of trace files kept at most, all together; one file holds at most this over "
          "--trace_max_files (at least 64 KiB), then the next is started.");
ABSL_FLAG(int64_t, max_client_shm_bytes, kDefaults.serving.shm.max_registered_bytes,
          "Most bytes of client shared memory registered at once, all clients together.");

ABSL_FLAG(std::string, bf16_panels, "auto",
          "BF16 weights on pair panels for the vdpbf16ps kernel: auto (where vdpbf16ps is "
          "measured at start to do 1.25x FP32 FMA's flops), on, or off (row-major, BLIS on "
          "widened values).");

namespace {

gemmserve::GrpcOptions GrpcFromFlags() {
  gemmserve::GrpcOptions grpc;
  grpc.port = absl::GetFlag(FLAGS_grpc_port);
  grpc.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  grpc.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  grpc.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  grpc.keepalive_time_ms = absl::GetFlag(FLAGS_grpc_keepalive_time_ms);
  grpc.keepalive_timeout_ms = absl::GetFlag(FLAGS_grpc_keepalive_timeout_ms);
  grpc.max_concurrent_streams = absl::GetFlag(FLAGS_grpc_max_concurrent_streams);
  grpc.max_connections = absl::GetFlag(FLAGS_grpc_max_connections);
  grpc.max_stream_inflight = absl::GetFlag(FLAGS_grpc_max_stream_inflight);
  grpc.max_connection_idle_ms = absl::GetFlag(FLAGS_grpc_max_connection_idle_ms);
  grpc.max_connection_age_ms = absl::GetFlag(FLAGS_grpc_max_connection_age_ms);
  return grpc;
}

gemmserve::HttpOptions HttpFromFlags() {
  gemmserve::HttpOptions http;
  http.port = absl::GetFlag(FLAGS_http_port);
  http.threads = absl::GetFlag(FLAGS_http_threads);
  http.max_connections = absl::GetFlag(FLAGS_http_max_connections);
  http.max_header_bytes = absl::GetFlag(FLAGS_http_max_header_bytes);
  http.idle_timeout_ms = absl::GetFlag(FLAGS_http_idle_timeout_ms);
  http.request_timeout_ms = absl::GetFlag(FLAGS_http_request_timeout_ms);
  return http;
}

gemmserve::EngineOptions EngineFromFlags() {
  gemmserve::EngineOptions engine;
  engine.compute_threads = absl::GetFlag(FLAGS_compute_threads);
  engine.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  engine.max_output_bytes = absl::GetFlag(FLAGS_max_output_bytes);
  engine.inline_max_flops = absl::GetFlag(FLAGS_inline_max_flops);
  engine.max_inflight_bytes = absl::GetFlag(FLAGS_max_inflight_bytes);
  return engine;
}

absl::StatusOr<gemmserve::ServingOptions> ServingFromFlags() {
  gemmserve::ServingOptions serving;
  serving.engine = EngineFromFlags();
  serving.model_repository = absl::GetFlag(FLAGS_model_repository);
  serving.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  serving.shm.allow_client_shm = absl::GetFlag(FLAGS_allow_client_shm);
  serving.shm.max_registered_bytes = absl::GetFlag(FLAGS_max_client_shm_bytes);
  serving.allow_log_file_setting = absl::GetFlag(FLAGS_allow_log_file_setting);
  serving.trace_file = absl::GetFlag(FLAGS_trace_file);
  const std::string level = absl::GetFlag(FLAGS_trace_level);
  if (level != "OFF" && level != "TIMESTAMPS") {
    return absl::InvalidArgumentError("--trace_level must be OFF or TIMESTAMPS");
  }
  serving.trace = {level == "TIMESTAMPS", absl::GetFlag(FLAGS_trace_rate),
                   absl::GetFlag(FLAGS_trace_count), absl::GetFlag(FLAGS_trace_log_frequency)};
  serving.trace_bounds = {absl::GetFlag(FLAGS_trace_max_files),
                          absl::GetFlag(FLAGS_trace_max_bytes)};
  GEMMSERVE_ASSIGN_OR_RETURN(serving.metrics.latency_buckets,
                             gemmserve::Metrics::ParseBuckets(absl::GetFlag(FLAGS_latency_buckets)));
  serving.builtin_batching.max_queue_delay =
      absl::Microseconds(absl::GetFlag(FLAGS_builtin_max_queue_delay_us));
  serving.builtin_batching.max_batch_rows = absl::GetFlag(FLAGS_builtin_max_batch_rows);
  serving.builtin_batching.max_queue_size = absl::GetFlag(FLAGS_builtin_max_queue_size);
  return serving;
}

// Every flag, as the options Server::Start takes, checked once here.
absl::StatusOr<gemmserve::CheckedServerOptions> OptionsFromFlags() {
  gemmserve::ServerOptions options;
  GEMMSERVE_ASSIGN_OR_RETURN(options.serving, ServingFromFlags());
  options.host = absl::GetFlag(FLAGS_host);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.grpc = GrpcFromFlags();
  options.http = HttpFromFlags();
  options.address_file = absl::GetFlag(FLAGS_address_file);
  const std::string bf16 = absl::GetFlag(FLAGS_bf16_panels);
  if (!gemmserve::ParseBf16Panels(bf16.c_str(), &options.compute.bf16_panels)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--bf16_panels: expected auto, on or off, got '", bf16, "'"));
  }
  return gemmserve::CheckedServerOptions::Check(std::move(options));
}

}  // namespace

int main(int argc, char** argv) {
  gemmserve::ReexecWithComputeEnvironment(argv);  // before anything starts a thread
  // --help lists the flags of this file (absl's default looks for a file
  // named after the program, gemmserve.cc, and found none).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view path) {
    return absl::EndsWith(path, "server/main.cc");
  };
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "gemmserve: MatMul and GroupedMatMul over the KServe v2 protocol (gRPC and HTTP/REST).\n"
      "  gemmserve --grpc_port=8001 --compute_threads=2");
  absl::ParseCommandLine(argc, argv);

  // Block the shutdown signals in every thread (they inherit the mask) so
  // that only the waiting thread below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<gemmserve::CheckedServerOptions> options = OptionsFromFlags();
  absl::StatusOr<std::unique_ptr<gemmserve::Server>> server =
      options.ok() ? gemmserve::Server::Start(*std::move(options)) : options.status();
  if (!server.ok()) {
    GEMMSERVE_LOG(ERROR) << "cannot start: " << server.status();
    return 1;
  }
  GEMMSERVE_LOG(INFO) << "gemmserve serving with " << (*server)->Description();
  std::cout << "gemmserve listening on " << (*server)->grpc_address() << std::endl;
  if (!(*server)->metrics_address().empty()) {
    std::cout << "gemmserve metrics on " << (*server)->metrics_address() << std::endl;
  }
  if (!(*server)->http_address().empty()) {
    std::cout << "gemmserve http on " << (*server)->http_address() << std::endl;
  }

  std::thread signal_thread([&] {
    int received = 0;
    sigwait(&signals, &received);
    GEMMSERVE_LOG(INFO) << "signal " << received << ": shutting down";
    (*server)->Shutdown(std::chrono::system_clock::now() +
                        std::chrono::seconds(absl::GetFlag(FLAGS_shutdown_grace_seconds)));
  });
  (*server)->Wait();
  signal_thread.join();
  GEMMSERVE_LOG(INFO) << "stopped";
  return 0;
}
