// Fuzzes resident models end to end below gRPC: the input describes a
// one-node ONNX model (MatMul or GroupedMatMul, datatype, K, N, G, S, bias,
// index type, which graph-input dimensions are fixed and to what, possibly
// disagreeing with the weights) and a stream of requests against it (shapes
// and datatypes near the signature, and off it). The model is serialized,
// loaded through the repository's loader from memory (LoadOnnxModel on
// ModelFiles::InMemory), and every request goes through BindInputs, Prepare
// and RunBatch, alone and batched with the stream's previous request.
//
// What must hold: no crash and no sanitizer report; a load fails only with
// INVALID_ARGUMENT, and only when the graph disagrees with its weights; a
// request is accepted exactly when it matches the signature the fuzzer built
// (rank, every fixed dimension, K and S of the weights, M agreeing between
// inputs, the datatype), which the fuzzer decides on its own; every answer,
// alone and batched, equals the reference of fuzz_reference.h computed from
// the fuzzer's own copy of the weights; held_bytes covers at least the
// request's inputs and outputs.
//
// With bit 7 of the first byte the weights are quantized (issue 17): the
// graph is DequantizeLinear -> op, its integers, scales and zero points from
// the input; the reference weights are DequantizeLinear's result computed
// here in double and rounded to the value type. A load must then fail exactly
// when the value type is not FP32, FP16 or BF16, or the layout was made wrong
// on purpose (scale shape off by one, block size above K).
//
// Input, front to back (fuzz/make_seeds.py writes examples):
//   1 byte   bit 0 GroupedMatMul (else MatMul), bits 1-3 datatype (mod the
//            op's types), bit 4 bias, bit 5 INT32 indices, bit 6 raw value
//            bits, bit 7 quantized weights
//   4 bytes  K, N, G, S (K, N mod 9; G mod 5; S mod 4)
//   signature: MatMul: A's rank (1..3), then per dimension a tag byte;
//            GroupedMatMul: a tag byte for each of input [M, K] and indices
//            [M, S] dimensions. Tag: 0 free (symbolic), 1 the weights' value,
//            2 + v: fixed to v mod 9 (perhaps wrong).
//   values   the weights (and bias): one byte each, signed / 16, or raw bits
//   requests until the input ends, at most 6: a byte of mutation flags, a
//            byte of M (mod 6; for quantized weights 5 is followed by a byte
//            adding 0..27, so groups reach the BF16 panel path's rows), then
//            the dimensions it picks, then values as for the weights
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_reference.h"
#include "fuzz/fuzz_support.h"
#include "server/core/input_binding.h"
#include "server/core/model.h"
#include "server/repository/model_files.h"
#include "server/repository/onnx_model_loader.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace fuzz {
namespace {

constexpr DataType kMatMulTypes[] = {DataType::kFP32,   DataType::kFP64,  DataType::kFP16,
                                     DataType::kBF16,   DataType::kINT32, DataType::kINT64,
                                     DataType::kUINT32, DataType::kUINT64};
constexpr DataType kFloatTypes[] = {DataType::kFP32, DataType::kFP64, DataType::kFP16,
                                    DataType::kBF16};
constexpr int kMaxRequests = 6;

int OnnxType(DataType t) {
  switch (t) {
    case DataType::kFP32: return onnx::TensorProto::FLOAT;
    case DataType::kFP64: return onnx::TensorProto::DOUBLE;
    case DataType::kFP16: return onnx::TensorProto::FLOAT16;
    case DataType::kBF16: return onnx::TensorProto::BFLOAT16;
    case DataType::kINT32: return onnx::TensorProto::INT32;
    case DataType::kINT64: return onnx::TensorProto::INT64;
    case DataType::kUINT32: return onnx::TensorProto::UINT32;
    case DataType::kUINT64: return onnx::TensorProto::UINT64;
  }
  return 0;
}

// Values from the input: small exact numbers (signed byte / 16; integers take
// the byte itself), or the elements' raw bits.
Tensor Values(ByteReader& in, DataType type, const Shape& shape, bool raw_bits) {
  absl::StatusOr<Tensor> t = Tensor::Allocate(type, shape);
  FUZZ_CHECK(t.ok(), "Allocate: %s", t.status().ToString().c_str());
  auto* bytes = static_cast<uint8_t*>(t->raw_data());
  if (raw_bits) {
    for (int64_t i = 0; i < t->byte_size(); ++i) bytes[i] = in.Byte();
  } else {
    const bool is_unsigned = type == DataType::kUINT32 || type == DataType::kUINT64;
    for (int64_t i = 0; i < t->num_elements(); ++i) {
      const uint8_t byte = in.Byte();
      const double v = is_unsigned ? byte : static_cast<int8_t>(byte);
      ops_testing::SetValue(type, t->raw_data(), i, IsFloatingPoint(type) ? v / 16.0 : v);
    }
  }
  return *std::move(t);
}

constexpr int kOnnxUint4 = 21, kOnnxInt4 = 22;

// DequantizeLinear's inputs for weights of `shape` ([K, N] or [G, K, N]) from
// the input, added to the graph as initializers feeding `output`; returns
// the dequantized weights (value type `type`) and whether the loader must
// accept them. After the weights-describing bytes, one byte of layout: bits
// 0-1 INT8, UINT8, INT4, UINT4; bit 2 zero point; bits 3-4 per tensor, per
// column (axis N), per row (axis K), blocked along K; bit 5 a scale shape
// that disagrees; then a block-size byte, then one byte per integer, scale and zero
// point.
Tensor QuantizedWeightsFrom(ByteReader& in, DataType type, const Shape& shape,
                            onnx::GraphProto* graph, onnx::NodeProto* dq, bool* consistent) {
  const uint8_t layout = in.Byte();
  const int qtype = layout & 3;
  const bool has_zp = layout & 4;
  const int grain = (layout >> 3) & 3;
  const bool corrupt = layout & 32;
  const int64_t r = static_cast<int64_t>(shape.size());
  const int64_t k = shape[r - 2], n = shape[r - 1];
  const int64_t block = 1 + in.Byte() % std::max<int64_t>(k, 1);
  *consistent = type == DataType::kFP32 || type == DataType::kFP16 || type == DataType::kBF16;
  Shape scale_shape;
  int64_t axis = r - 1;
  switch (grain) {
    // (Off by two for a channel: [1] would be per tensor where the axis is 0.)
    case 0: scale_shape = corrupt ? Shape{2, 1} : Shape{}; break;
    case 1: scale_shape = {n + (corrupt ? 2 : 0)}; break;
    case 2:
      axis = r - 2;
      scale_shape = {k + (corrupt ? 2 : 0)};
      break;
    default:
      axis = r - 2;
      scale_shape = shape;
      scale_shape[r - 2] = (k + block - 1) / block + (corrupt ? 1 : 0);
      if (block > k) *consistent = false;
  }
  if (corrupt) *consistent = false;
  int64_t scales = 1;
  for (int64_t d : scale_shape) scales *= d;
  const int32_t lo = qtype == 0 ? -128 : qtype == 2 ? -8 : 0;
  const int32_t span = qtype < 2 ? 256 : 16;
  const bool four_bit = qtype >= 2;
  auto pack = [&](const std::vector<int32_t>& v) {
    std::string bytes(four_bit ? (v.size() + 1) / 2 : v.size(), '\0');
    for (size_t i = 0; i < v.size(); ++i) {
      const auto u = static_cast<uint8_t>(v[i]);
      if (!four_bit) {
        bytes[i] = static_cast<char>(u);
      } else {
        bytes[i / 2] =
            static_cast<char>(static_cast<uint8_t>(bytes[i / 2]) | ((u & 15u) << ((i & 1) * 4)));
      }
    }
    return bytes;
  };
  const int onnx_qtype = qtype == 0   ? onnx::TensorProto::INT8
                         : qtype == 1 ? onnx::TensorProto::UINT8
                         : qtype == 2 ? kOnnxInt4
                                      : kOnnxUint4;
  auto add = [&](const char* name, int onnx_type, const Shape& dims, std::string raw) {
    auto* init = graph->add_initializer();
    init->set_name(name);
    init->set_data_type(onnx_type);
    for (int64_t d : dims) init->add_dims(d);
    init->set_raw_data(std::move(raw));
    dq->add_input(name);
  };
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  std::vector<int32_t> q(static_cast<size_t>(elements));
  for (auto& v : q) v = lo + in.Byte() % span;
  // Scales 1/8 .. 1 (exact in every value type), zero points across the type.
  absl::StatusOr<Tensor> scale = Tensor::Allocate(type, scale_shape);
  FUZZ_CHECK(scale.ok(), "Allocate scale");
  std::vector<double> s(static_cast<size_t>(scales));
  for (int64_t i = 0; i < scales; ++i) {
    s[i] = (1 + in.Byte() % 8) / 8.0;
    ops_testing::SetValue(type, scale->raw_data(), i, s[i]);
  }
  std::vector<int32_t> zp(has_zp ? static_cast<size_t>(scales) : 0);
  for (auto& v : zp) v = lo + in.Byte() % span;
  add("wq", onnx_qtype, shape, pack(q));
  add("ws", OnnxType(type), scale_shape,
      std::string(static_cast<const char*>(scale->raw_data()),
                  static_cast<size_t>(scale->byte_size())));
  if (has_zp) add("wz", onnx_qtype, scale_shape, pack(zp));
  dq->set_op_type("DequantizeLinear");
  dq->add_output("w");
  auto* a = dq->add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(axis);
  if (grain == 3) {
    auto* b = dq->add_attribute();
    b->set_name("block_size");
    b->set_type(onnx::AttributeProto::INT);
    b->set_i(block);
  }
  absl::StatusOr<Tensor> w = Tensor::Allocate(type, shape);
  FUZZ_CHECK(w.ok(), "Allocate weights");
  if (!*consistent) return *std::move(w);
  const int64_t blocks = (k + block - 1) / block;
  for (int64_t e = 0; e < elements; ++e) {
    const int64_t j = e % n, row = (e / n) % k, grp = e / (n * k);
    const int64_t at = grain == 0   ? 0
                       : grain == 1 ? j
                       : grain == 2 ? row
                                    : (grp * blocks + row / block) * n + j;
    const double z = has_zp ? zp[at] : 0.0;
    ops_testing::SetValue(type, w->raw_data(), e, (q[e] - z) * s[at]);
  }
  return *std::move(w);
}

void AddGraphInput(onnx::GraphProto* g, const std::string& name, DataType type, const Shape& dims) {
  auto* in = g->add_input();
  in->set_name(name);
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(OnnxType(type));
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) {
    auto* dim = shape->add_dim();
    if (d < 0) {
      dim->set_dim_param("M");
    } else {
      dim->set_dim_value(d);
    }
  }
}

