// gemmserve-cli perf: the command's targets (gRPC through the Client, or
// the REST API), its shared-memory regions, and the run over each level
// with its reports written (commands.h declares RunPerf).
#include "client/cli/commands.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cli/noop_server.h"
#include "client/cli/perf_http.h"
#include "client/cli/perf_input_data.h"
#include "client/cpp/npy.h"
#include "client/cpp/random_tensor.h"
#include "client/cpp/shared_memory.h"
#include "server/common/status_macros.h"
#include "server/tensor/datatype.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"

namespace gemmserve::client {
namespace {

// A file created before its contents are known: Commit() writes them, and
// a file never committed is removed.
class OutputFile {
 public:
  OutputFile() = default;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile() {
    if (file_ == nullptr) return;
    std::fclose(file_);
    std::remove(path_.c_str());
  }

  absl::Status Create(const std::string& path) {
    file_ = std::fopen(path.c_str(), "wb");
    if (file_ == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", path));
    path_ = path;
    return absl::OkStatus();
  }

  absl::Status Commit(absl::string_view contents) {
    std::FILE* file = std::exchange(file_, nullptr);
    const bool written = std::fwrite(contents.data(), 1, contents.size(), file) == contents.size();
    if (std::fclose(file) != 0 || !written) {
      const int error = errno;
      std::remove(path_.c_str());
      return absl::ErrnoToStatus(error, absl::StrCat("cannot write ", path_));
    }
    return absl::OkStatus();
  }

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

// Where perf's set-up calls and its load go: gRPC through the Client, or
// the REST API (`--protocol=http`, perf_http.h).
class PerfTarget {
 public:
  virtual ~PerfTarget() = default;
  virtual absl::StatusOr<inference::ModelMetadataResponse> Metadata(const std::string& model,
                                                                    absl::Duration t) const = 0;
  virtual absl::StatusOr<inference::ModelConfig> Config(const std::string& model,
                                                        absl::Duration t) const = 0;
  virtual absl::StatusOr<inference::ModelStatistics> Statistics(const std::string& model,
                                                                absl::Duration t) const = 0;
  // One call; the outputs with their byte counts (the bytes themselves may
  // be left out).
  virtual absl::StatusOr<std::vector<HostTensor>> Infer(const std::string& model,
                                                        std::vector<HostTensor> inputs,
                                                        absl::Duration t) const = 0;
  virtual absl::Status Register(const std::string& name, const std::string& key, int64_t byte_size,
                                absl::Duration t) const = 0;
  virtual absl::Status Unregister(const std::string& name, absl::Duration t) const = 0;
  virtual absl::StatusOr<PerfResult> Run(const std::vector<inference::ModelInferRequest>& requests,
                                         std::vector<PerfInput> inputs,
                                         const PerfOptions& options) const = 0;
};

class GrpcPerfTarget final : public PerfTarget {
 public:
  explicit GrpcPerfTarget(const Client& client) : client_(client) {}
  absl::StatusOr<inference::ModelMetadataResponse> Metadata(const std::string& model,
                                                            absl::Duration t) const override {
    return client_.ModelMetadata(model, t);
  }
  absl::StatusOr<inference::ModelConfig> Config(const std::string& model,
                                                absl::Duration t) const override {
    return client_.ModelConfig(model, t);
  }
  absl::StatusOr<inference::ModelStatistics> Statistics(const std::string& model,
                                                        absl::Duration t) const override {
    return client_.ModelStatistics(model, t);
  }
  absl::StatusOr<std::vector<HostTensor>> Infer(const std::string& model,
                                                std::vector<HostTensor> inputs,
                                                absl::Duration t) const override {
    return client_.Infer(model, std::move(inputs), t);
  }
  absl::Status Register(const std::string& name, const std::string& key, int64_t byte_size,
                        absl::Duration t) const override {
    return client_.RegisterSystemSharedMemory(name, key, byte_size, 0, t);
  }
  absl::Status Unregister(const std::string& name, absl::Duration t) const override {
    return client_.UnregisterSystemSharedMemory(name, t);
  }
  absl::StatusOr<PerfResult> Run(const std::vector<inference::ModelInferRequest>& requests,
                                 std::vector<PerfInput> inputs,
                                 const PerfOptions& options) const override {
    return RunLoadRequests(client_.channel(), requests, std::move(inputs), options);
  }

 private:
  const Client& client_;
};

class HttpPerfTarget final : public PerfTarget {
 public:
  explicit HttpPerfTarget(std::string address) : http_(std::move(address)) {}
  absl::StatusOr<inference::ModelMetadataResponse> Metadata(const std::string& model,
                                                            absl::Duration t) const override {
    return http_.ModelMetadata(model, t);
  }
  absl::StatusOr<inference::ModelConfig> Config(const std::string& model,
                                                absl::Duration t) const override {
    return http_.ModelConfig(model, t);
  }
  absl::StatusOr<inference::ModelStatistics> Statistics(const std::string& model,
                                                        absl::Duration t) const override {
    return http_.ModelStatistics(model, t);
  }
  absl::StatusOr<std::vector<HostTensor>> Infer(const std::string& model,
                                                std::vector<HostTensor> inputs,
                                                absl::Duration t) const override {
    return http_.Infer(model, std::move(inputs), t);
  }
  absl::Status Register(const std::string& name, const std::string& key, int64_t byte_size,
                        absl::Duration t) const override {
    return http_.RegisterSystemSharedMemory(name, key, byte_size, t);
  }
  absl::Status Unregister(const std::string& name, absl::Duration t) const override {
    return http_.UnregisterSystemSharedMemory(name, t);
  }
  absl::StatusOr<PerfResult> Run(const std::vector<inference::ModelInferRequest>& requests,
                                 std::vector<PerfInput> inputs,
                                 const PerfOptions& options) const override {
    return RunHttpLoad(http_.address(), requests, std::move(inputs), options);
  }

 private:
  HttpPerfClient http_;
};

// `perf --shared_memory system`: one region for the inputs and one for the
// outputs, created here (owner-only, unlinked when done), registered on the
// server for the run and unregistered after, and the request that refers to
// them. Every call of the run reads the same inputs and writes the same
// output bytes, as perf_analyzer's shared-memory runs do. The output sizes
// come from one call over the socket first.
class PerfSharedMemory {
 public:
  static absl::StatusOr<std::unique_ptr<PerfSharedMemory>> Create(const PerfTarget& client,
                                                                  const std::string& model,
                                                                  std::vector<HostTensor> inputs,
                                                                  absl::Duration timeout) {
    absl::StatusOr<std::vector<HostTensor>> probe = client.Infer(model, inputs, timeout);
    if (!probe.ok()) {
      return absl::Status(probe.status().code(),
                          absl::StrCat("the request that sizes the shared memory regions failed: ",
                                       probe.status().message()));
    }
    auto aligned = [](int64_t bytes) { return (bytes + 63) / 64 * 64; };
    int64_t in_bytes = 0, out_bytes = 0;
    for (const HostTensor& t : inputs) in_bytes += aligned(static_cast<int64_t>(t.bytes.size()));
    for (const HostTensor& t : *probe) out_bytes += aligned(static_cast<int64_t>(t.bytes.size()));
    const std::string tag = absl::StrCat("gemmserve-perf-", ::getpid());
    auto shm = std::unique_ptr<PerfSharedMemory>(new PerfSharedMemory(client, timeout));
    GEMMSERVE_ASSIGN_OR_RETURN(
        SharedMemoryRegion in,
        SharedMemoryRegion::Create(absl::StrCat("/", tag, "-in"), std::max<int64_t>(1, in_bytes)));
    GEMMSERVE_ASSIGN_OR_RETURN(SharedMemoryRegion out,
                               SharedMemoryRegion::Create(absl::StrCat("/", tag, "-out"),
                                                          std::max<int64_t>(1, out_bytes)));
    std::vector<SharedMemoryInput> shm_inputs;
    int64_t at = 0;
    for (HostTensor& t : inputs) {
      const int64_t size = static_cast<int64_t>(t.bytes.size());
      GEMMSERVE_RETURN_IF_ERROR(in.Write(at, t.bytes));
      shm->described_.push_back({t.name, t.datatype, t.shape});
      t.bytes.clear();
      shm_inputs.push_back({std::move(t), {tag + "-in", at, size}});
      at += aligned(size);
    }
    std::vector<SharedMemoryOutput> shm_outputs;
    at = 0;
    for (const HostTensor& t : *probe) {
      const int64_t size = static_cast<int64_t>(t.bytes.size());
      shm_outputs.push_back({t.name, {tag + "-out", at, size}});
      at += aligned(size);
    }
    for (SharedMemoryRegion* region : {&in, &out}) {
      const std::string name = region == &in ? tag + "-in" : tag + "-out";
      GEMMSERVE_RETURN_IF_ERROR(client.Register(name, region->key(), region->byte_size(), timeout));
      shm->registered_.push_back(name);
    }
    // The server holds the objects now: their names go, so that an
    // interrupted run leaves nothing in /dev/shm.
    in.Unlink();
    out.Unlink();
    shm->regions_.push_back(std::move(in));
    shm->regions_.push_back(std::move(out));
    shm->request_ = MakeInferRequest(model, {}, shm_inputs, shm_outputs);
    return shm;
  }
  ~PerfSharedMemory() {
    for (const std::string& name : registered_) {
      absl::Status s = client_.Unregister(name, timeout_);
      if (!s.ok()) {
        std::cerr << "gemmserve-cli: note: unregistering shared memory region " << name
                  << " failed: " << s.message() << "\n";
      }
    }
  }
  const inference::ModelInferRequest& request() const { return request_; }
  const std::vector<PerfInput>& described() const { return described_; }

 private:
  PerfSharedMemory(const PerfTarget& client, absl::Duration timeout)
      : client_(client), timeout_(timeout) {}
  const PerfTarget& client_;
  absl::Duration timeout_;
  std::vector<SharedMemoryRegion> regions_;  // unlinked after the unregistering
  std::vector<std::string> registered_;
  inference::ModelInferRequest request_;
  std::vector<PerfInput> described_;
};

// The runs perf makes: one per --concurrency_range / --request_rate_range
// level, or the one the options describe.
std::vector<PerfOptions> PerfLevels(const PerfOptions& options, const PerfPlan& plan) {
  std::vector<PerfOptions> levels;
  for (int c : plan.concurrency_levels) {
    levels.push_back(options);
    levels.back().concurrency = c;
  }
  for (double r : plan.rate_levels) {
    levels.push_back(options);
    levels.back().rate = r;
  }
  if (levels.empty()) levels.push_back(options);
  return levels;
}

// The requests perf sends, built once, and the shared memory they use.
struct PerfRequests {
  std::vector<inference::ModelInferRequest> requests;
  std::vector<PerfInput> described;
  std::unique_ptr<PerfSharedMemory> shm;
};

// The model's inputs made (or read from --input_data) and turned into
// requests. `usage` says an error is the command line's (exit 2).
absl::StatusOr<PerfRequests> PreparePerfRequests(const PerfTarget& client,
                                                 const PerfOptions& options,
                                                 absl::Duration setup_timeout, bool* usage) {
  *usage = false;
  GEMMSERVE_ASSIGN_OR_RETURN(inference::ModelMetadataResponse metadata,
                             client.Metadata(options.model, setup_timeout));
  absl::StatusOr<inference::ModelConfig> config = client.Config(options.model, setup_timeout);
  if (!config.ok() && config.status().code() != absl::StatusCode::kUnimplemented) {
    std::cerr << "gemmserve-cli: note: ModelConfig failed ("
              << absl::StatusCodeToString(config.status().code()) << ": "
              << config.status().message() << "); inputs are made from the metadata alone\n";
  }
  const inference::ModelConfig* known = config.ok() ? &*config : nullptr;
  absl::StatusOr<std::vector<std::vector<HostTensor>>> inputs =
      options.input_data_file.empty()
          ? MakePerfInputPool(metadata, known, options)
          : ReadPerfInputData(options.input_data_file, metadata, known, options);
  if (!inputs.ok()) {
    *usage = inputs.status().code() == absl::StatusCode::kInvalidArgument;
    return inputs.status();
  }
  PerfRequests out;
  if (options.system_shared_memory) {
    GEMMSERVE_ASSIGN_OR_RETURN(
        out.shm, PerfSharedMemory::Create(client, options.model, (*inputs)[0], setup_timeout));
    out.requests.push_back(out.shm->request());  // the region holds the one request's inputs
    out.described = out.shm->described();
    return out;
  }
  absl::StatusOr<std::vector<PerfInput>> described = DescribePool(*inputs);
  if (!described.ok()) {
    *usage = true;
    return described.status();
  }
  out.described = *std::move(described);
  for (std::vector<HostTensor>& tensors : *inputs) {
    out.requests.push_back(MakeInferRequest(options.model, std::move(tensors)));
  }
  return out;
}

// --json_out: one object, or an array of one per level.
std::string PerfJson(const std::vector<PerfResult>& results) {
  if (results.size() == 1) return PerfResultJson(results[0]);
  std::vector<std::string> objects;
  for (const PerfResult& r : results) {
    std::string one = PerfResultJson(r);
    if (!one.empty() && one.back() == '\n') one.pop_back();
    objects.push_back(std::move(one));
  }
  return absl::StrCat("[", absl::StrJoin(objects, ",\n"), "]\n");
}

}  // namespace

int RunPerf(const Client& grpc_client, const std::string& address, const PerfOptions& options,
            const PerfPlan& plan) {
  if (absl::Status s = CheckPerfOptions(options); !s.ok()) return Usage(s.message());
  if (options.http && options.concurrency > kPerfHttpMaxConcurrency) {
    return Usage(absl::StrCat("--protocol=http takes at most ", kPerfHttpMaxConcurrency,
                              " callers (--concurrency)"));
  }
  std::unique_ptr<PerfTarget> target;
  if (options.http) {
    target = std::make_unique<HttpPerfTarget>(address);
  } else {
    target = std::make_unique<GrpcPerfTarget>(grpc_client);
  }
  const PerfTarget& client = *target;
  const std::vector<PerfOptions> levels = PerfLevels(options, plan);
  for (const PerfOptions& level : levels) {
    if (absl::Status s = CheckPerfOptions(level); !s.ok()) return Usage(s.message());
  }
  // The report files are created first, so that a bad path fails before the
  // run, and removed again if the run fails.
  OutputFile json_file, csv_file;
  if (!plan.json_out.empty()) {
    if (absl::Status s = json_file.Create(plan.json_out); !s.ok()) return Fail(s);
  }
  if (!plan.csv_out.empty()) {
    if (absl::Status s = csv_file.Create(plan.csv_out); !s.ok()) return Fail(s);
  }
  // The set-up RPCs get a deadline of their own: one long enough to connect
  // even when the calls have a tight one, and one at all when they have none,
  // so that a server that accepts connections but never answers cannot hang
  // the run.
  const absl::Duration setup_timeout = std::max(options.timeout, absl::Seconds(30));
  bool usage = false;
  absl::StatusOr<PerfRequests> prepared =
      PreparePerfRequests(client, options, setup_timeout, &usage);
  if (!prepared.ok()) return usage ? Usage(prepared.status().message()) : Fail(prepared.status());
  std::vector<PerfResult> results;
  for (const PerfOptions& level : levels) {
    // The server's statistics around the run; a server without the RPC (or
    // a failing one) gives a report without the breakdown.
    absl::StatusOr<inference::ModelStatistics> before =
        client.Statistics(options.model, setup_timeout);
    absl::StatusOr<PerfResult> result = client.Run(prepared->requests, prepared->described, level);
    if (!result.ok()) {
      if (result.status().code() == absl::StatusCode::kInvalidArgument) {
        return Usage(result.status().message());
      }
      return Fail(result.status());
    }
    absl::StatusOr<inference::ModelStatistics> after =
        before.ok() ? client.Statistics(options.model, setup_timeout) : before;
    if (before.ok() && after.ok()) result->server = ServerBreakdownBetween(*before, *after);
    std::cout << FormatPerfReport(*result) << std::flush;
    results.push_back(*std::move(result));
  }
  if (!plan.json_out.empty()) {
    if (absl::Status s = json_file.Commit(PerfJson(results)); !s.ok()) return Fail(s);
  }
  if (!plan.csv_out.empty()) {
    if (absl::Status s = csv_file.Commit(PerfCsv(results)); !s.ok()) return Fail(s);
  }
  return kExitOk;
}

}  // namespace gemmserve::client
