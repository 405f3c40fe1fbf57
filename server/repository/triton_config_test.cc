// Triton's JSON form of a ModelConfig as a load's `config`, and the check of
// declared tensors (triton_config.h).
#include "server/repository/triton_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "server/repository/model_repository.h"


namespace gemmserve {
namespace {

using ::testing::HasSubstr;

// What tritonclient users send: Triton's documented field names.
constexpr char kTritonJson[] = R"({
  "name": "moe",
  "platform": "onnxruntime_onnx",
  "max_batch_size": 0,
  "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1, 64]}],
  "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": ["-1", 3, 32]}],
  "instance_group": [{"kind": "KIND_CPU", "count": 1}],
  "dynamic_batching": {
    "max_queue_delay_microseconds": 200,
    "priority_levels": 2,
    "default_priority_level": 2,
    "default_queue_policy": {"max_queue_size": 64, "default_timeout_microseconds": 5000,
                             "allow_timeout_override": true}
  },
  "parameters": {"max_batch_rows": {"string_value": "256"},
                 "weights_layout": {"string_value": "panels"}},
  "model_warmup": [{"name": "one", "count": 3, "inputs": {
      "X": {"data_type": "TYPE_FP32", "dims": [1, 64], "random_data": true}}}]
})";

TEST(TritonConfigTest, TritonsJsonIsTheOneConfigType) {
  auto config = ParseLoadConfig(kTritonJson);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name(), "moe");
  const inference::ModelDynamicBatching& db = config->dynamic_batching();
  EXPECT_EQ(db.max_queue_delay_microseconds(), 200u);
  EXPECT_EQ(db.priority_levels(), 2u);
  EXPECT_EQ(db.default_priority_level(), 2u);
  EXPECT_EQ(db.default_queue_policy().max_queue_size(), 64u);
  EXPECT_EQ(db.default_queue_policy().default_timeout_microseconds(), 5000u);
  // A reported parameter is kept, for CheckParameters against the loaded model.
  EXPECT_EQ(config->parameters().at("weights_layout").string_value(), "panels");
  ASSERT_EQ(config->input_size(), 1);
  EXPECT_EQ(config->input(0).data_type(), inference::TYPE_FP32);
  EXPECT_EQ(config->output(0).dims(0), -1);  // "-1": protobuf's int64 as a string, too
  ASSERT_EQ(config->model_warmup_size(), 1);
  const inference::ModelWarmup& w = config->model_warmup(0);
  EXPECT_EQ(w.count(), 3u);
  EXPECT_EQ(w.inputs().at("X").data_type(), inference::TYPE_FP32);
  EXPECT_TRUE(w.inputs().at("X").random_data());
  EXPECT_EQ(w.inputs().at("X").dims_size(), 2);
  absl::StatusOr<std::optional<BatchingOptions>> batching = BatchingFromConfig(*config);
  ASSERT_TRUE(batching.ok() && batching->has_value()) << batching.status();
  EXPECT_EQ((*batching)->max_batch_rows, 256);
  EXPECT_EQ((*batching)->max_queue_size, 64);
  EXPECT_EQ((*batching)->default_timeout, absl::Microseconds(5000));
  EXPECT_EQ((*batching)->priority_levels, 2);
}

// config.pbtxt's form and Triton's JSON of the same settings become the same
// message, field for field.
TEST(TritonConfigTest, ConfigPbtxtBecomesTheSameMessageAsTritonsJson) {
  auto text = ParseLoadConfig(R"(
    dynamic_batching { max_queue_delay_microseconds: 200 max_batch_rows: 256
                       max_queue_size: 64 default_timeout_microseconds: 5000
                       priority_levels: 2 default_priority_level: 2 max_concurrent_batches: 3 }
    default_model_filename: "w.onnx"
    model_warmup { name: "one" count: 3
                   inputs { key: "X" value { data_type: TYPE_FP32 dims: [1, 64] random_data: true } } })");
  ASSERT_TRUE(text.ok()) << text.status();
  auto json = ParseLoadConfig(R"({
    "default_model_filename": "w.onnx",
    "dynamic_batching": {"max_queue_delay_microseconds": 200, "priority_levels": 2,
                         "default_priority_level": 2,
                         "default_queue_policy": {"max_queue_size": 64, "allow_timeout_override": true,
                                                  "default_timeout_microseconds": 5000}},
    "parameters": {"max_batch_rows": {"string_value": "256"},
                   "max_concurrent_batches": {"string_value": "3"}},
    "model_warmup": [{"name": "one", "count": 3, "inputs": {
        "X": {"data_type": "TYPE_FP32", "dims": [1, 64], "random_data": true}}}]})");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(text->DebugString(), json->DebugString());
}