void AddInitializer(onnx::GraphProto* g, const std::string& name, const Tensor& t) {
  auto* init = g->add_initializer();
  init->set_name(name);
  init->set_data_type(OnnxType(t.type()));
  for (int64_t d : t.shape()) init->add_dims(d);
  init->set_raw_data(
      std::string(static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.byte_size())));
}

// A dimension of the signature from its tag: free, the weights' own, or fixed.
int64_t SignatureDim(ByteReader& in, int64_t weights_value) {
  const uint8_t tag = in.Byte() % 12;
  if (tag == 0) return -1;
  if (tag == 1) return weights_value;
  return (tag - 2) % 9;
}

struct Built {
  bool grouped = false;
  DataType type = DataType::kFP32, index_type = DataType::kINT64;
  int64_t k = 0, n = 0, g = 0, s = 0;
  Shape a_sig, x_sig, idx_sig;  // the graph inputs' dimensions, -1 free
  Tensor weights;
  std::optional<Tensor> bias;
  bool raw_bits = false;
  bool quantized = false;
  // What the loader must accept: the graph agrees with its weights.
  bool consistent = false;
};

Built BuildModel(ByteReader& in, onnx::ModelProto* model) {
  Built b;
  const uint8_t flags = in.Byte();
  b.grouped = flags & 1;
  b.type = b.grouped ? kFloatTypes[((flags >> 1) & 7) % 4] : kMatMulTypes[(flags >> 1) & 7];
  const bool has_bias = b.grouped && (flags & 16);
  b.index_type = flags & 32 ? DataType::kINT32 : DataType::kINT64;
  b.raw_bits = flags & 64;
  const bool quantized = flags & 128;
  b.quantized = quantized;
  b.k = in.Small(8);
  b.n = in.Small(8);
  b.g = in.Small(4);
  b.s = in.Small(3);
  model->set_ir_version(8);
  model->add_opset_import()->set_version(29);
  onnx::GraphProto* graph = model->mutable_graph();
  graph->set_name("fuzz");
  onnx::NodeProto* dq = quantized ? graph->add_node() : nullptr;
  onnx::NodeProto* node = graph->add_node();
  bool weights_ok = true;
  auto weights = [&](const Shape& shape) {
    if (quantized) return QuantizedWeightsFrom(in, b.type, shape, graph, dq, &weights_ok);
    return Values(in, b.type, shape, b.raw_bits);
  };
  if (!b.grouped) {
    const int64_t rank = 1 + in.Small(2);
    for (int64_t d = 0; d < rank; ++d) b.a_sig.push_back(SignatureDim(in, b.k));
    b.weights = weights({b.k, b.n});
    node->set_op_type("MatMul");
    node->add_input("a");
    node->add_input("w");
    AddGraphInput(graph, "a", b.type, b.a_sig);
    if (!quantized) AddInitializer(graph, "w", b.weights);
    b.consistent = b.a_sig.back() == -1 || b.a_sig.back() == b.k;
  } else {
    b.x_sig = {SignatureDim(in, -1), SignatureDim(in, b.k)};
    b.idx_sig = {SignatureDim(in, -1), SignatureDim(in, b.s)};
    b.weights = weights({b.g, b.k, b.n});
    node->set_op_type("GroupedMatMul");
    node->add_input("x");
    node->add_input("w");
    node->add_input("idx");
    AddGraphInput(graph, "x", b.type, b.x_sig);
    AddGraphInput(graph, "idx", b.index_type, b.idx_sig);
    if (!quantized) AddInitializer(graph, "w", b.weights);
    if (has_bias) {
      b.bias = Values(in, b.type, {b.g, b.n}, b.raw_bits);
      node->add_input("bias");
      AddInitializer(graph, "bias", *b.bias);
    }
    const bool m_agrees = b.x_sig[0] < 0 || b.idx_sig[0] < 0 || b.x_sig[0] == b.idx_sig[0];
    b.consistent = (b.x_sig[1] == -1 || b.x_sig[1] == b.k) && b.idx_sig[1] >= 0 && m_agrees;
  }
  node->add_output("y");
  b.consistent = b.consistent && weights_ok;
  return b;
}

