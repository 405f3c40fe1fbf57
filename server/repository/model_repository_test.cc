// The ONNX loader and the repository, on model files written by the test.
#include "server/repository/model_repository.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <onnx/onnx_pb.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/substitute.h"
#include "server/common/client_text.h"
#include "server/core/input_binding.h"
#include "server/repository/onnx_model_loader.h"
#include "server/repository/warmup_config.h"

namespace gemmserve {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "gemmserve-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void AddInput(onnx::GraphProto* g, const std::string& name, int elem, std::vector<int64_t> dims) {
  auto* in = g->add_input();
  in->set_name(name);
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  for (int64_t d : dims) {
    auto* dim = tt->mutable_shape()->add_dim();
    if (d < 0) {
      dim->set_dim_param("M");
    } else {
      dim->set_dim_value(d);
    }
  }
}

onnx::TensorProto* AddFloatInitializer(onnx::GraphProto* g, const std::string& name,
                                       std::vector<int64_t> dims, const std::vector<float>& v) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
  return t;
}

// A grouped model: input [M, K] FP32, weights [G, K, N], indices [M, S].
onnx::ModelProto GroupedModel(int64_t g, int64_t k, int64_t n, int64_t s,
                              const std::vector<float>& w) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_version(29);
  auto* graph = m.mutable_graph();
  graph->set_name("moe");
  auto* node = graph->add_node();
  node->set_op_type("GroupedMatMul");
  node->add_input("x");
  node->add_input("experts");
  node->add_input("route");
  node->add_output("y");
  AddInput(graph, "x", onnx::TensorProto::FLOAT, {-1, k});
  AddInput(graph, "route", onnx::TensorProto::INT64, {-1, s});
  AddFloatInitializer(graph, "experts", {g, k, n}, w);
  auto* out = graph->add_output();
  out->set_name("y");
  return m;
}

void Write(const fs::path& path, const onnx::ModelProto& m) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  ASSERT_TRUE(m.SerializeToOstream(&out));
}

std::vector<float> Iota(int64_t count) {
  std::vector<float> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = static_cast<float>(i % 7) - 3.0f;
  return v;
}

// The temporary directory as a model directory (the repository is its parent).
std::unique_ptr<ModelFiles> FilesOf(const TempDir& dir) {
  auto files =
      ModelFiles::InDirectory(dir.path().parent_path().string(), dir.path().filename().string());
  EXPECT_TRUE(files.ok()) << files.status();
  return files.ok() ? *std::move(files) : nullptr;
}

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const TempDir& dir, const std::string& file,
                                                 const std::string& version = "1") {
  std::unique_ptr<ModelFiles> files = FilesOf(dir);
  if (!files) return absl::InternalError("no model directory");
  return LoadOnnxModel("m", version, *files, file);
}

absl::Status LoadFile(const TempDir& dir, const onnx::ModelProto& m) {
  Write(dir.path() / "1" / "model.onnx", m);
  return LoadModel(dir, "model.onnx").status();
}

// One request through the model's own path (bind, prepare, run): the values
// the loaded weights give.
template <typename Out, typename... Inputs>
std::vector<Out> RunModel(const Model& model, const Inputs&... inputs) {
  struct Owned {
    std::string name, datatype;
    Shape shape;
    std::string bytes;
  };
  std::vector<Owned> owned;
  auto add = [&](const auto& in) {
    const auto& [name, datatype, shape, values] = in;
    std::string bytes(values.size() * sizeof(values[0]), '\0');
    if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
    owned.push_back({name, datatype, shape, std::move(bytes)});
  };
  (add(inputs), ...);
  InferRequestView view;
  for (const Owned& o : owned) {
    view.inputs.push_back({o.name, o.datatype, o.shape, ContentsKind::kRaw, o.bytes.data(),
                           static_cast<int64_t>(o.bytes.size())});
  }
  absl::StatusOr<BoundInputs> bound = BindInputs(model.metadata(), view);
  EXPECT_TRUE(bound.ok()) << bound.status();
  if (!bound.ok()) return {};
  auto prepared = model.Prepare(*bound);
  EXPECT_TRUE(prepared.ok()) << prepared.status();
  if (!prepared.ok()) return {};
  PreparedInference* p = prepared->get();
  std::vector<InferOutputs> out = model.RunBatch({&p, 1}, 1);
  EXPECT_TRUE(out.size() == 1 && out[0].ok()) << (out.empty() ? absl::OkStatus() : out[0].status());
  if (out.size() != 1 || !out[0].ok()) return {};
  const Tensor& t = (*out[0])[0].tensor;
  return std::vector<Out>(t.data<Out>(), t.data<Out>() + t.num_elements());
}

template <typename T>
std::tuple<std::string, std::string, Shape, std::vector<T>> In(std::string name,
                                                               std::string datatype, Shape shape,
                                                               std::vector<T> values) {
  return {std::move(name), std::move(datatype), std::move(shape), std::move(values)};
}

// The grouped reference: y[m, s, :] = x[m, :] @ w[idx[m, s]] (+ bias).
std::vector<float> GroupedReference(const std::vector<float>& x, const std::vector<float>& w,
                                    const std::vector<int64_t>& idx, int64_t k, int64_t n,
                                    int64_t s, const std::vector<float>* bias = nullptr) {
  const int64_t m = static_cast<int64_t>(x.size()) / k;
  std::vector<float> y(m * s * n);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t j = 0; j < s; ++j) {
      const int64_t g = idx[t * s + j];
      for (int64_t c = 0; c < n; ++c) {
        double acc = bias ? (*bias)[g * n + c] : 0.0;
        for (int64_t kk = 0; kk < k; ++kk) acc += double(x[t * k + kk]) * w[(g * k + kk) * n + c];
        y[(t * s + j) * n + c] = static_cast<float>(acc);
      }
    }
  }
  return y;
}

