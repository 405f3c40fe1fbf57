// Calls a mixture-of-experts layer model (docs/moe_layer.md) on a gemmserve
// server through the installed C++ client and checks what a layer promises,
// whatever its weights: examples/moe_layer.js of the Node.js client, in C++.
//
//   moe_layer_example [URL] [MODEL]   # default 127.0.0.1:8001 moe_layer
//
// It reads the model's metadata (K and the datatype T from x's shape [-1, K])
// and its config's parameters (layer, routing, activation, groups), sends
// 4 tokens x [4, K] of seeded random values in T (with ids [4, S] in
// [0, groups) and weights w [4, S] when the routing is "given"), and checks
// that out is [4, K] of T and finite; then sends tokens 0-1 alone and checks
// they get rows 0-1 of the 4-token answer, within 1e-4 of its largest
// magnitude: tokens are independent in a layer. Every check prints a line
// ending in ": OK" or ": MISMATCH".
//
// Exit status: 0 when every check is OK, 1 on a mismatch or a failed call
// (the status is printed), 2 on a usage error.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"
#include "client/cpp/host_tensor.h"
#include "server/tensor/half.h"

namespace {

using gemmserve::client::Client;
using gemmserve::client::HostTensor;

constexpr int64_t kTokens = 4;
constexpr int64_t kAlone = 2;  // tokens 0..kAlone-1 sent again on their own
constexpr double kTolerance = 1e-4;
constexpr absl::Duration kTimeout = absl::Seconds(30);

// One tensor of the model's metadata.
struct TensorInfo {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
};

// The layer, from its metadata and config. `ids` and `w` are set (non-empty
// names) when the routing is given.
struct Layer {
  std::string layer, routing, activation;
  int64_t groups = 0;
  TensorInfo x, ids, w;
  int64_t k = 0, s = 0;
  std::string out;
};

// The Node.js example's generator (mulberry32), values in [-1, 1): both send the same tokens.
std::vector<float> RandomValues(int64_t count, uint32_t seed) {
  std::vector<float> values(count);
  uint32_t state = seed;
  for (float& value : values) {
    state += 0x6d2b79f5u;
    uint32_t t = state;
    t = (t ^ (t >> 15)) * (t | 1u);
    t ^= t + (t ^ (t >> 7)) * (t | 61u);
    value = static_cast<float>((t ^ (t >> 14)) / 4294967296.0 * 2 - 1);
  }
  return values;
}

bool IsFloatType(const std::string& datatype) {
  return datatype == "FP32" || datatype == "FP16" || datatype == "BF16";
}

// The raw little-endian bytes of `values`.
template <typename T>
std::string Bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// float values -> the bytes of a tensor of `datatype` (FP16/BF16 as bit patterns).
std::string EncodeFloats(const std::vector<float>& values, const std::string& datatype) {
  if (datatype == "FP32") return Bytes(values);
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] = datatype == "BF16" ? gemmserve::FloatToBFloat16(values[i])
                                 : gemmserve::FloatToHalf(values[i]);
  }
  return Bytes(bits);
}

// An FP32, FP16 or BF16 tensor's values.
std::vector<float> DecodeFloats(const HostTensor& tensor) {
  if (tensor.datatype == "FP32") {
    std::vector<float> values(tensor.bytes.size() / sizeof(float));
    std::memcpy(values.data(), tensor.bytes.data(), values.size() * sizeof(float));
    return values;
  }
  std::vector<float> values(tensor.bytes.size() / sizeof(uint16_t));
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, tensor.bytes.data() + i * sizeof bits, sizeof bits);
    values[i] =
        tensor.datatype == "BF16" ? gemmserve::BFloat16ToFloat(bits) : gemmserve::HalfToFloat(bits);
  }
  return values;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text;
  for (int64_t dim : shape) text += (text.empty() ? "" : ", ") + std::to_string(dim);
  return "[" + text + "]";
}

bool Report(const std::string& label, bool ok) {
  std::printf("%s: %s\n", label.c_str(), ok ? "OK" : "MISMATCH");
  return ok;
}

TensorInfo InfoOf(const inference::ModelMetadataResponse::TensorMetadata& tensor) {
  return {tensor.name(), tensor.datatype(), {tensor.shape().begin(), tensor.shape().end()}};
}

