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

// ------------------------------------------------------------------ inputs

struct InputSpec {
  enum class Kind { kFile, kRandom, kRandomIndex };
  std::string name;
  Kind kind = Kind::kFile;
  std::string path;
  DataType type = DataType::kFP32;
  std::vector<int64_t> shape;
  int64_t groups = 0;  // kRandomIndex: values are drawn from [0, groups)
};

absl::StatusOr<std::vector<int64_t>> ParseDims(absl::string_view dims) {
  std::vector<int64_t> shape;
  if (dims.empty()) return shape;
  for (absl::string_view d : absl::StrSplit(dims, 'x')) {
    int64_t value;
    if (!absl::SimpleAtoi(d, &value) || value < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad dimension '", d, "' in '", dims, "'"));
    }
    shape.push_back(value);
  }
  return shape;
}

// Errors here are usage errors: they are about the command line only.
absl::StatusOr<InputSpec> ParseInputSpec(absl::string_view operand) {
  const size_t eq = operand.find('=');
  if (eq == 0 || eq == absl::string_view::npos || eq + 1 == operand.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input operand '", operand, "' is not NAME=SPEC"));
  }
  InputSpec spec;
  spec.name = std::string(operand.substr(0, eq));
  const absl::string_view value = operand.substr(eq + 1);
  const std::vector<absl::string_view> parts = absl::StrSplit(value, ':');
  if (parts[0] == "random") {
    spec.kind = InputSpec::Kind::kRandom;
  } else if (parts[0] == "random_index") {
    spec.kind = InputSpec::Kind::kRandomIndex;
  } else {
    spec.path = std::string(value);
    return spec;
  }
  const size_t expected_parts = spec.kind == InputSpec::Kind::kRandom ? 3 : 4;
  if (parts.size() != expected_parts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", spec.name, "': expected ",
        spec.kind == InputSpec::Kind::kRandom ? "random:DTYPE:DIMS" : "random_index:DTYPE:DIMS:G",
        ", got '", value, "'"));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(spec.type, ParseDataType(parts[1]));
  GEMMSERVE_ASSIGN_OR_RETURN(spec.shape, ParseDims(parts[2]));
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t bytes, ByteSize(spec.shape, spec.type));
  if (bytes > kMaxRandomTensorBytes) {
    return absl::InvalidArgumentError(absl::StrCat("input '", spec.name, "': ", bytes,
                                                   " bytes of random data is over the limit of ",
                                                   kMaxRandomTensorBytes));
  }
  if (spec.kind == InputSpec::Kind::kRandomIndex) {
    if (IsFloatingPoint(spec.type)) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", spec.name, "': random_index needs an integer datatype"));
    }
    const int64_t type_limit = spec.type == DataType::kINT32    ? int64_t{1} << 31
                               : spec.type == DataType::kUINT32 ? int64_t{1} << 32
                                                                : INT64_MAX;
    if (!absl::SimpleAtoi(parts[3], &spec.groups) || spec.groups <= 0 || spec.groups > type_limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", spec.name, "': G must be a positive integer whose range [0, G) fits ",
          parts[1], ", got '", parts[3], "'"));
    }
  }
  return spec;
}

// ---------------------------------------------------------------- printing

template <typename T>
T Load(const std::string& bytes, int64_t index) {
  T value;
  std::memcpy(&value, bytes.data() + index * static_cast<int64_t>(sizeof(T)), sizeof value);
  return value;
}

// True if `parsed` and `value` are the same number once stored as `type`.
bool SameInType(double parsed, double value, DataType type) {
  const float p = static_cast<float>(parsed), v = static_cast<float>(value);
  switch (type) {
    case DataType::kBF16: return FloatToBFloat16(p) == FloatToBFloat16(v);
    case DataType::kFP16: return FloatToHalf(p) == FloatToHalf(v);
    case DataType::kFP32: return p == v;
    default: return parsed == value;
  }
}

// The fewest significant digits that read back as the same value of the
// tensor's type, as numpy prints: 0.1 in BF16 shows as "0.1", not as the
// "0.10009766" it widens to.
std::string FormatFloat(double value, DataType type) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  for (int digits = 1; digits < 17; ++digits) {
    std::string text = absl::StrFormat("%.*g", digits, value);
    if (SameInType(std::strtod(text.c_str(), nullptr), value, type)) return text;
  }
  return absl::StrFormat("%.17g", value);
}

std::string FormatElement(const HostTensor& tensor, DataType type, int64_t i) {
  switch (type) {
    case DataType::kBF16:
      return FormatFloat(BFloat16ToFloat(Load<uint16_t>(tensor.bytes, i)), type);
    case DataType::kFP16: return FormatFloat(HalfToFloat(Load<uint16_t>(tensor.bytes, i)), type);
    case DataType::kFP32: return FormatFloat(Load<float>(tensor.bytes, i), type);
    case DataType::kFP64: return FormatFloat(Load<double>(tensor.bytes, i), type);
    case DataType::kINT32: return absl::StrCat(Load<int32_t>(tensor.bytes, i));
    case DataType::kINT64: return absl::StrCat(Load<int64_t>(tensor.bytes, i));
    case DataType::kUINT32: return absl::StrCat(Load<uint32_t>(tensor.bytes, i));
    case DataType::kUINT64: return absl::StrCat(Load<uint64_t>(tensor.bytes, i));
  }
  return "?";
}