TEST(OnnxModelLoaderTest, GroupedModelTakesNamesAndShapesFromTheGraph) {
  TempDir dir;
  Write(dir.path() / "1" / "model.onnx", GroupedModel(4, 3, 5, 2, Iota(4 * 3 * 5)));
  auto model = LoadModel(dir, "model.onnx");
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelMetadata& md = (*model)->metadata();
  EXPECT_EQ(md.name, "m");
  ASSERT_EQ(md.inputs.size(), 2u);
  EXPECT_EQ(md.inputs[0].name, "x");
  EXPECT_EQ(md.inputs[0].shape, (Shape{-1, 3}));
  EXPECT_EQ(md.inputs[1].name, "route");
  EXPECT_EQ(md.outputs[0].name, "y");
  EXPECT_EQ(md.outputs[0].shape, (Shape{-1, 2, 5}));
  EXPECT_THAT((*model)->parameters(),
              ::testing::Contains(std::make_pair(std::string("groups"), std::string("4"))));
}

// Weights and bias in one external file, each at its own non-zero offset
// (as ONNX writers align them): the values served are the ones at those
// offsets, and no other bytes of the file.
TEST(OnnxModelLoaderTest, ExternalDataAtNonZeroOffsetsServesThoseBytes) {
  TempDir dir;
  constexpr int64_t g = 2, k = 3, n = 4, s = 2;
  std::vector<float> w = Iota(g * k * n);
  for (float& v : w) v += 0.25f;
  const std::vector<float> bias = {1, -2, 3, -4, 5, -6, 7, -8};
  onnx::ModelProto m = GroupedModel(g, k, n, s, w);
  auto* graph = m.mutable_graph();
  graph->mutable_node(0)->add_input("bias");
  AddFloatInitializer(graph, "bias", {g, n}, bias);
  auto external = [](onnx::TensorProto* init, int64_t offset, int64_t length) {
    init->clear_raw_data();
    init->set_data_location(onnx::TensorProto::EXTERNAL);
    for (const auto& [key, value] : {std::pair<std::string, std::string>{"location", "weights.bin"},
                                     {"offset", std::to_string(offset)},
                                     {"length", std::to_string(length)}}) {
      auto* e = init->add_external_data();
      e->set_key(key);
      e->set_value(value);
    }
  };
  const int64_t w_offset = 64, bias_offset = 64 + 128;
  external(graph->mutable_initializer(0), w_offset, w.size() * 4);
  external(graph->mutable_initializer(1), bias_offset, bias.size() * 4);
  fs::create_directories(dir.path() / "1");
  {
    // Filled with NaN bytes around the two ranges: reading from the wrong
    // offset would show.
    std::string file(bias_offset + bias.size() * 4 + 64, '\xff');
    std::memcpy(file.data() + w_offset, w.data(), w.size() * 4);
    std::memcpy(file.data() + bias_offset, bias.data(), bias.size() * 4);
    std::ofstream bin(dir.path() / "1" / "weights.bin", std::ios::binary);
    bin.write(file.data(), static_cast<std::streamsize>(file.size()));
  }
  Write(dir.path() / "1" / "model.onnx", m);
  auto model = LoadModel(dir, "model.onnx");
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<float> x = {1, 2, 3, -1, 0.5f, 2};
  const std::vector<int64_t> idx = {1, 0, 0, 1};
  const std::vector<float> y = RunModel<float>(**model, In<float>("x", "FP32", {2, k}, x),
                                               In<int64_t>("route", "INT64", {2, s}, idx));
  EXPECT_EQ(y, GroupedReference(x, w, idx, k, n, s, &bias));
}

TEST(OnnxModelLoaderTest, ExternalDataMustStayInsideTheVersionDirectory) {
  TempDir dir, elsewhere;
  const std::vector<float> w = Iota(2 * 3 * 4);
  onnx::ModelProto m = GroupedModel(2, 3, 4, 1, w);
  auto* init = m.mutable_graph()->mutable_initializer(0);
  init->clear_raw_data();
  init->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const std::string& k, const std::string& v) {
    auto* e = init->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", "weights.bin");
  add("offset", "16");
  add("length", std::to_string(w.size() * 4));
  auto write_weights = [&](const fs::path& path) {
    std::ofstream bin(path, std::ios::binary);
    bin.write("0123456789abcdef", 16);
    bin.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size() * 4));
  };
  fs::create_directories(dir.path() / "1");
  write_weights(dir.path() / "1" / "weights.bin");
  EXPECT_TRUE(LoadFile(dir, m).ok());

  auto expect_outside = [&](const std::string& location, const char* what) {
    init->mutable_external_data(0)->set_value(location);
    absl::Status s = LoadFile(dir, m);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("leads outside")) << what;
    EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr(elsewhere.path().string())));
  };
  expect_outside("../weights.bin", "..");
  expect_outside((dir.path() / "1" / "weights.bin").string(), "absolute");
  // Links are followed, and where they lead is what counts.
  write_weights(elsewhere.path() / "secret.bin");
  fs::create_symlink(elsewhere.path() / "secret.bin", dir.path() / "1" / "link.bin");
  expect_outside("link.bin", "a symlink to a file elsewhere");
  fs::create_directory_symlink(elsewhere.path(), dir.path() / "1" / "sub");
  expect_outside("sub/secret.bin", "a symlink to a directory elsewhere");
  write_weights(dir.path() / "outside_version.bin");  // in the model directory, not the version
  fs::create_symlink(dir.path() / "outside_version.bin", dir.path() / "1" / "up.bin");
  expect_outside("up.bin", "a symlink out of the version directory");
  fs::create_symlink("weights.bin", dir.path() / "1" / "alias.bin");
  init->mutable_external_data(0)->set_value("alias.bin");
  EXPECT_TRUE(LoadFile(dir, m).ok()) << "a link that stays inside is followed";

  // Not a regular file: refused, and a FIFO without a writer never blocks.
  ASSERT_EQ(::mkfifo((dir.path() / "1" / "fifo.bin").c_str(), 0600), 0);
  init->mutable_external_data(0)->set_value("fifo.bin");
  absl::Status fifo = LoadFile(dir, m);
  EXPECT_EQ(fifo.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(fifo.message()), HasSubstr("not a regular file"));
  fs::create_directories(dir.path() / "1" / "adir");
  init->mutable_external_data(0)->set_value("adir");
  EXPECT_EQ(LoadFile(dir, m).code(), absl::StatusCode::kInvalidArgument);

  init->mutable_external_data(0)->set_value("missing.bin");
  EXPECT_EQ(LoadFile(dir, m).code(), absl::StatusCode::kNotFound);

  init->mutable_external_data(0)->set_value("weights.bin");
  init->mutable_external_data(1)->set_value("40");  // range past the end
  absl::Status past = LoadFile(dir, m);
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(past.message()), HasSubstr("beyond the end"));
}

