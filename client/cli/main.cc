// gemmserve-cli: health checks, model metadata and inference against a
// gemmserve (or any KServe v2 gRPC) server from the command line. It is also
// the Docker HEALTHCHECK, hence the strict exit codes: 0 success, 1 failure
// (RPC or file error), 2 usage error.
//
// Flags are absl flags, but the command line is parsed here rather than by
// absl::ParseCommandLine: that one exits with status 1 on a bad flag and on
// --help, which would read as "unhealthy" or "RPC failed" to a script.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"
#include "client/cpp/npy.h"
#include "server/common/status_macros.h"
#include "server/tensor/datatype.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"

ABSL_FLAG(std::string, url, "127.0.0.1:8001", "server address, host:port");
ABSL_FLAG(int64_t, timeout_ms, 0, "deadline of the call in milliseconds; 0 means none");
ABSL_FLAG(std::string, output, "", "infer: write the model's only output to this .npy file");
ABSL_FLAG(std::string, output_dir, "", "infer: write each output to DIR/NAME.npy");
ABSL_FLAG(uint64_t, seed, 0, "infer: seed of the random inputs");
ABSL_FLAG(std::string, u2_datatype, "BF16",
          "infer: datatype of '<u2' (uint16) .npy inputs, BF16 or FP16");

namespace gemmserve::client {
namespace {

// The flags this program accepts, in the order --help lists them.
constexpr absl::string_view kFlagNames[] = {"url", "timeout_ms", "output", "output_dir", "seed",
                                           "u2_datatype"};

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// Random inputs beyond this are surely a typo in the shape.
constexpr int64_t kMaxRandomBytes = int64_t{1} << 31;

std::string UsageText() {
  std::string text = R"(usage: gemmserve-cli [flags] COMMAND [ARGS...]

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

flags (anywhere on the line, as --flag=VALUE or --flag VALUE):
)";
  for (absl::string_view name : kFlagNames) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    absl::StrAppend(&text, absl::StrFormat("  --%-28s %s\n",
                                           absl::StrCat(name, "=", flag->DefaultValue()),
                                           flag->Help()));
  }
  absl::StrAppend(&text, R"(
exit status: 0 success, 1 failure (the status code and message go to stderr),
2 usage error

examples:
  gemmserve-cli --url=127.0.0.1:8001 health
  gemmserve-cli metadata matmul
  gemmserve-cli infer matmul A=a.npy B=random:FP32:4x5 --output=y.npy
  gemmserve-cli infer grouped_matmul input=random:FP32:8x16 \
      weights=random:FP32:4x16x32 group_indices=random_index:INT64:8x2:4
)");
  return text;
}

int Usage(absl::string_view error) {
  std::cerr << "gemmserve-cli: " << error << "\n"
            << "usage: gemmserve-cli [flags] health [SERVICE]\n"
               "       gemmserve-cli [flags] metadata MODEL\n"
               "       gemmserve-cli [flags] infer MODEL NAME=SPEC...\n"
               "run 'gemmserve-cli --help' for the flags and the SPEC forms\n";
  return kExitUsage;
}

int Fail(const absl::Status& status) {
  std::cerr << "gemmserve-cli: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return kExitFailure;
}

struct CommandLine {
  std::vector<std::string> positionals;
  bool help = false;
};

// Sets the flags named in kFlagNames from argv and collects the rest; "--"
// ends the flags. None of our flags is boolean, so each takes a value, from
// "=VALUE" or from the next argument. Like absl, "-flag" equals "--flag".
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
    bool known = false;
    for (absl::string_view n : kFlagNames) known |= n == name;
    if (!known) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    absl::string_view value;
    if (eq != absl::string_view::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
    }
    std::string error;
    if (!absl::FindCommandLineFlag(name)->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", error));
    }
  }
  return line;
}

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
        spec.kind == InputSpec::Kind::kRandom ? "random:DTYPE:DIMS"
                                              : "random_index:DTYPE:DIMS:G",
        ", got '", value, "'"));
  }
  GEMMSERVE_ASSIGN_OR_RETURN(spec.type, ParseDataType(parts[1]));
  GEMMSERVE_ASSIGN_OR_RETURN(spec.shape, ParseDims(parts[2]));
  GEMMSERVE_ASSIGN_OR_RETURN(int64_t bytes, ByteSize(spec.shape, spec.type));
  if (bytes > kMaxRandomBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", spec.name, "': ", bytes, " bytes of random data is over the limit of ",
        kMaxRandomBytes));
  }
  if (spec.kind == InputSpec::Kind::kRandomIndex) {
    if (IsFloatingPoint(spec.type)) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", spec.name, "': random_index needs an integer datatype"));
    }
    const int64_t type_limit = spec.type == DataType::kINT32    ? int64_t{1} << 31
                               : spec.type == DataType::kUINT32 ? int64_t{1} << 32
                                                                : INT64_MAX;
    if (!absl::SimpleAtoi(parts[3], &spec.groups) || spec.groups <= 0 ||
        spec.groups > type_limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", spec.name, "': G must be a positive integer whose range [0, G) fits ",
          parts[1], ", got '", parts[3], "'"));
    }
  }
  return spec;
}

template <typename T>
void Store(int64_t index, T value, std::string* bytes) {
  std::memcpy(bytes->data() + index * static_cast<int64_t>(sizeof(T)), &value, sizeof value);
}

void StoreFloat(DataType type, int64_t index, double value, std::string* bytes) {
  switch (type) {
    case DataType::kBF16:
      return Store(index, FloatToBFloat16(static_cast<float>(value)), bytes);
    case DataType::kFP16:
      return Store(index, FloatToHalf(static_cast<float>(value)), bytes);
    case DataType::kFP32:
      return Store(index, static_cast<float>(value), bytes);
    default:
      return Store(index, value, bytes);
  }
}