// The layer's tensors and parameters: x (the first input), and with given
// routing ids (the integer input) and w (the other one).
absl::StatusOr<Layer> DescribeLayer(const Client& client, const std::string& model) {
  absl::StatusOr<inference::ModelMetadataResponse> metadata = client.ModelMetadata(model, kTimeout);
  if (!metadata.ok()) return metadata.status();
  absl::StatusOr<inference::ModelConfig> config = client.ModelConfig(model, kTimeout);
  if (!config.ok()) return config.status();
  if (metadata->inputs().empty() || metadata->outputs().empty()) {
    return absl::FailedPreconditionError("model '" + model + "' has no inputs or outputs");
  }
  auto parameter = [&](const std::string& key) {
    auto found = config->parameters().find(key);
    return found == config->parameters().end() ? "" : found->second.string_value();
  };
  Layer layer;
  layer.layer = parameter("layer");
  layer.routing = parameter("routing");
  layer.activation = parameter("activation");
  layer.groups = std::atoll(parameter("groups").c_str());
  layer.x = InfoOf(metadata->inputs(0));
  layer.k = layer.x.shape.empty() ? 0 : layer.x.shape.back();
  for (int i = 1; i < metadata->inputs_size(); ++i) {
    const TensorInfo info = InfoOf(metadata->inputs(i));
    (IsFloatType(info.datatype) ? layer.w : layer.ids) = info;
  }
  layer.s = layer.ids.shape.empty() ? 0 : layer.ids.shape.back();
  layer.out = metadata->outputs(0).name();
  return layer;
}

// The metadata and config say a layer of a datatype this example sends.
bool CheckLayer(const std::string& model, const Layer& layer) {
  const bool given = layer.routing == "given";
  const bool ok = layer.layer == "moe_ffn" && IsFloatType(layer.x.datatype) && layer.k > 0 &&
                  given == (!layer.ids.name.empty() && !layer.w.name.empty()) &&
                  (!given || (layer.s > 0 && layer.groups >= layer.s));
  auto said = [](const std::string& value) { return value.empty() ? "(none)" : value; };
  return Report(model + ": layer " + said(layer.layer) + ", routing " + said(layer.routing) +
                    ", activation " + said(layer.activation) + ", groups " +
                    (layer.groups > 0 ? std::to_string(layer.groups) : "(none)") + ", " +
                    layer.x.name + " " + layer.x.datatype + " " + ShapeText(layer.x.shape),
                ok);
}

// Token m's experts (3m + s) % groups: S different ones, as INT64 or INT32.
std::string ExpertIds(const Layer& layer) {
  std::vector<int64_t> ids(kTokens * layer.s);
  for (int64_t i = 0; i < kTokens * layer.s; ++i) {
    ids[i] = (3 * (i / layer.s) + i % layer.s) % layer.groups;
  }
  if (layer.ids.datatype == "INT64") return Bytes(ids);
  return Bytes(std::vector<int32_t>(ids.begin(), ids.end()));
}

// The request for kTokens tokens: x, and with given routing ids and random weights in [0, 1).
std::vector<HostTensor> LayerInputs(const Layer& layer) {
  std::vector<HostTensor> inputs;
  inputs.push_back({layer.x.name,
                    layer.x.datatype,
                    {kTokens, layer.k},
                    EncodeFloats(RandomValues(kTokens * layer.k, 1), layer.x.datatype)});
  if (layer.routing != "given") return inputs;
  inputs.push_back({layer.ids.name, layer.ids.datatype, {kTokens, layer.s}, ExpertIds(layer)});
  std::vector<float> weights = RandomValues(kTokens * layer.s, 2);
  for (float& weight : weights) weight = (weight + 1) / 2;
  inputs.push_back({layer.w.name,
                    layer.w.datatype,
                    {kTokens, layer.s},
                    EncodeFloats(weights, layer.w.datatype)});
  return inputs;
}