TEST(TritonConfigTest, TextThatDoesNotStartWithABraceIsConfigPbtxt) {
  auto text = ParseLoadConfig("  dynamic_batching { max_batch_rows: 8 }\n");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->parameters().at(kMaxBatchRowsParameter).string_value(), "8");
  auto bad_text = ParseLoadConfig("dynamic_batching { max_batch_rows: -1 }");
  EXPECT_THAT(bad_text.status().message(), HasSubstr("read as config.pbtxt text"));
  auto bad_json = ParseLoadConfig("\n {\"name\": 3");
  EXPECT_EQ(bad_json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_json.status().message(), HasSubstr("Triton's JSON form"));
  EXPECT_EQ(ParseLoadConfig("{" + std::string(kMaxModelConfigBytes, ' ') + "}").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// accuracy_level, ONNX Runtime's setting of quantized weights, in both forms
// and without a dynamic_batching block: "0" or "4", anything else refused by
// name.
TEST(TritonConfigTest, AccuracyLevelIsZeroOrFour) {
  auto pbtxt =
      ParseLoadConfig(R"(parameters { key: "accuracy_level" value { string_value: "4" } })");
  ASSERT_TRUE(pbtxt.ok()) << pbtxt.status();
  EXPECT_EQ(*AccuracyLevel(*pbtxt), 4);
  auto json = ParseLoadConfig(R"({"parameters": {"accuracy_level": {"string_value": "0"}}})");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(*AccuracyLevel(*json), 0);
  EXPECT_EQ(*AccuracyLevel(inference::ModelConfig()), 0);
  for (const char* bad : {"3", "1", "", "04", "four"}) {
    auto config = ParseLoadConfig(
        absl::StrCat(R"({"parameters": {"accuracy_level": {"string_value": ")", bad, R"("}}})"));
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(config.status().message(), HasSubstr("accuracy_level")) << bad;
    auto text = ParseLoadConfig(absl::StrCat(
        R"(parameters { key: "accuracy_level" value { string_value: ")", bad, R"(" } })"));
    ASSERT_TRUE(text.ok()) << bad;  // config.pbtxt is checked where it is used
    EXPECT_EQ(AccuracyLevel(*text).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(TritonConfigTest, WhatGemmserveCannotHonourIsRefusedByName) {
  const struct {
    const char* json;
    const char* names;
  } cases[] = {
      {R"({"nmae": "x"})", "nmae"},
      {R"({"platform": "tensorrt_plan"})", "platform"},
      {R"({"backend": "python"})", "backend"},
      {R"({"instance_group": [{"kind": "KIND_GPU"}]})", "instance_group.kind"},
      {R"({"model_transaction_policy": {"decoupled": true}})", "decoupled"},
      {R"({"version_policy": {"all": {}}})", "version_policy"},
      {R"({"dynamic_batching": {"priority_queue_policy": {"1": {}}}})", "priority_queue_policy"},
      {R"({"dynamic_batching": {"default_queue_policy": {"timeout_action": "DELAY"}}})",
       "timeout_action"},
      {R"({"parameters": {"max_batch_rows": {"string_value": "8"}}})", "dynamic_batching"},
      {R"({"dynamic_batching": {}, "parameters": {"max_batch_rows": {"string_value": "-8"}}})",
       "non-negative"},
      {R"({"max_batch_size": "x"})", "max_batch_size"},
      {R"([1, 2])", "JSON"},
  };
  for (const auto& c : cases) {
    auto config = ConfigFromTritonJson(c.json);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.names)) << c.json;
  }
}

ModelMetadata TwoTensorModel() {
  ModelMetadata m;
  m.name = "moe";
  m.inputs = {{"X", {DataType::kFP32, DataType::kBF16}, {-1, 64}, false, false}};
  m.outputs = {{"Y", {DataType::kFP32}, {-1, 3, 32}, false, false}};
  return m;
}

TEST(TritonConfigTest, DeclaredTensorsAreCheckedAgainstTheModel) {
  auto config = ParseLoadConfig(kTritonJson);
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
      {R"({"max_batch_size": 8})", "max_batch_size 8"},
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
}

}  // namespace
}  // namespace gemmserve