// A request as the fuzzer builds it: its tensors and the view over them.
struct Request {
  std::vector<Tensor> tensors;
  std::vector<std::string> names, datatypes;
  std::vector<Shape> shapes;
  InferRequestView view;
  bool matches = false;  // the fuzzer's own verdict on the signature
  std::unique_ptr<BoundInputs> bound;
  std::unique_ptr<PreparedInference> prepared;
};

void AddTensor(Request* r, const std::string& name, Tensor t) {
  r->names.push_back(name);
  r->datatypes.emplace_back(DataTypeName(t.type()));
  r->shapes.push_back(t.shape());
  r->tensors.push_back(std::move(t));
}

void MakeView(Request* r) {
  for (size_t i = 0; i < r->tensors.size(); ++i) {
    r->view.inputs.push_back({r->names[i], r->datatypes[i], r->shapes[i], ContentsKind::kRaw,
                              r->tensors[i].raw_data(), r->tensors[i].byte_size()});
  }
}

// A dimension near what the signature wants: usually it, sometimes off by one.
int64_t NearDim(ByteReader& in, int64_t want, int64_t free_value) {
  const uint8_t tag = in.Byte() % 8;
  const int64_t base = want < 0 ? free_value : want;
  if (tag == 6) return base + 1;
  if (tag == 7) return base > 0 ? base - 1 : 2;
  return base;
}

