// gemmserve: the process. Parses flags, starts the server, prints the bound
// address on stdout (tests and scripts read it to learn an ephemeral port), and
// shuts down gracefully on SIGTERM or SIGINT, handled on a thread of its own.
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "server/common/logging.h"
#include "server/ops/kernels/compute_environment.h"
#include "server/service/grpc_server.h"

ABSL_FLAG(std::string, host, "0.0.0.0", "Address to listen on for gRPC.");
ABSL_FLAG(int32_t, grpc_port, 8001, "gRPC port; 0 picks a free one (printed on stdout).");
ABSL_FLAG(int32_t, metrics_port, 8002,
          "Prometheus /metrics port; 0 picks a free one (printed on stdout); -1 serves none.");
ABSL_FLAG(std::string, latency_buckets, "",
          "Upper bounds of the latency histograms in seconds, comma-separated and increasing; "
          "empty: 25 us to 52 s, doubling.");
ABSL_FLAG(int32_t, compute_threads, 0,
          "Threads that compute, BLIS threads included; 0 means one per core.");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{1} << 30,
          "Largest request or response message, in bytes.");
ABSL_FLAG(int64_t, max_output_bytes, int64_t{4} << 30,
          "Largest total output of one request, in bytes.");
ABSL_FLAG(int32_t, shutdown_grace_seconds, 10,
          "On SIGTERM, how long in-flight calls get to finish.");
ABSL_FLAG(std::string, model_repository, "",
          "Model repository directory (Triton layout: DIR/<model>/<version>/model.onnx and an "
          "optional DIR/<model>/config.pbtxt); empty: built-in models only.");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve gRPC over TLS (with --tls_key).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA: require and verify client certificates it signed (mutual TLS).");
ABSL_FLAG(std::string, auth_token_file, "",
          "File of bearer tokens, one per line: inference RPCs need 'authorization: Bearer "
          "<token>' (health checks do not).");
ABSL_FLAG(int64_t, grpc_keepalive_time_ms, 60000, "Server keepalive ping interval.");
ABSL_FLAG(int64_t, grpc_keepalive_timeout_ms, 20000, "Keepalive ping acknowledgement timeout.");
ABSL_FLAG(int32_t, grpc_max_concurrent_streams, 256, "Concurrent calls per HTTP/2 connection.");
ABSL_FLAG(int64_t, grpc_max_connection_idle_ms, 600000,
          "Close connections idle this long (0: never).");
ABSL_FLAG(int64_t, grpc_max_connection_age_ms, 0,
          "Close connections after this age, gracefully (0: never).");
ABSL_FLAG(int64_t, max_inflight_bytes, int64_t{8} << 30,
          "Bytes of accepted, unanswered requests held at most, counted before anything is "
          "allocated (messages, copies, outputs, bookkeeping, scratch, responses); a request "
          "that would pass it gets UNAVAILABLE at once, one larger than it alone "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, inline_max_flops, 65536,
          "Requests of at most this many flops run on the gRPC thread when their model is idle "
          "(a hand-off to a worker costs more than they compute); 0: none that computes.");
ABSL_FLAG(int64_t, builtin_max_queue_delay_us, 100,
          "Dynamic batching of the built-in models: longest wait for a batch to fill while "
          "another batch runs, in microseconds.");
ABSL_FLAG(int64_t, builtin_max_batch_rows, 4096,
          "Dynamic batching of the built-in models: rows per kernel call (0: no limit).");
ABSL_FLAG(int64_t, builtin_max_queue_size, 1024,
          "Dynamic batching of the built-in models: queued requests beyond this get "
          "UNAVAILABLE (0: no limit).");

int main(int argc, char** argv) {
  gemmserve::ReexecWithComputeEnvironment(argv);
  absl::SetProgramUsageMessage(
      "gemmserve: MatMul and GroupedMatMul over the KServe v2 gRPC protocol.\n"
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
  options.host = absl::GetFlag(FLAGS_host);
  options.grpc_port = absl::GetFlag(FLAGS_grpc_port);
  options.compute_threads = absl::GetFlag(FLAGS_compute_threads);
  if (options.compute_threads == 0) {
    options.compute_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_output_bytes = absl::GetFlag(FLAGS_max_output_bytes);
  options.model_repository = absl::GetFlag(FLAGS_model_repository);
  options.inline_max_flops = absl::GetFlag(FLAGS_inline_max_flops);
  options.max_inflight_bytes = absl::GetFlag(FLAGS_max_inflight_bytes);
  options.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.keepalive_time_ms = absl::GetFlag(FLAGS_grpc_keepalive_time_ms);
  options.keepalive_timeout_ms = absl::GetFlag(FLAGS_grpc_keepalive_timeout_ms);
  options.max_concurrent_streams = absl::GetFlag(FLAGS_grpc_max_concurrent_streams);
  options.max_connection_idle_ms = absl::GetFlag(FLAGS_grpc_max_connection_idle_ms);
  options.max_connection_age_ms = absl::GetFlag(FLAGS_grpc_max_connection_age_ms);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  {
    auto buckets = gemmserve::Metrics::ParseBuckets(absl::GetFlag(FLAGS_latency_buckets));
    if (!buckets.ok()) {
      GEMMSERVE_LOG(ERROR) << "cannot start: " << buckets.status();
      return 1;
    }
    options.latency_buckets = *std::move(buckets);
  }
  options.builtin_max_queue_delay_us = absl::GetFlag(FLAGS_builtin_max_queue_delay_us);
  options.builtin_max_batch_rows = absl::GetFlag(FLAGS_builtin_max_batch_rows);
  options.builtin_max_queue_size = absl::GetFlag(FLAGS_builtin_max_queue_size);

  absl::StatusOr<std::unique_ptr<gemmserve::GemmServer>> server =
      gemmserve::GemmServer::Start(options);
  if (!server.ok()) {
    GEMMSERVE_LOG(ERROR) << "cannot start: " << server.status();
    return 1;
  }
  GEMMSERVE_LOG(INFO) << "gemmserve serving with "
                      << options.compute_threads << " compute threads, BLIS config "
                      << gemmserve::BlisArchitecture();
  std::cout << "gemmserve listening on " << (*server)->address() << std::endl;
  if (!(*server)->metrics_address().empty()) {
    std::cout << "gemmserve metrics on " << (*server)->metrics_address() << std::endl;
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
