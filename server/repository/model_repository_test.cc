// The ONNX loader and the repository, on model files written by the test.
#include "server/repository/model_repository.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/repository/onnx_model_loader.h"

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

absl::Status LoadFile(const TempDir& dir, const onnx::ModelProto& m) {
  Write(dir.path() / "1" / "model.onnx", m);
  return LoadOnnxModel("m", "1", (dir.path() / "1").string(), "model.onnx").status();
}

TEST(OnnxModelLoaderTest, GroupedModelTakesNamesAndShapesFromTheGraph) {
  TempDir dir;
  Write(dir.path() / "1" / "model.onnx", GroupedModel(4, 3, 5, 2, Iota(4 * 3 * 5)));
  auto model = LoadOnnxModel("moe", "1", (dir.path() / "1").string(), "model.onnx");
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelMetadata& md = (*model)->metadata();
  EXPECT_EQ(md.name, "moe");
  ASSERT_EQ(md.inputs.size(), 2u);
  EXPECT_EQ(md.inputs[0].name, "x");
  EXPECT_EQ(md.inputs[0].shape, (Shape{-1, 3}));
  EXPECT_EQ(md.inputs[1].name, "route");
  EXPECT_EQ(md.outputs[0].name, "y");
  EXPECT_EQ(md.outputs[0].shape, (Shape{-1, 2, 5}));
  EXPECT_THAT((*model)->parameters(), ::testing::Contains(std::make_pair(std::string("groups"),
                                                                          std::string("4"))));
}

TEST(OnnxModelLoaderTest, ExternalDataLoadsAndMustStayInsideTheDirectory) {
  TempDir dir;
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
  fs::create_directories(dir.path() / "1");
  {
    std::ofstream bin(dir.path() / "1" / "weights.bin", std::ios::binary);
    bin.write("0123456789abcdef", 16);
    bin.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size() * 4));
  }
  EXPECT_TRUE(LoadFile(dir, m).ok());

  init->mutable_external_data(0)->set_value("../weights.bin");
  absl::Status escape = LoadFile(dir, m);
  EXPECT_EQ(escape.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(escape.message()), HasSubstr("inside the version directory"));

  init->mutable_external_data(0)->set_value("missing.bin");
  EXPECT_EQ(LoadFile(dir, m).code(), absl::StatusCode::kNotFound);

  init->mutable_external_data(0)->set_value("weights.bin");
  init->mutable_external_data(1)->set_value("40");  // range past the end
  absl::Status past = LoadFile(dir, m);
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(past.message()), HasSubstr("beyond the end"));
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
      {"two nodes", [](onnx::ModelProto* m) { *m->mutable_graph()->add_node() = m->graph().node(0); },
       "the graph has 2 nodes"},
      {"unknown op", [](onnx::ModelProto* m) { m->mutable_graph()->mutable_node(0)->set_op_type("Gemm"); },
       "unknown op 'Gemm'"},
      {"wrong initializer shape",
       [](onnx::ModelProto* m) { m->mutable_graph()->mutable_initializer(0)->set_dims(2, 5); },
       "initializer 'experts': shape [2,3,5] of FP32 needs 120 bytes, the file holds 96"},
      {"weights K differs from input K",
       [](onnx::ModelProto* m) {
         m->mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()
             ->mutable_shape()->mutable_dim(1)->set_dim_value(7);
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
  absl::Status missing = LoadOnnxModel("m", "1", (dir.path() / "2").string(), "model.onnx").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  {
    std::ofstream junk(dir.path() / "1" / "junk.onnx");
    junk << "not a protobuf at all \xff\xff\xff";
  }
  absl::Status junk = LoadOnnxModel("m", "1", (dir.path() / "1").string(), "junk.onnx").status();
  EXPECT_EQ(junk.code(), absl::StatusCode::kInvalidArgument);
}

TEST(OnnxModelLoaderTest, TypedInitializerFieldsLoadLikeRawData) {
  TempDir dir;
  onnx::ModelProto m;
  auto* graph = m.mutable_graph();
  auto* node = graph->add_node();
  node->set_op_type("MatMul");
  node->add_input("a");
  node->add_input("b");
  node->add_output("c");
  AddInput(graph, "a", onnx::TensorProto::INT64, {-1, 2});
  auto* b = graph->add_initializer();
  b->set_name("b");
  b->set_data_type(onnx::TensorProto::INT64);
  b->add_dims(2);
  b->add_dims(3);
  for (int i = 0; i < 6; ++i) b->add_int64_data(i);
  ASSERT_TRUE(LoadFile(dir, m).ok());
  b->add_int64_data(7);  // one element too many
  absl::Status s = LoadFile(dir, m);
  EXPECT_THAT(std::string(s.message()), HasSubstr("needs 6 elements, the file holds 7"));
}

TEST(ModelConfigFileTest, ParsesDynamicBatchingAndReportsErrorsWithTheLine) {
  auto config = ParseModelConfigFile(
      "dynamic_batching {\n max_queue_delay_microseconds: 200\n max_batch_rows: 64\n"
      " max_queue_size: 8\n default_timeout_microseconds: 5000\n}\n");
  ASSERT_TRUE(config.ok()) << config.status();
  auto batching = BatchingFromConfig(*config);
  ASSERT_TRUE(batching.ok());
  ASSERT_TRUE(batching->has_value());
  EXPECT_EQ((*batching)->max_queue_delay, absl::Microseconds(200));
  EXPECT_EQ((*batching)->max_batch_rows, 64);
  EXPECT_EQ((*batching)->max_queue_size, 8);
  EXPECT_EQ((*batching)->default_timeout, absl::Microseconds(5000));

  auto none = BatchingFromConfig(*ParseModelConfigFile(""));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  auto bad = ParseModelConfigFile("dynamic_batching {\n  max_batch_size: 4\n}\n");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("line 2"));
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
  std::vector<ModelIndexEntry> index = repo.Index();
  ASSERT_EQ(index.size(), 2u);
  EXPECT_EQ(index[0].name, "broken");
  EXPECT_EQ(index[0].state, "UNAVAILABLE");
  EXPECT_THAT(index[0].reason, HasSubstr("unknown op 'Relu'"));
  EXPECT_EQ(index[1].state, "READY");

  EXPECT_EQ(repo.Load("absent", {}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(repo.Load("../etc", {}).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(repo.Unload("moe").ok());
  EXPECT_FALSE(engine.FindModel("moe", "").ok());
  ASSERT_TRUE(repo.Load("moe", {}).ok());
  EXPECT_TRUE(engine.FindModel("moe", "").ok());
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
  EXPECT_EQ(repo.Unload("matmul").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(repo.Load("matmul", {}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gemmserve