std::unique_ptr<Request> MakeRequest(ByteReader& in, const Built& b) {
  auto r = std::make_unique<Request>();
  const uint8_t flags = in.Byte();
  const bool wrong_type = (flags & 7) == 7;
  const bool wrong_rank = ((flags >> 3) & 7) == 7;
  int64_t m = in.Small(5);
  // Quantized weights with BF16 values take the panel path from
  // kQuantizedPanelMinRows rows per group: up to 32 rows reach it.
  if (b.quantized && m == 5) m += in.Small(27);
  if (!b.grouped) {
    Shape shape;
    for (size_t d = 0; d < b.a_sig.size(); ++d) {
      const bool last = d + 1 == b.a_sig.size();
      shape.push_back(NearDim(in, b.a_sig[d], last ? b.k : (d == 0 ? m : 2)));
    }
    if (wrong_rank) shape.insert(shape.begin(), 1);
    const DataType type = wrong_type ? kMatMulTypes[(flags >> 6) % 8] : b.type;
    AddTensor(r.get(), "a", Values(in, type, shape, b.raw_bits));
    bool fixed_ok = shape.size() == b.a_sig.size();
    for (size_t d = 0; fixed_ok && d < shape.size(); ++d) {
      fixed_ok = b.a_sig[d] < 0 || shape[d] == b.a_sig[d];
    }
    r->matches = type == b.type && fixed_ok && shape.back() == b.k;
  } else {
    Shape x = {NearDim(in, b.x_sig[0], m), NearDim(in, b.x_sig[1], b.k)};
    Shape idx = {NearDim(in, b.idx_sig[0], m), NearDim(in, b.idx_sig[1], b.s)};
    if (wrong_rank) x.push_back(1);
    const DataType type = wrong_type ? kFloatTypes[(flags >> 6) % 4] : b.type;
    const DataType index_type =
        (flags & 0x38) == 0x30
            ? (b.index_type == DataType::kINT32 ? DataType::kINT64 : DataType::kINT32)
            : b.index_type;
    AddTensor(r.get(), "x", Values(in, type, x, b.raw_bits));
    absl::StatusOr<Tensor> indices = Tensor::Allocate(index_type, idx);
    FUZZ_CHECK(indices.ok(), "Allocate");
    for (int64_t i = 0; i < indices->num_elements(); ++i) {
      // Mostly in range; sometimes G itself, which RunBatch must refuse.
      const uint8_t v = in.Byte();
      const int64_t value = v == 0xff ? b.g : (b.g > 0 ? v % b.g : 0);
      if (index_type == DataType::kINT32) {
        indices->data<int32_t>()[i] = static_cast<int32_t>(value);
      } else {
        indices->data<int64_t>()[i] = value;
      }
    }
    AddTensor(r.get(), "idx", *std::move(indices));
    auto fits = [](const Shape& got, const Shape& sig) {
      if (got.size() != sig.size()) return false;
      for (size_t d = 0; d < got.size(); ++d) {
        if (sig[d] >= 0 && got[d] != sig[d]) return false;
      }
      return true;
    };
    r->matches = type == b.type && index_type == b.index_type && fits(x, b.x_sig) &&
                 fits(idx, b.idx_sig) && x[1] == b.k && x[0] == idx[0] &&
                 (b.g > 0 || x[0] * idx[1] == 0);
  }
  MakeView(r.get());
  return r;
}

