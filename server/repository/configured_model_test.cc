// A model served as its config says (configured_model.h): the config's
// tensors held against the model's, Triton's batch dimension.
#include "server/repository/configured_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "server/repository/triton_config.h"

namespace gemmserve {
namespace {

using ::testing::HasSubstr;

constexpr char kConfiguredJson[] = R"({
  "name": "moe",
  "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1, 64]}],
  "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": ["-1", 3, 32]}]
})";

ModelMetadata TwoTensorModel() {
  ModelMetadata m;
  m.name = "moe";
  m.inputs = {{"X", {DataType::kFP32, DataType::kBF16}, {-1, 64}, false, false}};
  m.outputs = {{"Y", {DataType::kFP32}, {-1, 3, 32}, false, false}};
  return m;
}

TEST(TritonConfigTest, DeclaredTensorsAreCheckedAgainstTheModel) {
  auto config = ParseLoadConfig(kConfiguredJson);
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(CheckDeclaredTensors(*config, TwoTensorModel()).ok());
  const struct {
    const char* json;
    const char* message;
  } cases[] = {
      {R"({"input": [{"name": "Z"}]})", "input 'Z' is not one of the model's (X)"},
      {R"({"input": [{"name": "X", "data_type": "TYPE_INT8"}]})", "TYPE_FP32, TYPE_BF16"},
      {R"({"input": [{"name": "X", "dims": [4, 65]}]})", "declares dims [4, 65]"},
      {R"({"input": [{"name": "X", "dims": [64]}]})", "declares dims [64]"},
      {R"({"output": [{"name": "Y", "dims": [1, 4, 32]}]})", "output 'Y'"},
      {R"({"max_batch_size": 8, "output": [{"name": "Y", "dims": [-1, 3, 32]}]})",
       "after the batch dimension"},
      {R"({"input": [{"name": "X", "dims": [-1, 64], "optional": true}]})",
       "input 'X': optional is not supported"},
  };
  for (const auto& c : cases) {
    auto declared = ConfigFromTritonJson(c.json);
    ASSERT_TRUE(declared.ok()) << declared.status();
    absl::Status status = CheckDeclaredTensors(*declared, TwoTensorModel());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message)) << c.json;
  }
  auto open = ConfigFromTritonJson(R"({"input": [{"name": "X", "dims": [8, -1]}]})");
  EXPECT_TRUE(CheckDeclaredTensors(*open, TwoTensorModel()).ok());
  // Triton's implicit batch dimension: dims follow the model's variable
  // first dimension, for every tensor.
  auto batched = ConfigFromTritonJson(
      R"({"max_batch_size": 8, "input": [{"name": "X", "dims": [64]}],
          "output": [{"name": "Y", "dims": [3, 32]}]})");
  ASSERT_TRUE(batched.ok()) << batched.status();
  EXPECT_TRUE(CheckDeclaredTensors(*batched, TwoTensorModel()).ok());
  ModelMetadata fixed_first = TwoTensorModel();
  fixed_first.outputs[0].shape[0] = 4;
  absl::Status no_batch = CheckDeclaredTensors(*batched, fixed_first);
  EXPECT_THAT(std::string(no_batch.message()), HasSubstr("first dimension is not variable"));
  // An input the model can go without may say so (what ModelConfig reports
  // loads back).
  ModelMetadata with_optional = TwoTensorModel();
  with_optional.inputs[0].optional = true;
  auto optional =
      ConfigFromTritonJson(R"({"input": [{"name": "X", "dims": [-1, 64], "optional": true}]})");
  ASSERT_TRUE(optional.ok()) << optional.status();
  EXPECT_TRUE(CheckDeclaredTensors(*optional, with_optional).ok());
}

// A model of TwoTensorModel's tensors whose requests count 7 rows each.
class TwoTensor final : public Model {
 public:
  const ModelMetadata& metadata() const override { return metadata_; }
  absl::StatusOr<std::unique_ptr<PreparedInference>> Prepare(const BoundInputs&) const override {
    return std::make_unique<Prepared>();
  }
  std::vector<InferOutputs> RunBatch(absl::Span<PreparedInference* const> batch,
                                     int) const override {
    std::vector<InferOutputs> out;
    for (size_t i = 0; i < batch.size(); ++i) out.push_back(std::vector<NamedTensor>());
    return out;
  }
  std::vector<std::pair<std::string, std::string>> parameters() const override {
    return {{"k", "64"}};
  }

 private:
  struct Prepared final : PreparedInference {
    int64_t output_bytes() const override { return 0; }
    std::vector<std::pair<std::string, Shape>> output_shapes() const override { return {}; }
    int64_t flops() const override { return 0; }
    int64_t rows() const override { return 7; }
    int64_t held_bytes(int) const override { return 0; }
  };
  ModelMetadata metadata_ = TwoTensorModel();
};

// Triton's batch dimension: -1 in front of the config's dims, requests held
// to max_batch_size, batch items counted by the batcher; the answer is
// completed once, and completing it again (loading it back) changes nothing.
TEST(ConfiguredModelTest, TheBatchDimensionAndTheCompletedAnswer) {
  auto config =
      ConfigFromTritonJson(R"({"max_batch_size": 8, "input": [{"name": "X", "dims": [64]}]})");
  ASSERT_TRUE(config.ok()) << config.status();
  auto model = ConfiguredModel::Make(std::make_unique<TwoTensor>(), *config, "model.onnx");
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelMetadata& md = (*model)->metadata();
  EXPECT_EQ(md.inputs[0].shape, (Shape{-1, 64}));
  const inference::ModelConfig& answer = (*model)->config();
  EXPECT_EQ(answer.input(0).data_type(), inference::TYPE_FP32);  // filled in
  ASSERT_EQ(answer.output_size(), 1);                            // the undeclared output
  EXPECT_EQ(answer.output(0).dims_size(), 2);                    // [3, 32]: no batch dim
  ASSERT_EQ(answer.instance_group_size(), 1);
  EXPECT_EQ(answer.instance_group(0).count(), 1);
  EXPECT_EQ(answer.version_policy().latest().num_versions(), 1u);
  EXPECT_EQ(answer.default_model_filename(), "model.onnx");
  EXPECT_EQ(answer.parameters().at("k").string_value(), "64");
  auto again = ConfiguredModel::Make(std::make_unique<TwoTensor>(), answer, "model.onnx");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->config().SerializeAsString(), answer.SerializeAsString());

  BoundInputs inputs(1);
  inputs[0].spec = &md.inputs[0];
  inputs[0].shape = {9, 64};
  absl::Status over = (*model)->Prepare(inputs).status();
  EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(over.message()), HasSubstr("over the model's max_batch_size 8"));
  inputs[0].shape = {8, 64};
  auto prepared = (*model)->Prepare(inputs);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ((*prepared)->rows(), 8);  // batch items, not the model's 7 rows
  PreparedInference* batch[] = {prepared->get()};
  EXPECT_EQ((*model)->RunBatch(batch, 1).size(), 1u);
}

}  // namespace
}  // namespace gemmserve