// Prints a tensor the way numpy's str() does: nested brackets, right-aligned
// columns, and above 1000 elements only the first and last 3 entries of each
// axis. The tensor's byte count must match its shape (Client::Infer checks).
class ArrayPrinter {
 public:
  ArrayPrinter(const HostTensor& tensor, DataType type) : tensor_(tensor), type_(type) {
    strides_.assign(tensor.shape.size(), 1);
    for (size_t axis = tensor.shape.size(); axis-- > 1;) {
      strides_[axis - 1] = strides_[axis] * tensor.shape[axis];
    }
    summarize_ = ElementCount(tensor.shape).value_or(0) > kThreshold;
  }

  std::string Print() {
    if (ElementCount(tensor_.shape).value_or(0) == 0 && !tensor_.shape.empty()) return "[]";
    std::string out;
    measuring_ = true;  // first pass: the widest element sets the column width
    Walk(0, 0, &out);
    measuring_ = false;
    out.clear();
    Walk(0, 0, &out);
    return out;
  }

 private:
  static constexpr int64_t kThreshold = 1000;
  static constexpr int64_t kEdgeItems = 3;

  void Walk(size_t axis, int64_t offset, std::string* out) {
    const size_t rank = tensor_.shape.size();
    if (axis == rank) {
      const std::string text = FormatElement(tensor_, type_, offset);
      if (measuring_) {
        width_ = std::max(width_, text.size());
      } else {
        out->append(width_ - text.size(), ' ');
        *out += text;
      }
      return;
    }
    // Sub-arrays are separated like numpy's: one space inside a row, and for
    // outer axes one newline per inner axis, indented past the brackets.
    const std::string separator =
        axis + 1 == rank ? " " : std::string(rank - axis - 1, '\n') + std::string(axis + 1, ' ');
    const int64_t n = tensor_.shape[axis];
    out->push_back('[');
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0) *out += separator;
      if (summarize_ && n > 2 * kEdgeItems && i == kEdgeItems) {
        *out += "...";
        i = n - kEdgeItems - 1;
        continue;
      }
      Walk(axis + 1, offset + i * strides_[axis], out);
    }
    out->push_back(']');
  }

  const HostTensor& tensor_;
  const DataType type_;
  std::vector<int64_t> strides_;
  bool summarize_ = false;
  bool measuring_ = false;
  size_t width_ = 0;
};

void PrintTensor(const HostTensor& tensor) {
  std::cout << tensor.name << ": " << tensor.datatype << " " << ShapeToString(tensor.shape) << "\n";
  absl::StatusOr<DataType> type = ParseDataType(tensor.datatype);
  if (!type.ok()) {
    std::cout << "(" << tensor.bytes.size() << " bytes, not shown)\n";
    return;
  }
  std::cout << ArrayPrinter(tensor, *type).Print() << "\n";
}

// Output names come from the server, so they must not steer a write out of
// --output_dir.
absl::Status CheckFileName(absl::string_view name) {
  const bool safe = !name.empty() && name != "." && name != ".." &&
                    name.find_first_not_of(
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                        "0123456789_.-") == absl::string_view::npos;
  if (safe) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("output name '", name, "' is not a safe file name"));
}

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

}  // namespace

// ---------------------------------------------------------------- commands

int Usage(absl::string_view error) {
  std::cerr << "gemmserve-cli: " << error << "\n"
            << "usage: gemmserve-cli [flags] health [SERVICE]\n"
               "       gemmserve-cli [flags] metadata MODEL\n"
               "       gemmserve-cli [flags] infer MODEL NAME=SPEC...\n"
               "       gemmserve-cli [flags] perf --model=MODEL [--shape=NAME:d1,d2,...]...\n"
               "       gemmserve-cli [flags] noop-server [--host=HOST] [--port=PORT]\n"
               "run 'gemmserve-cli --help' for the flags and the SPEC forms\n";
  return kExitUsage;
}

int Fail(const absl::Status& status) {
  std::cerr << "gemmserve-cli: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return kExitFailure;
}

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

int RunHealth(const Client& client, const std::vector<std::string>& args, absl::Duration timeout) {
  if (args.size() > 1) return Usage("health takes at most one SERVICE");
  absl::StatusOr<ServingStatus> status = client.Health(args.empty() ? "" : args[0], timeout);
  if (!status.ok()) return Fail(status.status());
  std::cout << ServingStatusName(*status) << "\n";
  return *status == ServingStatus::kServing ? kExitOk : kExitFailure;
}