void StoreInt(DataType type, int64_t index, int64_t value, std::string* bytes) {
  switch (type) {
    case DataType::kINT32:
      return Store(index, static_cast<int32_t>(value), bytes);
    case DataType::kUINT32:
      return Store(index, static_cast<uint32_t>(value), bytes);
    case DataType::kUINT64:
      return Store(index, static_cast<uint64_t>(value), bytes);
    default:
      return Store(index, value, bytes);
  }
}

HostTensor RandomTensor(const InputSpec& spec, std::mt19937_64& rng) {
  HostTensor tensor{spec.name, std::string(DataTypeName(spec.type)), spec.shape, ""};
  // ParseInputSpec has checked the size.
  const int64_t count = ElementCount(spec.shape).value();
  tensor.bytes.resize(count * DataTypeSize(spec.type));
  if (spec.kind == InputSpec::Kind::kRandomIndex) {
    std::uniform_int_distribution<int64_t> index(0, spec.groups - 1);
    for (int64_t i = 0; i < count; ++i) StoreInt(spec.type, i, index(rng), &tensor.bytes);
  } else if (IsFloatingPoint(spec.type)) {
    std::uniform_real_distribution<double> real(-1.0, 1.0);
    for (int64_t i = 0; i < count; ++i) StoreFloat(spec.type, i, real(rng), &tensor.bytes);
  } else {
    const bool is_signed = spec.type == DataType::kINT32 || spec.type == DataType::kINT64;
    std::uniform_int_distribution<int64_t> small(is_signed ? -8 : 0, 8);
    for (int64_t i = 0; i < count; ++i) StoreInt(spec.type, i, small(rng), &tensor.bytes);
  }
  return tensor;
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
    case DataType::kBF16:
      return FloatToBFloat16(p) == FloatToBFloat16(v);
    case DataType::kFP16:
      return FloatToHalf(p) == FloatToHalf(v);
    case DataType::kFP32:
      return p == v;
    default:
      return parsed == value;
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
    case DataType::kFP16:
      return FormatFloat(HalfToFloat(Load<uint16_t>(tensor.bytes, i)), type);
    case DataType::kFP32:
      return FormatFloat(Load<float>(tensor.bytes, i), type);
    case DataType::kFP64:
      return FormatFloat(Load<double>(tensor.bytes, i), type);
    case DataType::kINT32:
      return absl::StrCat(Load<int32_t>(tensor.bytes, i));
    case DataType::kINT64:
      return absl::StrCat(Load<int64_t>(tensor.bytes, i));
    case DataType::kUINT32:
      return absl::StrCat(Load<uint32_t>(tensor.bytes, i));
    case DataType::kUINT64:
      return absl::StrCat(Load<uint64_t>(tensor.bytes, i));
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
    const std::string separator = axis + 1 == rank
                                      ? " "
                                      : std::string(rank - axis - 1, '\n') +
                                            std::string(axis + 1, ' ');
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
  std::cout << tensor.name << ": " << tensor.datatype << " " << ShapeToString(tensor.shape)
            << "\n";
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
                    name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                           "0123456789_.-") == absl::string_view::npos;
  if (safe) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("output name '", name, "' is not a safe file name"));
}

// ---------------------------------------------------------------- commands

int RunHealth(const Client& client, const std::vector<std::string>& args,
              absl::Duration timeout) {
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
  using Tensors = google::protobuf::RepeatedPtrField<
      inference::ModelMetadataResponse::TensorMetadata>;
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

int RunInfer(const Client& client, const std::vector<std::string>& args,
             absl::Duration timeout) {
  if (args.empty()) return Usage("infer takes a MODEL and NAME=SPEC inputs");
  const std::string output = absl::GetFlag(FLAGS_output);
  const std::string output_dir = absl::GetFlag(FLAGS_output_dir);
  if (!output.empty() && !output_dir.empty()) {
    return Usage("--output and --output_dir exclude each other");
  }
  const std::string u2_datatype = absl::GetFlag(FLAGS_u2_datatype);
  if (u2_datatype != "BF16" && u2_datatype != "FP16") {
    return Usage("--u2_datatype must be BF16 or FP16");
  }
  std::vector<InputSpec> specs;
  for (size_t i = 1; i < args.size(); ++i) {
    absl::StatusOr<InputSpec> spec = ParseInputSpec(args[i]);
    if (!spec.ok()) return Usage(spec.status().message());
    for (const InputSpec& other : specs) {
      if (other.name == spec->name) return Usage(absl::StrCat("input '", spec->name, "' given twice"));
    }
    specs.push_back(*std::move(spec));
  }

  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::vector<HostTensor> inputs;
  for (const InputSpec& spec : specs) {
    if (spec.kind != InputSpec::Kind::kFile) {
      inputs.push_back(RandomTensor(spec, rng));
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
  if (command != "health" && command != "metadata" && command != "infer") {
    return Usage(absl::StrCat("unknown command '", command, "'"));
  }
  absl::StatusOr<Client> client = Client::Connect(absl::GetFlag(FLAGS_url));
  if (!client.ok()) return Usage(client.status().message());
  if (command == "health") return RunHealth(*client, args, timeout);
  if (command == "metadata") return RunMetadata(*client, args, timeout);
  return RunInfer(*client, args, timeout);
}

}  // namespace
}  // namespace gemmserve::client

int main(int argc, char** argv) { return gemmserve::client::Main(argc, argv); }
