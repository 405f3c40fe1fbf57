// gemmserve: the process. Parses flags, starts the server, prints the bound
// address on stdout (tests and scripts read it to learn an ephemeral port), and
// shuts down gracefully on SIGTERM or SIGINT, handled on a thread of its own.
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "server/common/descriptor_limit.h"
#include "server/common/logging.h"
#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/ops/kernels/compute_environment.h"
#include "server/ops/kernels/cpu_features.h"
#include "server/http/http_server.h"
#include "server/service/grpc_server.h"

namespace {
// Every flag's default is the options' own (each written once, where its
// layer declares it).
const gemmserve::ServerOptions kDefaults;
const gemmserve::EngineOptions& kEngine = kDefaults.serving.engine;
const gemmserve::GrpcOptions& kGrpc = kDefaults.grpc;
const gemmserve::BatchingOptions& kBuiltin = kDefaults.serving.builtin_batching;
const gemmserve::HttpOptions kHttp;
}  // namespace

ABSL_FLAG(std::string, host, kDefaults.serving.host, "Address to listen on (gRPC and /metrics).");
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
ABSL_FLAG(int32_t, metrics_port, kDefaults.serving.metrics_port,
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
ABSL_FLAG(int64_t, max_client_shm_bytes, kDefaults.serving.shm.max_registered_bytes,
          "Most bytes of client shared memory registered at once, all clients together.");

ABSL_FLAG(std::string, bf16_panels, "auto",
          "BF16 weights on pair panels for the vdpbf16ps kernel: auto (where vdpbf16ps is "
          "measured at start to do 1.25x FP32 FMA's flops), on, or off (row-major, BLIS on "
          "widened values).");

int main(int argc, char** argv) {
  gemmserve::ReexecWithComputeEnvironment(argv);
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

  gemmserve::ServerOptions options;
  gemmserve::ServingOptions& serving = options.serving;
  gemmserve::EngineOptions& engine = serving.engine;
  serving.host = absl::GetFlag(FLAGS_host);
  serving.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  serving.model_repository = absl::GetFlag(FLAGS_model_repository);
  serving.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  serving.shm.allow_client_shm = absl::GetFlag(FLAGS_allow_client_shm);
  serving.allow_log_file_setting = absl::GetFlag(FLAGS_allow_log_file_setting);
  serving.shm.max_registered_bytes = absl::GetFlag(FLAGS_max_client_shm_bytes);
  serving.trace_file = absl::GetFlag(FLAGS_trace_file);
  {
    const std::string level = absl::GetFlag(FLAGS_trace_level);
    if (level != "OFF" && level != "TIMESTAMPS") {
      GEMMSERVE_LOG(ERROR) << "cannot start: --trace_level must be OFF or TIMESTAMPS";
      return 1;
    }
    serving.trace = {level == "TIMESTAMPS", absl::GetFlag(FLAGS_trace_rate),
                     absl::GetFlag(FLAGS_trace_count), absl::GetFlag(FLAGS_trace_log_frequency)};
  }
  engine.compute_threads = absl::GetFlag(FLAGS_compute_threads);
  engine.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  engine.max_output_bytes = absl::GetFlag(FLAGS_max_output_bytes);
  engine.inline_max_flops = absl::GetFlag(FLAGS_inline_max_flops);
  engine.max_inflight_bytes = absl::GetFlag(FLAGS_max_inflight_bytes);
  {
    auto buckets = gemmserve::Metrics::ParseBuckets(absl::GetFlag(FLAGS_latency_buckets));
    if (!buckets.ok()) {
      GEMMSERVE_LOG(ERROR) << "cannot start: " << buckets.status();
      return 1;
    }
    serving.metrics.latency_buckets = *std::move(buckets);
  }
  serving.builtin_batching.max_queue_delay =
      absl::Microseconds(absl::GetFlag(FLAGS_builtin_max_queue_delay_us));
  serving.builtin_batching.max_batch_rows = absl::GetFlag(FLAGS_builtin_max_batch_rows);
  serving.builtin_batching.max_queue_size = absl::GetFlag(FLAGS_builtin_max_queue_size);
  gemmserve::GrpcOptions& grpc = options.grpc;
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

  gemmserve::HttpOptions http_options;
  const int http_port = absl::GetFlag(FLAGS_http_port);
  http_options.port = http_port;
  http_options.threads = absl::GetFlag(FLAGS_http_threads);
  http_options.max_connections = absl::GetFlag(FLAGS_http_max_connections);
  http_options.max_header_bytes = absl::GetFlag(FLAGS_http_max_header_bytes);
  http_options.idle_timeout_ms = absl::GetFlag(FLAGS_http_idle_timeout_ms);
  http_options.request_timeout_ms = absl::GetFlag(FLAGS_http_request_timeout_ms);
  http_options.tls = grpc.tls;
  const std::string host = serving.host;
  {
    // Every connection and shared-memory region holds a descriptor.
    const int64_t connections = (http_port == -1 ? 0 : http_options.max_connections) +
                                (grpc.tls.cert_file.empty() ? grpc.max_connections : 0);
    const gemmserve::DescriptorPlan plan = gemmserve::PlanDescriptors(
        gemmserve::RaiseDescriptorLimit(), connections, serving.shm.max_regions);
    serving.shm.max_regions = plan.shm_max_regions;
    if (!plan.warning.empty()) GEMMSERVE_LOG(WARNING) << plan.warning;
  }

  if (const std::string cap = gemmserve::CpuIsaCapError(); !cap.empty()) {
    GEMMSERVE_LOG(ERROR) << "cannot start: " << cap;
    return 1;
  }
  {
    gemmserve::Bf16Panels mode;
    if (!gemmserve::ParseBf16Panels(absl::GetFlag(FLAGS_bf16_panels).c_str(), &mode)) {
      GEMMSERVE_LOG(ERROR) << "cannot start: --bf16_panels: expected auto, on or off, got '"
                           << absl::GetFlag(FLAGS_bf16_panels) << "'";
      return 1;
    }
    gemmserve::SetBf16Panels(mode);  // before the model repository loads
  }

  absl::StatusOr<std::unique_ptr<gemmserve::GemmServer>> server =
      gemmserve::GemmServer::Start(std::move(options));
  if (!server.ok()) {
    GEMMSERVE_LOG(ERROR) << "cannot start: " << server.status();
    return 1;
  }
  std::unique_ptr<gemmserve::HttpServer> http;
  if (http_port != -1) {
    auto started = gemmserve::HttpServer::Start(&(*server)->serving(), host, http_options);
    if (!started.ok()) {
      GEMMSERVE_LOG(ERROR) << "cannot start: " << started.status();
      return 1;
    }
    http = *std::move(started);
  }
  GEMMSERVE_LOG(INFO) << "gemmserve serving with "
                      << (*server)->serving().engine().options().compute_threads
                      << " compute threads, kernels " << gemmserve::CpuIsaDescription()
                      << ", BLIS config " << gemmserve::BlisArchitecture() << ", BF16 weights "
                      << gemmserve::Bf16PanelsChoice();
  std::cout << "gemmserve listening on " << (*server)->address() << std::endl;
  if (const std::string path = absl::GetFlag(FLAGS_address_file); !path.empty()) {
    // Written whole, then renamed: a reader never sees half an address.
    const std::string partial = path + ".partial";
    std::ofstream out(partial, std::ios::trunc);
    out << (*server)->address() << "\n";
    out.close();
    if (!out || std::rename(partial.c_str(), path.c_str()) != 0) {
      GEMMSERVE_LOG(WARNING) << "cannot write --address_file " << path
                             << "; health checks fall back to their default port";
    }
  }
  if (!(*server)->metrics_address().empty()) {
    std::cout << "gemmserve metrics on " << (*server)->metrics_address() << std::endl;
  }
  if (http) std::cout << "gemmserve http on " << http->address() << std::endl;

  std::thread signal_thread([&] {
    int received = 0;
    sigwait(&signals, &received);
    GEMMSERVE_LOG(INFO) << "signal " << received << ": shutting down";
    const auto deadline = std::chrono::system_clock::now() +
                          std::chrono::seconds(absl::GetFlag(FLAGS_shutdown_grace_seconds));
    // Both front ends drain together: Serving refuses new inferences (HTTP's
    // ready turns 400), the accepted ones are answered, then gRPC stops and
    // HTTP writes its last replies.
    (*server)->Shutdown(deadline);
    if (http) http->Shutdown(absl::FromChrono(deadline));
  });
  (*server)->Wait();
  signal_thread.join();
  GEMMSERVE_LOG(INFO) << "stopped";
  return 0;
}