// The same request cut to its first `rows` tokens.
std::vector<HostTensor> FirstTokens(const std::vector<HostTensor>& inputs, int64_t rows) {
  std::vector<HostTensor> cut;
  for (const HostTensor& tensor : inputs) {
    const size_t bytes = tensor.bytes.size() / tensor.shape[0] * rows;
    cut.push_back(
        {tensor.name, tensor.datatype, {rows, tensor.shape[1]}, tensor.bytes.substr(0, bytes)});
  }
  return cut;
}

// out is [kTokens, K] of x's datatype, every value finite.
bool CheckAnswer(const std::string& model, const Layer& layer, const HostTensor& out) {
  bool ok = out.datatype == layer.x.datatype && out.shape == std::vector<int64_t>{kTokens, layer.k};
  if (ok) {
    const std::vector<float> values = DecodeFloats(out);
    ok = values.size() == static_cast<size_t>(kTokens * layer.k) &&
         std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); });
  }
  return Report(model + " " + layer.x.name + " " + ShapeText({kTokens, layer.k}) + " -> " +
                    layer.out + " " + out.datatype + " " + ShapeText(out.shape) + ", finite",
                ok);
}

// Tokens 0..kAlone-1 sent alone against the same rows of the full answer.
bool CheckAlone(const std::string& model, const Layer& layer, const HostTensor& full,
                const HostTensor& alone) {
  const size_t rows = kAlone * layer.k;
  std::vector<float> want = DecodeFloats(full);
  want.resize(rows);
  const std::vector<float> got = DecodeFloats(alone);
  double largest = 0, worst = got.size() == rows ? 0 : std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < rows; ++i) largest = std::max(largest, std::fabs(double{want[i]}));
  for (size_t i = 0; i < got.size() && i < rows; ++i) {
    worst = std::max(worst, std::fabs(double{got[i]} - double{want[i]}));
  }
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, "max |diff| %.2e, max |out| %.4f", worst, largest);
  const std::string last = std::to_string(kAlone - 1);
  return Report(model + " tokens 0-" + last + " alone = rows 0-" + last + " of the " +
                    std::to_string(kTokens) + "-token answer (" + numbers + ")",
                largest > 0 && worst <= kTolerance * largest);
}

// `model`'s output named `name` for `inputs`, or the failed call's status.
absl::StatusOr<HostTensor> Output(const Client& client, const std::string& model,
                                  const std::string& name, std::vector<HostTensor> inputs) {
  absl::StatusOr<std::vector<HostTensor>> outputs =
      client.Infer(model, std::move(inputs), kTimeout);
  if (!outputs.ok()) return outputs.status();
  for (HostTensor& output : *outputs) {
    if (output.name == name) return std::move(output);
  }
  return absl::InternalError("the answer has no output '" + name + "'");
}

// Prints a failed call's status; the exit status 1.
int Failed(const std::string& model, const absl::Status& status) {
  std::fprintf(stderr, "%s failed: %s\n", model.c_str(), status.ToString().c_str());
  return 1;
}

// 0 when every check is OK, 1 at the first mismatch or failed call.
int Run(const std::string& url, const std::string& model) {
  absl::StatusOr<Client> client = Client::Connect(url);
  if (!client.ok()) return Failed(model, client.status());
  absl::StatusOr<Layer> layer = DescribeLayer(*client, model);
  if (!layer.ok()) return Failed(model, layer.status());
  if (!CheckLayer(model, *layer)) return 1;
  const std::vector<HostTensor> inputs = LayerInputs(*layer);
  absl::StatusOr<HostTensor> full = Output(*client, model, layer->out, inputs);
  if (!full.ok()) return Failed(model, full.status());
  if (!CheckAnswer(model, *layer, *full)) return 1;
  absl::StatusOr<HostTensor> alone =
      Output(*client, model, layer->out, FirstTokens(inputs, kAlone));
  if (!alone.ok()) return Failed(model, alone.status());
  return CheckAlone(model, *layer, *full, *alone) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 3 || (argc > 1 && argv[1][0] == '-')) {
    std::fprintf(stderr, "usage: %s [URL] [MODEL]   (default 127.0.0.1:8001 moe_layer)\n", argv[0]);
    return 2;
  }
  return Run(argc > 1 ? argv[1] : "127.0.0.1:8001", argc > 2 ? argv[2] : "moe_layer");
}
