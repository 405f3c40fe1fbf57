#include "server/root/server.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/common/descriptor_limit.h"
#include "server/common/logging.h"
#include "server/common/status_macros.h"
#include "server/process/compute_environment.h"
#include "server/remote/grpc_remote_experts.h"
#include "server/ops/kernels/cpu_features.h"
#include "server/ops/kernels/kernel_set.h"

namespace gemmserve {
namespace {

// Every connection and shared-memory region holds a descriptor: raises the
// process's limit and sizes the region count to what is left.
void FitDescriptors(ServerOptions& options) {
  const bool plaintext_grpc = options.grpc.tls.cert_file.empty();
  const int64_t connections = (options.http.port == -1 ? 0 : options.http.max_connections) +
                              (plaintext_grpc ? options.grpc.max_connections : 0);
  const DescriptorPlan plan =
      PlanDescriptors(RaiseDescriptorLimit(), connections, options.serving.shm.max_regions);
  options.serving.shm.max_regions = plan.shm_max_regions;
  if (!plan.warning.empty()) GEMMSERVE_LOG(WARNING) << plan.warning;
}

// Written whole, then renamed: a reader never sees half an address. The
// partial file is made anew (O_EXCL, O_NOFOLLOW, after unlinking whatever
// had its name): nothing is written through a link planted there, and the
// rename replaces the name, never what a link at it points to.
void WriteAddressFile(const std::string& path, const std::string& address) {
  const std::string partial = path + ".partial";
  ::unlink(partial.c_str());
  const int fd =
      ::open(partial.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  const std::string line = address + "\n";
  bool written =
      fd >= 0 && ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  if (fd >= 0) written = ::close(fd) == 0 && written;
  if (!written || std::rename(partial.c_str(), path.c_str()) != 0) {
    GEMMSERVE_LOG(WARNING) << "cannot write --address_file " << path
                           << "; health checks fall back to their default port";
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Start(CheckedServerOptions checked) {
  ServerOptions options = checked.options();
  SetBf16Panels(options.compute.bf16_panels);  // before the repository loads
  FitDescriptors(options);
  std::unique_ptr<Server> server(new Server);
  ShardClientOptions shard_client;
  shard_client.max_message_bytes = options.serving.engine.max_message_bytes;
  options.serving.remote_experts = GrpcRemoteExpertsFactory(shard_client);
  GEMMSERVE_ASSIGN_OR_RETURN(server->serving_, AssembleServing(std::move(options.serving)));
  if (absl::Status started = server->StartEndpoints(options); !started.ok()) {
    // Those already listening may have taken calls: they are refused from
    // here on, and the endpoints close as the server goes.
    server->serving_->StartDraining();
    return started;
  }
  if (!options.address_file.empty()) {
    WriteAddressFile(options.address_file, server->grpc_->address());
  }
  return server;
}

absl::Status Server::StartEndpoints(const ServerOptions& options) {
  GEMMSERVE_ASSIGN_OR_RETURN(grpc_, GrpcServer::Start(serving_.get(), options.host, options.grpc));
  if (options.http.port != -1) {
    GEMMSERVE_ASSIGN_OR_RETURN(http_,
                               HttpServer::Start(serving_.get(), options.host, options.http));
  }
  if (options.metrics_port >= 0) {
    GEMMSERVE_ASSIGN_OR_RETURN(
        metrics_, MetricsEndpoint::Start(serving_->metrics(), options.host, options.metrics_port));
  }
  return absl::OkStatus();
}

Server::~Server() {
  // Endpoints first: they call into Serving until they are gone.
  metrics_.reset();
  http_.reset();
  grpc_.reset();
  serving_.reset();
}

std::string Server::http_address() const { return http_ ? http_->address() : std::string(); }

std::string Server::metrics_address() const {
  return metrics_ && metrics_->port() != 0 ? metrics_->address() : std::string();
}

std::string Server::Description() const {
  return absl::StrCat(serving_->compute_threads(), " compute threads, kernels ",
                      CpuIsaDescription(), ", 8-bit dot products ", Kernels().int8_dot_isa,
                      ", BLIS config ", BlisArchitecture(), ", BF16 weights ", Bf16PanelsChoice());
}

void Server::Shutdown(std::chrono::system_clock::time_point deadline) {
  std::call_once(shutdown_, [&] {
    serving_->StartDraining();
    grpc_->StopServing();
    if (!serving_->WaitUntilIdle(absl::FromChrono(deadline))) {
      GEMMSERVE_LOG(WARNING) << "shutdown grace period over with calls still running; "
                                "cancelling them";
    }
    // Answered is not yet written: each answer's bytes are released once its
    // front end has handed it whole to the connection; the front ends close
    // their connections only then.
    serving_->WaitUntilWritten(absl::FromChrono(deadline));
    grpc_->Stop(deadline);
    if (http_) http_->Shutdown(absl::FromChrono(deadline));
  });
}

void Server::Wait() { grpc_->Wait(); }

}  // namespace gemmserve