// The answer against the reference, from the fuzzer's own tensors.
void CheckAnswer(const Built& b, const Request& r, const InferOutputs& out, const char* how) {
  const std::string what = absl::StrCat(b.grouped ? "GroupedMatMul " : "MatMul ", how);
  if (!out.ok()) {
    // Only an index out of range may fail an accepted request.
    FUZZ_CHECK(b.grouped && absl::IsInvalidArgument(out.status()) &&
                   absl::StrContains(out.status().message(), "outside [0, G)"),
               "%s: %s", what.c_str(), out.status().ToString().c_str());
    return;
  }
  FUZZ_CHECK(out->size() == 1 && (*out)[0].name == "y", "%s: outputs", what.c_str());
  if (b.raw_bits && IsFloatingPoint(b.type)) return;  // NaN and Inf: not compared
  if (!b.grouped) {
    CheckMatMul(what.c_str(), r.tensors[0], b.weights, (*out)[0].tensor);
  } else {
    CheckGroupedMatMul(what.c_str(), r.tensors[0], b.weights, r.tensors[1],
                       b.bias ? &*b.bias : nullptr, (*out)[0].tensor);
  }
}

bool AnyIndexOutOfRange(const Built& b, const Request& r) {
  if (!b.grouped) return false;
  const Tensor& idx = r.tensors[1];
  for (int64_t i = 0; i < idx.num_elements(); ++i) {
    const int64_t v =
        idx.type() == DataType::kINT32 ? idx.data<int32_t>()[i] : idx.data<int64_t>()[i];
    if (v < 0 || v >= b.g) return true;
  }
  return false;
}

}  // namespace
}  // namespace fuzz
}  // namespace gemmserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gemmserve;
  using namespace gemmserve::fuzz;
  ByteReader in(data, size);
  onnx::ModelProto proto;
  const Built built = BuildModel(in, &proto);
  std::map<std::string, std::string> files;
  FUZZ_CHECK(proto.SerializeToString(&files["1/model.onnx"]), "serialize");
  absl::StatusOr<std::unique_ptr<ModelFiles>> source = ModelFiles::InMemory(std::move(files));
  FUZZ_CHECK(source.ok(), "InMemory: %s", source.status().ToString().c_str());
  absl::StatusOr<std::unique_ptr<Model>> loaded =
      LoadOnnxModel("fuzz", "1", **source, "model.onnx");
  if (!loaded.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(loaded.status()) && !built.consistent,
               "load of a %s model: %s", built.consistent ? "consistent" : "inconsistent",
               loaded.status().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(built.consistent, "an inconsistent model loaded");
  const Model& model = **loaded;
  std::unique_ptr<Request> previous;
  for (int i = 0; i < kMaxRequests && !in.empty(); ++i) {
    std::unique_ptr<Request> r = MakeRequest(in, built);
    absl::StatusOr<BoundInputs> bound = BindInputs(model.metadata(), r->view);
    absl::StatusOr<std::unique_ptr<PreparedInference>> prepared =
        bound.ok() ? model.Prepare(*bound)
                   : absl::StatusOr<std::unique_ptr<PreparedInference>>(bound.status());
    FUZZ_CHECK(prepared.ok() == r->matches, "request %d %s the signature but was %s: %s", i,
               r->matches ? "matches" : "does not match", prepared.ok() ? "accepted" : "refused",
               prepared.status().ToString().c_str());
    if (!prepared.ok()) {
      FUZZ_CHECK(absl::IsInvalidArgument(prepared.status()), "refusal code: %s",
                 prepared.status().ToString().c_str());
      continue;
    }
    r->bound = std::make_unique<BoundInputs>(*std::move(bound));
    r->prepared = *std::move(prepared);
    int64_t wire = 0;
    for (const BoundInput& b : *r->bound) wire += b.byte_size;
    FUZZ_CHECK(r->prepared->held_bytes(2) >= wire + r->prepared->output_bytes(),
               "held_bytes %lld below inputs %lld + outputs %lld",
               static_cast<long long>(r->prepared->held_bytes(2)), static_cast<long long>(wire),
               static_cast<long long>(r->prepared->output_bytes()));
    PreparedInference* alone = r->prepared.get();
    std::vector<InferOutputs> out = model.RunBatch({&alone, 1}, 1 + i % 2);
    FUZZ_CHECK(out.size() == 1, "RunBatch gave %zu results", out.size());
    FUZZ_CHECK(out[0].ok() != AnyIndexOutOfRange(built, *r), "index range: %s",
               out[0].status().ToString().c_str());
    CheckAnswer(built, *r, out[0], "alone");
    if (previous) {
      PreparedInference* both[] = {previous->prepared.get(), alone};
      std::vector<InferOutputs> pair = model.RunBatch(both, 1 + i % 2);
      FUZZ_CHECK(pair.size() == 2, "RunBatch gave %zu results for 2", pair.size());
      FUZZ_CHECK(pair[0].ok() != AnyIndexOutOfRange(built, *previous) &&
                     pair[1].ok() != AnyIndexOutOfRange(built, *r),
                 "batched: one request's bad index decided the other's answer");
      CheckAnswer(built, *previous, pair[0], "batched, first");
      CheckAnswer(built, *r, pair[1], "batched, second");
    }
    previous = std::move(r);
  }
  return 0;
}