TEST(OnnxModelLoaderTest, TheModelFileItselfMustBeARegularFileInside) {
  TempDir dir, elsewhere;
  Write(elsewhere.path() / "model.onnx", GroupedModel(2, 3, 4, 1, Iota(24)));
  fs::create_directories(dir.path() / "1");
  fs::create_symlink(elsewhere.path() / "model.onnx", dir.path() / "1" / "model.onnx");
  absl::Status linked = LoadModel(dir, "model.onnx").status();
  EXPECT_EQ(linked.code(), absl::StatusCode::kInvalidArgument) << linked;
  fs::create_directory_symlink(elsewhere.path(), dir.path() / "2");
  absl::Status version_link = LoadModel(dir, "model.onnx", "2").status();
  EXPECT_EQ(version_link.code(), absl::StatusCode::kInvalidArgument) << version_link;
  ASSERT_EQ(::mkfifo((dir.path() / "1" / "fifo.onnx").c_str(), 0600), 0);
  EXPECT_EQ(LoadModel(dir, "fifo.onnx").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(OnnxModelLoaderTest, EveryModelFileErrorIsNamed) {
  TempDir dir;
  const onnx::ModelProto good = GroupedModel(2, 3, 4, 1, Iota(24));
  struct Case {
    const char* what;
    std::function<void(onnx::ModelProto*)> mutate;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"two nodes",
       [](onnx::ModelProto* m) { *m->mutable_graph()->add_node() = m->graph().node(0); },
       "the graph has 2 nodes"},
      {"unknown op",
       [](onnx::ModelProto* m) { m->mutable_graph()->mutable_node(0)->set_op_type("Gemm"); },
       "unknown op 'Gemm'"},
      {"wrong initializer shape",
       [](onnx::ModelProto* m) { m->mutable_graph()->mutable_initializer(0)->set_dims(2, 5); },
       "initializer 'experts': shape [2,3,5] of FP32 needs 120 bytes, the file holds 96"},
      {"weights K differs from input K",
       [](onnx::ModelProto* m) {
         m->mutable_graph()
             ->mutable_input(0)
             ->mutable_type()
             ->mutable_tensor_type()
             ->mutable_shape()
             ->mutable_dim(1)
             ->set_dim_value(7);
       },
       "expected [M, K] with K=3"},
      {"weights not an initializer",
       [](onnx::ModelProto* m) { m->mutable_graph()->mutable_initializer(0)->set_name("other"); },
       "must be an initializer"},
      {"unserved type",
       [](onnx::ModelProto* m) {
         m->mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
             onnx::TensorProto::INT8);
       },
       "graph input 'x': ONNX element type 3 is not served"},
  };
  for (const Case& c : cases) {
    onnx::ModelProto m = good;
    c.mutate(&m);
    absl::Status s = LoadFile(dir, m);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.what;
    EXPECT_THAT(std::string(s.message()), HasSubstr("model 'm' (1/model.onnx)")) << c.what;
    EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr(dir.path().string())));
  }
  absl::Status missing = LoadModel(dir, "model.onnx", "2").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  {
    std::ofstream junk(dir.path() / "1" / "junk.onnx");
    junk << "not a protobuf at all \xff\xff\xff";
  }
  absl::Status junk = LoadModel(dir, "junk.onnx").status();
  EXPECT_EQ(junk.code(), absl::StatusCode::kInvalidArgument);
}

onnx::ModelProto MatMulModelWithTypedB(int elem, int64_t k, int64_t n) {
  onnx::ModelProto m;
  auto* graph = m.mutable_graph();
  auto* node = graph->add_node();
  node->set_op_type("MatMul");
  node->add_input("a");
  node->add_input("b");
  node->add_output("c");
  AddInput(graph, "a", elem, {-1, k});
  auto* b = graph->add_initializer();
  b->set_name("b");
  b->set_data_type(elem);
  b->add_dims(k);
  b->add_dims(n);
  return m;
}

TEST(OnnxModelLoaderTest, TypedInitializerFieldsServeTheirValues) {
  TempDir dir;
  {
    onnx::ModelProto m = MatMulModelWithTypedB(onnx::TensorProto::INT64, 2, 3);
    auto* b = m.mutable_graph()->mutable_initializer(0);
    const std::vector<int64_t> values = {1, -2, 3, int64_t{1} << 40, 5, -6};
    for (int64_t v : values) b->add_int64_data(v);
    Write(dir.path() / "1" / "model.onnx", m);
    auto model = LoadModel(dir, "model.onnx");
    ASSERT_TRUE(model.ok()) << model.status();
    // [1, 2] @ B and [0, 1] @ B: each row of B, exactly.
    EXPECT_EQ(RunModel<int64_t>(**model, In<int64_t>("a", "INT64", {2, 2}, {1, 0, 0, 1})), values);
    b->add_int64_data(7);  // one element too many
    absl::Status s = LoadFile(dir, m);
    EXPECT_THAT(std::string(s.message()), HasSubstr("needs 6 elements, the file holds 7"));
  }
  {
    onnx::ModelProto m = MatMulModelWithTypedB(onnx::TensorProto::FLOAT, 3, 2);
    auto* b = m.mutable_graph()->mutable_initializer(0);
    const std::vector<float> values = {0.5f, -1.25f, 3, 1e-3f, -7, 2};
    for (float v : values) b->add_float_data(v);
    Write(dir.path() / "1" / "model.onnx", m);
    auto model = LoadModel(dir, "model.onnx");
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ(RunModel<float>(**model, In<float>("a", "FP32", {3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1})),
              values);
  }
}