int RunMetadata(const Client& client, const std::vector<std::string>& args,
                absl::Duration timeout) {
  if (args.size() != 1) return Usage("metadata takes one MODEL");
  absl::StatusOr<inference::ModelMetadataResponse> metadata =
      client.ModelMetadata(args[0], timeout);
  if (!metadata.ok()) return Fail(metadata.status());
  std::cout << "model: " << metadata->name() << "\n"
            << "versions: " << absl::StrJoin(metadata->versions(), ", ") << "\n"
            << "platform: " << metadata->platform() << "\n";
  using Tensors =
      google::protobuf::RepeatedPtrField<inference::ModelMetadataResponse::TensorMetadata>;
  const auto print_tensors = [](absl::string_view title, const Tensors& tensors) {
    std::cout << title << ":\n";
    int name_width = 0, type_width = 0;
    for (const auto& t : tensors) {
      name_width = std::max(name_width, static_cast<int>(t.name().size()));
      type_width = std::max(type_width, static_cast<int>(t.datatype().size()));
    }
    for (const auto& t : tensors) {
      std::cout << absl::StrFormat("  %-*s  %-*s  %s\n", name_width, t.name(), type_width,
                                   t.datatype(), ShapeToString(t.shape()));
    }
  };
  print_tensors("inputs", metadata->inputs());
  print_tensors("outputs", metadata->outputs());
  return kExitOk;
}

int RunInfer(const Client& client, const std::vector<std::string>& args, absl::Duration timeout,
             const InferOptions& options) {
  if (args.empty()) return Usage("infer takes a MODEL and NAME=SPEC inputs");
  const std::string& output = options.output;
  const std::string& output_dir = options.output_dir;
  if (!output.empty() && !output_dir.empty()) {
    return Usage("--output and --output_dir exclude each other");
  }
  const std::string& u2_datatype = options.u2_datatype;
  if (u2_datatype != "BF16" && u2_datatype != "FP16") {
    return Usage("--u2_datatype must be BF16 or FP16");
  }
  std::vector<InputSpec> specs;
  for (size_t i = 1; i < args.size(); ++i) {
    absl::StatusOr<InputSpec> spec = ParseInputSpec(args[i]);
    if (!spec.ok()) return Usage(spec.status().message());
    for (const InputSpec& other : specs) {
      if (other.name == spec->name) {
        return Usage(absl::StrCat("input '", spec->name, "' given twice"));
      }
    }
    specs.push_back(*std::move(spec));
  }

  std::mt19937_64 rng(options.seed);
  std::vector<HostTensor> inputs;
  for (const InputSpec& spec : specs) {
    if (spec.kind != InputSpec::Kind::kFile) {
      // ParseInputSpec has checked what RandomTensor checks.
      absl::StatusOr<HostTensor> tensor =
          RandomTensor(spec.name, spec.type, spec.shape, rng,
                       spec.kind == InputSpec::Kind::kRandomIndex ? spec.groups : 0);
      if (!tensor.ok()) return Usage(tensor.status().message());
      inputs.push_back(*std::move(tensor));
      continue;
    }
    absl::StatusOr<HostTensor> tensor = ReadNpy(spec.path, u2_datatype);
    if (!tensor.ok()) return Fail(tensor.status());
    tensor->name = spec.name;
    inputs.push_back(*std::move(tensor));
  }

  absl::StatusOr<std::vector<HostTensor>> outputs =
      client.Infer(args[0], std::move(inputs), timeout);
  if (!outputs.ok()) return Fail(outputs.status());

  if (output.empty() && output_dir.empty()) {
    for (const HostTensor& tensor : *outputs) PrintTensor(tensor);
    return kExitOk;
  }
  if (!output.empty() && outputs->size() != 1) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        "model '", args[0], "' returned ", outputs->size(), " outputs; use --output_dir")));
  }
  for (const HostTensor& tensor : *outputs) {
    std::string path = output;
    if (path.empty()) {
      if (absl::Status s = CheckFileName(tensor.name); !s.ok()) return Fail(s);
      path = absl::StrCat(output_dir, "/", tensor.name, ".npy");
    }
    if (absl::Status s = WriteNpy(path, tensor); !s.ok()) return Fail(s);
    std::cout << tensor.name << ": " << tensor.datatype << " " << ShapeToString(tensor.shape)
              << " -> " << path << "\n";
  }
  return kExitOk;
}

namespace {

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

int RunNoopServer(const std::string& host, int port) {
  // Before gRPC starts its threads (they inherit the mask): only sigwait
  // below receives the shutdown signals.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<NoopServer>> server = NoopServer::Start(host, port);
  if (!server.ok()) {
    if (server.status().code() == absl::StatusCode::kInvalidArgument) {
      return Usage(server.status().message());
    }
    return Fail(server.status());
  }
  std::cout << "noop-server listening on " << (*server)->address() << std::endl;
  int received = 0;
  sigwait(&signals, &received);
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  (*server)->Wait();
  return kExitOk;
}

}  // namespace gemmserve::client
