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