// Dimensions are checked before the initializer is allocated: a tiny file
// declaring an enormous tensor allocates nothing.
TEST(OnnxModelLoaderTest, AnInitializerLargerThanItsDataIsRefusedBeforeAllocation) {
  TempDir dir;
  onnx::ModelProto m = MatMulModelWithTypedB(onnx::TensorProto::FLOAT, 2, 3);
  auto* b = m.mutable_graph()->mutable_initializer(0);
  b->set_dims(0, int64_t{1} << 40);
  b->set_raw_data(std::string(24, '\0'));
  absl::Status huge = LoadFile(dir, m);
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument) << huge;
  EXPECT_THAT(std::string(huge.message()), HasSubstr("the file holds 24"));
  b->set_dims(0, int64_t{1} << 62);
  EXPECT_THAT(std::string(LoadFile(dir, m).message()), HasSubstr("overflows"));
  b->set_dims(0, -2);
  EXPECT_EQ(LoadFile(dir, m).code(), absl::StatusCode::kInvalidArgument);
}

TEST(OnnxModelLoaderTest, NamesFromTheFileAreCheckedAndEscaped) {
  TempDir dir;
  onnx::ModelProto m = GroupedModel(2, 3, 4, 1, Iota(24));
  m.mutable_graph()->mutable_node(0)->set_op_type("Bad\x1b[31mOp");
  absl::Status op = LoadFile(dir, m);
  EXPECT_THAT(std::string(op.message()), HasSubstr("unknown op 'Bad\\x1b[31mOp'"));
  m = GroupedModel(2, 3, 4, 1, Iota(24));
  m.mutable_graph()->mutable_input(0)->set_name("x\n");
  m.mutable_graph()->mutable_node(0)->set_input(0, "x\n");
  absl::Status input = LoadFile(dir, m);
  EXPECT_EQ(input.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(input.message()), HasSubstr("tensor name 'x\\n' is not valid"));
}

TEST(ModelConfigFileTest, ParsesDynamicBatchingAndReportsErrorsWithTheLine) {
  auto config = ParseModelConfigFile(
      "dynamic_batching {\n max_queue_delay_microseconds: 200\n preferred_batch_size: [4, 8]\n"
      " default_queue_policy { max_queue_size: 8 default_timeout_microseconds: 5000 }\n}\n"
      "parameters { key: \"max_batch_rows\" value { string_value: \"64\" } }\n"
      "instance_group [ { count: 2 kind: KIND_CPU } ]\n");
  ASSERT_TRUE(config.ok()) << config.status();
  auto batching = BatchingFromConfig(*config);
  ASSERT_TRUE(batching.ok());
  ASSERT_TRUE(batching->has_value());
  EXPECT_EQ((*batching)->max_queue_delay, absl::Microseconds(200));
  EXPECT_EQ((*batching)->max_batch_rows, 64);
  EXPECT_EQ((*batching)->max_queue_size, 8);
  EXPECT_EQ((*batching)->default_timeout, absl::Microseconds(5000));
  EXPECT_EQ((*batching)->max_concurrent_batches, 2);
  EXPECT_THAT((*batching)->preferred_batch_rows, ::testing::ElementsAre(4, 8));

  auto none = BatchingFromConfig(*ParseModelConfigFile(""));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  auto bad = ParseModelConfigFile("dynamic_batching {\n  max_batch_size: 4\n}\n");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("line 2"));
  // gemmserve's spelling before Triton's is named with Triton's.
  auto old = ParseModelConfigFile("dynamic_batching {\n  max_batch_rows: 4\n}\n");
  EXPECT_THAT(std::string(old.status().message()),
              HasSubstr("Triton's config spells it parameters { key: \"max_batch_rows\""));
  // With a batch dimension the batcher counts batch items, at most
  // max_batch_size of them.
  auto batched = BatchingFromConfig(
      *ParseModelConfigFile("max_batch_size: 8 dynamic_batching { preferred_batch_size: [4, 8] }"));
  ASSERT_TRUE(batched.ok() && batched->has_value()) << batched.status();
  EXPECT_EQ((*batched)->max_batch_rows, 8);
}

// The limits of docs/models.md's table, each at its edge and one past it.
TEST(ModelConfigFileTest, EveryNumericFieldIsRangeChecked) {
  struct Field {
    const char* name;
    const char* text;  // the config with the value as $0
    uint64_t limit;
  };
  const Field fields[] = {
      {"max_queue_delay_microseconds", "dynamic_batching { max_queue_delay_microseconds: $0 }",
       10'000'000},
      {"max_batch_rows",
       "dynamic_batching {} parameters { key: 'max_batch_rows' value { string_value: '$0' } }",
       uint64_t{1} << 24},
      {"max_queue_size", "dynamic_batching { default_queue_policy { max_queue_size: $0 } }",
       1'000'000},
      {"default_timeout_microseconds",
       "dynamic_batching { default_queue_policy { default_timeout_microseconds: $0 } }",
       3'600'000'000},
      {"priority_levels", "dynamic_batching { priority_levels: $0 }", 256}};
  for (const Field& f : fields) {
    for (uint64_t value : {f.limit, f.limit + 1}) {
      const std::string text = absl::Substitute(f.text, value);
      auto config = ParseModelConfigFile(text);
      ASSERT_TRUE(config.ok()) << text << ": " << config.status();
      absl::StatusOr<std::optional<BatchingOptions>> batching = BatchingFromConfig(*config);
      if (value == f.limit) {
        EXPECT_TRUE(batching.ok()) << text << ": " << batching.status();
      } else {
        EXPECT_EQ(batching.status().code(), absl::StatusCode::kInvalidArgument) << text;
        EXPECT_THAT(std::string(batching.status().message()),
                    HasSubstr(absl::StrCat(f.name, " ", value, " is over the limit of ", f.limit)));
      }
    }
  }
  // uint32 fields past 2^32 - 1 do not parse; within it, the limit holds.
  for (const char* text :
       {"dynamic_batching { priority_levels: 2147483647 }",
        "dynamic_batching { priority_levels: 2147483648 }",
        "dynamic_batching { priority_levels: 4294967295 }",
        "dynamic_batching { priority_levels: 1000000000 }",
        "dynamic_batching { priority_levels: 4294967296 }",
        "dynamic_batching { default_queue_policy { max_queue_size: -1 } }",
        "instance_group { count: 65 }", "instance_group [{ count: 40 }, { count: 30 }]",
        "max_batch_size: 4 dynamic_batching { preferred_batch_size: 5 }",
        "dynamic_batching { preferred_batch_size: 0 }", "max_batch_size: -1",
        "dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
        "dynamic_batching { default_priority_level: 1 }"}) {
    auto config = ParseModelConfigFile(text);
    const absl::Status status =
        config.ok() ? BatchingFromConfig(*config).status() : config.status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
  }
  EXPECT_EQ(ParseModelConfigFile(std::string((1 << 20) + 1, ' ')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ModelRepositoryTest, LoadsTheLatestVersionAndListsFailuresWithoutStopping) {
  TempDir dir;
  Write(dir.path() / "moe" / "1" / "model.onnx", GroupedModel(2, 3, 4, 1, Iota(24)));
  Write(dir.path() / "moe" / "3" / "model.onnx", GroupedModel(2, 3, 4, 1, Iota(24)));
  onnx::ModelProto broken = GroupedModel(2, 3, 4, 1, Iota(24));
  broken.mutable_graph()->mutable_node(0)->set_op_type("Relu");
  Write(dir.path() / "broken" / "1" / "model.onnx", broken);
  InferenceEngine engine(EngineOptions{});
  ModelRepository repo(dir.path().string(), &engine, {});
  repo.LoadAll();
  auto moe = engine.FindModel("moe", "");
  ASSERT_TRUE(moe.ok());
  EXPECT_EQ((*moe)->metadata().versions.front(), "3");
  EXPECT_FALSE(engine.FindModel("broken", "").ok());
  std::vector<ModelStatus> index = repo.Index();
  ASSERT_EQ(index.size(), 2u);
  EXPECT_EQ(index[0].name, "broken");
  EXPECT_EQ(index[0].state, ModelState::kFailed);
  EXPECT_THAT(index[0].reason, HasSubstr("unknown op 'Relu'"));
  EXPECT_EQ(index[1].state, ModelState::kReady);

  EXPECT_EQ(repo.Load("absent", {}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(repo.Load("../etc", {}).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(repo.Unload("moe").ok());
  // A directory model stays known: UNAVAILABLE, listed as not loaded.
  EXPECT_EQ(engine.FindModel("moe", "").status().code(), absl::StatusCode::kUnavailable);
  index = repo.Index();
  ASSERT_EQ(index.size(), 2u);
  EXPECT_EQ(index[1].name, "moe");
  EXPECT_EQ(index[1].state, ModelState::kUnloaded);
  ASSERT_TRUE(repo.Load("moe", {}).ok());
  EXPECT_TRUE(engine.FindModel("moe", "").ok());
}

TEST(ModelRepositoryTest, AModelDirectoryLinkedFromOutsideIsRefused) {
  TempDir dir, elsewhere;
  Write(elsewhere.path() / "1" / "model.onnx", GroupedModel(2, 3, 4, 1, Iota(24)));
  fs::create_directory_symlink(elsewhere.path(), dir.path() / "linked");
  InferenceEngine engine(EngineOptions{});
  ModelRepository repo(dir.path().string(), &engine, {});
  absl::Status s = repo.Load("linked", {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("leads outside the model repository"));
}

TEST(ModelRepositoryTest, NamesFollowOneRuleEverywhere) {
  TempDir dir;
  InferenceEngine engine(EngineOptions{});
  ModelRepository repo(dir.path().string(), &engine, {});
  std::string bytes;
  ASSERT_TRUE(GroupedModel(2, 3, 4, 1, Iota(24)).SerializeToString(&bytes));
  ModelLoadRequest upload;
  upload.config = "";
  upload.files["1/model.onnx"] = bytes;
  for (const std::string& bad :
       {std::string("with\0nul", 8), std::string("ctrl\x01"), std::string("a/b"), std::string(".."),
        std::string(".hidden"), std::string(129, 'x'), std::string("_unknown"), std::string("")}) {
    for (absl::Status s :
         {repo.Load(bad, upload), repo.Unload(bad), engine.FindModel(bad, "").status()}) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << ClientText(bad) << ": " << s;
      EXPECT_EQ(std::string(s.message()).find_first_of(std::string("\0\x01", 2)),
                std::string::npos);
    }
  }
  EXPECT_TRUE(repo.Load(std::string(128, 'x'), upload).ok());
  EXPECT_TRUE(repo.Load("Model-1.v2_b", upload).ok());
}

TEST(ModelRepositoryTest, UnloadingAnUploadedOrFailedModelLeavesNothingBehind) {
  TempDir dir;
  InferenceEngine engine(EngineOptions{});
  ModelRepository repo(dir.path().string(), &engine, {});
  std::string bytes;
  ASSERT_TRUE(GroupedModel(2, 3, 4, 1, Iota(24)).SerializeToString(&bytes));
  ModelLoadRequest good, bad;
  good.config = bad.config = "";
  good.files["1/model.onnx"] = bytes;
  bad.files["1/model.onnx"] = "junk";
  for (int i = 0; i < 100; ++i) {
    const std::string name = "up" + std::to_string(i);
    ASSERT_TRUE(repo.Load(name, good).ok());
    ASSERT_EQ(repo.Index().size(), 1u);
    ASSERT_TRUE(repo.Unload(name).ok());
    EXPECT_EQ(engine.FindModel(name, "").status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(repo.Load(name, bad).code(), absl::StatusCode::kInvalidArgument);
    ASSERT_EQ(repo.Index().size(), 1u);  // the failed load is listed
    EXPECT_EQ(engine.FindModel(name, "").status().code(), absl::StatusCode::kUnavailable);
    ASSERT_TRUE(repo.Unload(name).ok());
    ASSERT_EQ(repo.Index().size(), 0u);
  }
  EXPECT_EQ(repo.Unload("never").code(), absl::StatusCode::kNotFound);
  // A failed load's entry is replaced by the next good load.
  ASSERT_EQ(repo.Load("x", bad).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(repo.Load("x", good).ok());
  ASSERT_EQ(repo.Index().size(), 1u);
  EXPECT_EQ(repo.Index()[0].state, ModelState::kReady);
}

TEST(ModelRepositoryTest, UploadedFilesNeedAConfigAndSafePaths) {
  TempDir dir;
  InferenceEngine engine(EngineOptions{});
  ModelRepository repo(dir.path().string(), &engine, {"matmul"});
  std::string bytes;
  ASSERT_TRUE(GroupedModel(2, 3, 4, 1, Iota(24)).SerializeToString(&bytes));
  ModelLoadRequest upload;
  upload.files["1/model.onnx"] = bytes;
  EXPECT_EQ(repo.Load("up", upload).code(), absl::StatusCode::kInvalidArgument);
  upload.config = "dynamic_batching { max_queue_delay_microseconds: 50 }";
  ASSERT_TRUE(repo.Load("up", upload).ok());
  auto up = engine.FindModel("up", "1");
  ASSERT_TRUE(up.ok());
  ASSERT_TRUE((*up)->batching().has_value());
  EXPECT_EQ((*up)->batching()->max_queue_delay, absl::Microseconds(50));
  upload.files["../../evil"] = "x";
  EXPECT_EQ(repo.Load("up2", upload).code(), absl::StatusCode::kInvalidArgument);
  upload.files.erase("../../evil");
  upload.files["1/./model.onnx"] = "x";
  EXPECT_EQ(repo.Load("up2", upload).code(), absl::StatusCode::kInvalidArgument);
  upload.files.erase("1/./model.onnx");
  // An uploaded model's external data is read from the upload.
  onnx::ModelProto external = GroupedModel(2, 3, 4, 1, Iota(24));
  auto* init = external.mutable_graph()->mutable_initializer(0);
  const std::string raw = init->raw_data();
  init->clear_raw_data();
  init->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* loc = init->add_external_data();
  loc->set_key("location");
  loc->set_value("w.bin");
  ASSERT_TRUE(external.SerializeToString(&bytes));
  upload.files["1/model.onnx"] = bytes;
  EXPECT_EQ(repo.Load("up3", upload).code(), absl::StatusCode::kNotFound);
  upload.files["1/w.bin"] = raw;
  EXPECT_TRUE(repo.Load("up3", upload).ok());
  loc->set_value("../1/w.bin");
  ASSERT_TRUE(external.SerializeToString(&bytes));
  upload.files["1/model.onnx"] = bytes;
  EXPECT_EQ(repo.Load("up4", upload).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(repo.Unload("matmul").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(repo.Load("matmul", {}).code(), absl::StatusCode::kInvalidArgument);
}

// A grouped model (2 groups, K 3, N 4, one index per token) uploaded with
// `config`; `extra` adds files beside it.
ModelLoadRequest GroupedUpload(const std::string& config,
                               std::map<std::string, std::string> extra = {}) {
  ModelLoadRequest upload;
  upload.config = config;
  upload.files = std::move(extra);
  EXPECT_TRUE(GroupedModel(2, 3, 4, 1, Iota(24)).SerializeToString(&upload.files["1/model.onnx"]));
  return upload;
}

constexpr char kTwoSamples[] = R"pb(
  model_warmup {
    name: "random_tokens"
    count: 3
    inputs {
      key: "x"
      value {
        data_type: TYPE_FP32
        dims: [ 5, 3 ]
        random_data: true
      }
    }
    inputs {
      key: "route"
      value {
        data_type: TYPE_INT64
        dims: [ 5, 1 ]
        zero_data: true
      }
    }
  }
  model_warmup {
    name: "from_files"
    inputs {
      key: "x"
      value {
        data_type: TYPE_FP32
        dims: [ 2, 3 ]
        input_data_file: "x.bin"
      }
    }
    inputs {
      key: "route"
      value {
        data_type: TYPE_INT64
        dims: [ 2, 1 ]
        input_data_file: "r.bin"
      }
    }
  }
)pb";

std::map<std::string, std::string> WarmupFiles(int64_t route) {
  const std::vector<float> x = Iota(6);
  const int64_t r[2] = {route, 0};
  return {{"warmup/x.bin", std::string(reinterpret_cast<const char*>(x.data()), 24)},
          {"warmup/r.bin", std::string(reinterpret_cast<const char*>(r), 16)}};
}

TEST(ModelWarmupTest, SamplesRunBeforeReadyAndTheStatisticsCountThem) {
  TempDir dir;
  for (const std::string batching :
       {"", "dynamic_batching { max_queue_delay_microseconds: 100 }"}) {
    SCOPED_TRACE(batching);
    InferenceEngine engine(EngineOptions{});
    ModelRepository repo(dir.path().string(), &engine, {});
    ASSERT_TRUE(repo.Load("warm", GroupedUpload(batching + kTwoSamples, WarmupFiles(1))).ok());
    auto warm = engine.FindModel("warm", "");
    ASSERT_TRUE(warm.ok());
    const ModelStatistics stats = (*warm)->statistics();
    EXPECT_EQ(stats.execution_count, 4u);  // 3 runs of one sample, 1 of the other
    EXPECT_EQ(stats.success.count, 4u);
    EXPECT_EQ(stats.fail.count, 0u);
    EXPECT_EQ(stats.inference_count, 3u * 5 + 2);  // rows
    const std::vector<WarmupSample>& samples = (*warm)->warmup();
    ASSERT_EQ(samples.size(), 2u);
    EXPECT_EQ(samples[0].name, "random_tokens");
    EXPECT_EQ(samples[0].count, 3u);
    EXPECT_EQ(samples[1].count, 1u);  // 0 means 1
    ASSERT_EQ(samples[1].inputs.size(), 2u);
    EXPECT_EQ(samples[1].inputs[0].name, "route");  // by name
    EXPECT_EQ(samples[1].inputs[0].data, WarmupInput::Data::kFile);
    EXPECT_EQ(samples[1].inputs[0].file, "r.bin");
    EXPECT_EQ(samples[0].inputs[1].shape, (Shape{5, 3}));
    for (const WarmupSample& sample : samples) {
      for (const WarmupInput& input : sample.inputs) EXPECT_TRUE(input.bytes.empty());
    }
  }
}

TEST(ModelWarmupTest, ASampleTheModelRefusesFailsTheLoadAndTheServedVersionServesOn) {
  TempDir dir;
  InferenceEngine engine(EngineOptions{});
  ModelRepository repo(dir.path().string(), &engine, {});
  ASSERT_TRUE(repo.Load("m", GroupedUpload("")).ok());
  // A group index past the model's two groups, from the sample's file.
  absl::Status s = repo.Load("m", GroupedUpload(kTwoSamples, WarmupFiles(7)));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("model_warmup 'from_files'"));
  // A tensor the model does not take.
  s = repo.Load("m", GroupedUpload(R"pb(model_warmup {
                                          name: "typo"
                                          inputs {
                                            key: "X"
                                            value {
                                              data_type: TYPE_FP32
                                              dims: [ 1, 3 ]
                                              zero_data: true
                                            }
                                          }
                                        })pb"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("model_warmup 'typo'"));
  // The first version serves on, and no warmup of the failed loads counts.
  auto m = engine.FindModel("m", "");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->statistics().execution_count, 0u);
  EXPECT_TRUE((*m)->warmup().empty());
  // A model not yet served is not served when its warmup fails.
  EXPECT_FALSE(repo.Load("n", GroupedUpload(kTwoSamples, WarmupFiles(2))).ok());
  EXPECT_EQ(engine.FindModel("n", "").status().code(), absl::StatusCode::kUnavailable);
}

TEST(ModelWarmupTest, StopLoadsEndsAWarmupAndTheQueuedLoadsWithUnavailable) {
  TempDir dir;
  InferenceEngine engine(EngineOptions{});
  ModelRepository repo(dir.path().string(), &engine, {});
  ASSERT_TRUE(repo.Load("m", GroupedUpload("")).ok());
  // Seconds of warmup: 1000 runs of 2^18 rows.
  const std::string long_warmup = R"pb(model_warmup {
                                         name: "long"
                                         count: 1000
                                         inputs {
                                           key: "x"
                                           value {
                                             data_type: TYPE_FP32
                                             dims: [ 262144, 3 ]
                                             random_data: true
                                           }
                                         }
                                         inputs {
                                           key: "route"
                                           value {
                                             data_type: TYPE_INT64
                                             dims: [ 262144, 1 ]
                                             zero_data: true
                                           }
                                         }
                                       })pb";
  absl::Mutex mu;
  std::vector<absl::Status> answers;
  auto record = [&](absl::Status s) {
    absl::MutexLock lock(&mu);
    answers.push_back(s);
  };
  const absl::Time start = absl::Now();
  // A new model, so that the engine lists it as loading; a reload and an
  // unload of the served one queued behind it.
  repo.LoadAsync("n", GroupedUpload(long_warmup), record);
  repo.LoadAsync("m", GroupedUpload(""), record);
  repo.UnloadAsync("m", record);
  // The first load runs once the engine lists the name as loading.
  auto loading = [&] {
    std::vector<ModelStatus> states = engine.States();
    return std::any_of(states.begin(), states.end(),
                       [](const ModelStatus& s) { return s.state == ModelState::kLoading; });
  };
  for (absl::Time end = absl::Now() + absl::Seconds(30); !loading() && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::SleepFor(absl::Milliseconds(50));  // into the warmup
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(answers.empty()) << answers.front();
  }
  ASSERT_TRUE(loading());
  repo.StopLoads();
  {
    // Those queued are answered by StopLoads itself, not once the warmup
    // in progress has stopped (under a sanitizer one run can take longer
    // than a shutdown's grace period).
    absl::MutexLock lock(&mu);
    EXPECT_GE(answers.size(), 2u);
  }
  repo.LoadAsync("m", GroupedUpload(""), record);  // asked for after the stop
  {
    absl::MutexLock lock(&mu);
    auto all = [&] { return answers.size() == 4; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(60)));
    for (const absl::Status& s : answers) {
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
      EXPECT_THAT(std::string(s.message()), HasSubstr("shutting down"));
    }
  }
  // The warmup was cut short, not run to its end; the new model is not
  // served and the served one serves on, as it was.
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(engine.FindModel("n", "").status().code(), absl::StatusCode::kUnavailable);
  auto m = engine.FindModel("m", "");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->warmup().empty());
  EXPECT_EQ((*m)->statistics().execution_count, 0u);
}

TEST(ModelWarmupTest, EveryFieldIsCheckedBeforeAnythingIsAllocated) {
  TempDir dir;
  EngineOptions options;
  options.max_message_bytes = 4096;
  InferenceEngine engine(options);
  ModelRepository repo(dir.path().string(), &engine, {});
  auto sample = [](const std::string& fields, const std::string& input) {
    return absl::StrCat("model_warmup { ", fields, " inputs { key: \"x\" value { ", input,
                        " } } }");
  };
  const std::string ok_input = "data_type: TYPE_FP32 dims: [1, 3] zero_data: true";
  std::string many_samples, many_inputs = "model_warmup { name: \"w\" ";
  for (int i = 0; i <= kMaxWarmupSamples; ++i) many_samples += sample("name: \"w\"", ok_input);
  for (int i = 0; i <= kMaxWarmupInputs; ++i) {
    absl::StrAppend(&many_inputs, "inputs { key: \"x", i, "\" value { ", ok_input, " } } ");
  }
  many_inputs += "}";
  std::string dims33 = "data_type: TYPE_FP32 zero_data: true";
  for (int i = 0; i < 33; ++i) dims33 += " dims: 1";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {sample("", ok_input), "name is required"},
      {sample(absl::StrCat("name: \"", std::string(129, 'n'), "\""), ok_input), "longer than 128"},
      {sample("name: \"w\" batch_size: 2", ok_input), "batch_size 2"},
      {sample("name: \"w\" count: 1001", ok_input), "count 1001 is over the limit of 1000"},
      {sample("name: \"a\" count: 600", ok_input) + sample("name: \"b\" count: 401", ok_input),
       "model_warmup 'b': the samples run more than 1000 times together"},
      {many_samples, "over the limit of 64"},
      {many_inputs, "17 inputs, over the limit of 16"},
      {sample("name: \"w\"", "dims: [1, 3] zero_data: true"), "data_type is not set"},
      {sample("name: \"w\"", "data_type: TYPE_STRING dims: [1] zero_data: true"),
       "TYPE_STRING is not served"},
      {sample("name: \"w\"", "data_type: TYPE_UINT8 dims: [1] zero_data: true"),
       "TYPE_UINT8 is not served"},
      {sample("name: \"w\"", "data_type: 99 dims: [1] zero_data: true"), "data_type 99"},
      {sample("name: \"w\"", dims33), "rank 33 is over the limit of 32"},
      {sample("name: \"w\"", "data_type: TYPE_FP32 dims: [1, -3] zero_data: true"), "dims [1,-3]"},
      {sample("name: \"w\"", "data_type: TYPE_FP64 dims: [4294967296, 4294967296] zero_data: true"),
       "dims [4294967296,4294967296]"},
      {sample("name: \"w\"", "data_type: TYPE_FP32 dims: [32, 33] zero_data: true"),
       "more than 4096 bytes together (--max_message_bytes)"},
      {sample("name: \"w\"", "data_type: TYPE_FP32 dims: [1, 3]"), "one of zero_data"},
      {sample("name: \"w\"", "data_type: TYPE_FP32 dims: [1, 3] input_data_file: \"../x.bin\""),
       "relative path"},
      {sample("name: \"w\"", "data_type: TYPE_FP32 dims: [1, 3] input_data_file: \"/etc/passwd\""),
       "relative path"},
      {sample("name: \"w\"", "data_type: TYPE_FP32 dims: [1, 3] input_data_file: \"x.bin\""),
       "holds 24 bytes; dims [1,3] of FP32 need 12"},
  };
  for (const auto& [config, message] : cases) {
    SCOPED_TRACE(config.substr(0, 200));
    const absl::Status s = repo.Load("m", GroupedUpload(config, WarmupFiles(0)));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message));
    EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos);
  }
  // Total bytes: two samples of 2 KiB each are within 4096, a third is not.
  const std::string two_k = "data_type: TYPE_FP32 dims: [512] zero_data: true";
  EXPECT_THAT(std::string(repo.Load("m", GroupedUpload(sample("name: \"a\"", two_k) +
                                                       sample("name: \"b\"", two_k) +
                                                       sample("name: \"c\"", two_k)))
                              .message()),
              HasSubstr("more than 4096 bytes together"));
  const absl::Status missing = repo.Load(
      "m", GroupedUpload(sample(
               "name: \"w\"", "data_type: TYPE_FP32 dims: [1, 3] input_data_file: \"none.bin\"")));
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_THAT(std::string(missing.message()), HasSubstr("model_warmup 'w': input 'x'"));
  // A sample within every limit loads.
  const absl::Status loaded = repo.Load("m", GroupedUpload(R"pb(model_warmup {
                                                                  name: "w"
                                                                  count: 1000
                                                                  inputs {
                                                                    key: "x"
                                                                    value {
                                                                      data_type: TYPE_FP32
                                                                      dims: [ 1, 3 ]
                                                                      zero_data: true
                                                                    }
                                                                  }
                                                                  inputs {
                                                                    key: "route"
                                                                    value {
                                                                      data_type: TYPE_INT64
                                                                      dims: [ 1, 1 ]
                                                                      random_data: true
                                                                    }
                                                                  }
                                                                })pb"));
  ASSERT_TRUE(loaded.ok()) << loaded;
  EXPECT_EQ((*engine.FindModel("m", ""))->statistics().execution_count, 1000u);
}

}  // namespace
}  // namespace gemmserve
