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
using ::testing::Not;

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
    dynamic_batching { max_queue_delay_microseconds: 200
                       default_queue_policy { max_queue_size: 64 allow_timeout_override: true
                                              default_timeout_microseconds: 5000 }
                       priority_levels: 2 default_priority_level: 2 }
    parameters { key: "max_batch_rows" value { string_value: "256" } }
    parameters { key: "max_concurrent_batches" value { string_value: "3" } }
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
  auto text = ParseLoadConfig("  max_batch_size: 8 dynamic_batching { }\n");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->max_batch_size(), 8);
  auto bad_text = ParseLoadConfig("dynamic_batching { max_queue_delay_microseconds: -1 }");
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
// protobuf's text format takes invalid UTF-8 into a string field (its binary
// and JSON forms refuse it): refused here, named by its path, so that what
// ModelConfig answers always loads back (a fuzz_model_loader finding).
TEST(TritonConfigTest, StringsThatAreNotUtf8AreRefusedByTheirPath) {
  const std::string warmup =
      "model_warmup { name: \"\\322\" inputs { key: \"x\" value { data_type: TYPE_FP32 "
      "dims: [1] zero_data: true } } }";
  auto refused = ParseModelConfigFile(warmup);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("model_warmup[0].name is not UTF-8"));
  auto in_a_map =
      ParseModelConfigFile("parameters { key: \"note\" value { string_value: \"\\377ok\" } }");
  ASSERT_FALSE(in_a_map.ok());
  EXPECT_THAT(std::string(in_a_map.status().message()),
              HasSubstr("parameters[0].value.string_value is not UTF-8"));
  // UTF-8 beyond ASCII is a string like any other.
  EXPECT_TRUE(ParseModelConfigFile("parameters { key: \"note\" value { string_value: "
                                   "\"h\\303\\251llo\" } }")
                  .ok());
}

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
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(text.status().message(), HasSubstr("config.pbtxt: parameters['accuracy_level']"))
        << bad;
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
      {R"({"sequence_batching": {}})", "sequence_batching is not supported"},
      {R"({"ensemble_scheduling": {"step": []}})", "ensemble_scheduling is not supported"},
      {R"({"batch_input": [{"kind": "BATCH_ELEMENT_COUNT"}]})", "batch_input is not supported"},
      {R"({"batch_output": [{"target_name": ["Y"]}]})", "batch_output is not supported"},
      {R"({"model_operations": {"op_library_filename": ["libcustom.so"]}})",
       "model_operations is not supported"},
      {R"({"model_repository_agents": {"agents": [{"name": "checksum"}]}})",
       "model_repository_agents is not supported"},
      {R"({"parameters": {"max_concurrent_batches": {"string_value": "x"}}})", "non-negative"},
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

// Triton's fields that ask for what gemmserve cannot do are refused by name
// in both forms (config.pbtxt has Triton's input and output), never accepted
// and ignored; the same fields at their defaults are accepted.
TEST(TritonConfigTest, TensorFieldsGemmserveCannotHonourAreRefusedInBothForms) {
  const struct {
    const char* json;
    const char* pbtxt;
    const char* message;
  } cases[] = {
      {R"({"input": [{"name": "X", "reshape": {"shape": [64]}}]})",
       R"(input { name: "X" reshape { shape: [64] } })", "input 'X': reshape is not supported"},
      {R"({"input": [{"name": "X", "reshape": {}}]})", R"(input { name: "X" reshape {} })",
       "input 'X': reshape is not supported"},
      {R"({"input": [{"name": "X", "format": "FORMAT_NHWC"}]})",
       R"(input { name: "X" format: FORMAT_NHWC })", "input 'X': format is not supported"},
      {R"({"input": [{"name": "X", "is_shape_tensor": true}]})",
       R"(input { name: "X" is_shape_tensor: true })", "input 'X': is_shape_tensor is not"},
      {R"({"input": [{"name": "X", "allow_ragged_batch": true}]})",
       R"(input { name: "X" allow_ragged_batch: true })", "input 'X': allow_ragged_batch is not"},
      {R"({"input": [{"name": "X", "is_non_linear_format_io": true}]})",
       R"(input { name: "X" is_non_linear_format_io: true })",
       "input 'X': is_non_linear_format_io is not"},
      {R"({"output": [{"name": "Y", "reshape": {"shape": [3, 32]}}]})",
       R"(output { name: "Y" reshape { shape: [3, 32] } })", "output 'Y': reshape is not"},
      {R"({"output": [{"name": "Y", "label_filename": "labels.txt"}]})",
       R"(output { name: "Y" label_filename: "labels.txt" })", "output 'Y': label_filename is not"},
      {R"({"output": [{"name": "Y", "is_shape_tensor": true}]})",
       R"(output { name: "Y" is_shape_tensor: true })", "output 'Y': is_shape_tensor is not"},
      {R"({"output": [{"name": "Y", "is_non_linear_format_io": true}]})",
       R"(output { name: "Y" is_non_linear_format_io: true })",
       "output 'Y': is_non_linear_format_io is not"},
  };
  for (const auto& c : cases) {
    auto json = ParseLoadConfig(c.json);
    EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(std::string(json.status().message()), HasSubstr(c.message)) << c.json;
    auto text = ParseLoadConfig(c.pbtxt);
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument) << c.pbtxt;
    EXPECT_THAT(std::string(text.status().message()), HasSubstr(c.message)) << c.pbtxt;
    EXPECT_THAT(std::string(text.status().message()), HasSubstr("config.pbtxt")) << c.pbtxt;
  }
  auto defaults = ParseLoadConfig(R"({
    "input": [{"name": "X", "format": "FORMAT_NONE", "is_shape_tensor": false,
               "allow_ragged_batch": false, "optional": false}],
    "output": [{"name": "Y", "label_filename": "", "is_non_linear_format_io": false}]})");
  EXPECT_TRUE(defaults.ok()) << defaults.status();
  auto text_defaults = ParseLoadConfig(
      R"(input { name: "X" format: FORMAT_NONE is_shape_tensor: false } output { name: "Y" })");
  EXPECT_TRUE(text_defaults.ok()) << text_defaults.status();
}

TEST(TritonConfigTest, PlacementGemmserveCannotHonourIsRefusedByName) {
  const struct {
    const char* json;
    const char* message;
  } cases[] = {
      {R"({"runtime": "libtorch"})", "runtime: 'libtorch'"},
      {R"({"runtime": "model.py"})", "runtime"},
      {R"({"instance_group": [{"kind": "KIND_CPU", "count": 100000}]})",
       "instance_group.count 100000"},
      {R"({"instance_group": [{"count": 65}]})", "limit of 64"},
      {R"({"instance_group": [{"count": -1}]})", "instance_group.count -1"},
      {R"({"instance_group": [{"kind": "KIND_CPU", "gpus": [0]}]})", "instance_group.gpus"},
      {R"({"instance_group": [{"profile": ["0"]}]})", "instance_group.profile"},
      {R"({"instance_group": [{"passive": true}]})", "instance_group.passive"},
      {R"({"instance_group": [{"host_policy": "numa0"}]})", "instance_group.host_policy"},
      {R"({"instance_group": [{"secondary_devices": [{"device_id": 1}]}]})",
       "instance_group.secondary_devices"},
      {R"({"instance_group": [{"rate_limiter": {"priority": 2}}]})", "instance_group.rate_limiter"},
      {R"({"instance_group": [{"rate_limiter": {"resources": [{"name": "R", "count": 1}]}}]})",
       "instance_group.rate_limiter"},
      {R"({"version_policy": {"latest": {"num_versions": 0}}})",
       "version_policy.latest.num_versions 0"},
      {R"({"version_policy": {"latest": {}}})", "version_policy.latest.num_versions 0"},
      {R"({"version_policy": {"latest": {"num_versions": 17}}})", "limit of 16"},
      {R"({"version_policy": {"specific": {}}})", "lists no version"},
      {R"({"version_policy": {"specific": {"versions": [-1]}}})", "negative"},
      {R"({"instance_group": [{"count": 40}, {"count": 30}]})", "instance_group counts 70"},
      {R"({"max_batch_size": 4, "dynamic_batching": {"preferred_batch_size": [8]}})",
       "preferred_batch_size 8"},
  };
  for (const auto& c : cases) {
    auto config = ParseLoadConfig(c.json);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.message)) << c.json;
  }
  const char* const kAccepted[] = {
      R"({"runtime": ""})",
      R"({"runtime": "onnxruntime"})",
      R"({"runtime": "libtriton_onnxruntime.so"})",
      R"({"instance_group": [{"name": "g", "kind": "KIND_CPU", "count": 64}]})",
      R"({"instance_group": [{"count": 0, "gpus": [], "passive": false, "rate_limiter": {}}]})",
      R"({"version_policy": {"latest": {"num_versions": 1}}})",
      R"({"version_policy": {"latest": {"num_versions": 3}}})",
      R"({"version_policy": {"all": {}}})",
      R"({"version_policy": {"specific": {"versions": [1, 3]}}})",
      // Accepted because they change nothing here (docs/models.md).
      R"({"optimization": {"graph": {"level": 1}}, "response_cache": {"enable": true}})",
      R"({"max_batch_size": 8, "dynamic_batching": {"preferred_batch_size": [4, 8],
          "preserve_ordering": true}})",
  };
  for (const char* fine : kAccepted) {
    auto config = ParseLoadConfig(fine);
    EXPECT_TRUE(config.ok()) << fine << ": " << config.status();
  }
}

// A 1 MB text of '[' is refused by a scan that allocates nothing, before
// protobuf's parser, which bounds objects ("Message too deep") but held each
// level of arrays in memory (140 MB for 500,000 levels), and flattened a list
// of lists into one list ("dims": [[1, 2], [3]] became dims [1, 2, 3]).
TEST(TritonConfigTest, JsonNestingIsBoundedBeforeItIsParsed) {
  constexpr int kDeep = 500'000;
  const std::string arrays =
      absl::StrCat(R"({"input": )", std::string(kDeep, '['), std::string(kDeep, ']'), "}");
  for (const char* flattened : {R"({"input": [{"name": "X", "dims": [[1, 2], [3]]}]})",
                                R"({"input": [[{"name": "X"}], {"name": "Z"}]})"}) {
    auto config = ParseLoadConfig(flattened);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << flattened;
    EXPECT_THAT(std::string(config.status().message()),
                HasSubstr("an array directly inside an array"))
        << flattened;
  }
  auto literal = ParseLoadConfig(arrays);
  EXPECT_THAT(std::string(literal.status().message()),
              HasSubstr("an array directly inside an array at byte 11"));
  // Arrays of objects, and objects: the depth bound.
  std::string alternating = "{";
  while (alternating.size() < (1 << 20) - 16) alternating += R"("a": [{)";
  std::string objects;
  for (int i = 0; i < 100; ++i) objects += R"({"a": )";
  objects += "1" + std::string(100, '}');
  // Brackets after a single-quoted '"' (protobuf reads both quotes) and after
  // closers that close nothing are counted all the same.
  std::string quoted = R"({'name': '"', 'input': )";
  for (int i = 0; i < 64; ++i) quoted += R"([{"a": )";
  std::string closers = R"({"name": "x"})" + std::string(kDeep, ']');
  for (int i = 0; i < 65; ++i) closers += R"({"a": )";
  for (const std::string& text : {alternating, objects, quoted, closers}) {
    auto config = ParseLoadConfig(text);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << text.substr(0, 40);
    EXPECT_THAT(std::string(config.status().message()), HasSubstr("nested 65 levels deep at byte "))
        << text.substr(0, 40);
    EXPECT_THAT(std::string(config.status().message()),
                HasSubstr("over the limit of 64 levels of arrays and objects"));
  }
  EXPECT_EQ(ParseLoadConfig(objects).status().message(),
            "config (Triton's JSON form, as it starts with '{'): nested 65 levels deep at byte "
            "384, over the limit of 64 levels of arrays and objects");
  // Brackets inside strings, escaped quotes and all, are not nesting.
  auto in_string = ParseLoadConfig(
      absl::StrCat(R"({"parameters": {"weights_layout": {"string_value": "\"[{)",
                   std::string(100, '['), R"(\\"}}, "name": ")", std::string(100, '{'), R"("})"));
  ASSERT_TRUE(in_string.ok()) << in_string.status();
  EXPECT_EQ(in_string->parameters().at("weights_layout").string_value().size(), 104u);
  // 64 levels are within the bound (protobuf's own message follows).
  std::string at_limit = "{";
  for (int i = 1; i < 64; ++i) at_limit += R"("a": {)";
  auto deep = ParseLoadConfig(at_limit + std::string(64, '}'));
  EXPECT_THAT(std::string(deep.status().message()), HasSubstr("Cannot find field"));
}

// config.pbtxt text is bounded by its schema: TextFormat refuses the first
// '[' inside a list and the first unknown field, so 500,000 of either stop
// at once.
TEST(TritonConfigTest, ConfigPbtxtNestingStopsAtTheFirstLevelItCannotHave) {
  constexpr int kDeep = 500'000;
  std::string fields;
  for (int i = 0; i < 50'000; ++i) fields += "dynamic_batching { ";
  const std::string texts[] = {"input [" + std::string(kDeep, '['),
                               "input { reshape { " + std::string(kDeep, '{'), fields,
                               "input " + std::string(kDeep, '<')};
  for (const std::string& text : texts) {
    auto config = ParseLoadConfig(text);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << text.substr(0, 40);
    EXPECT_THAT(std::string(config.status().message()), HasSubstr("line 1, column"))
        << text.substr(0, 40);
  }
}

// config.pbtxt becomes the same message and is held to the same CheckConfig:
// gemmserve's settings among its parameters need a dynamic_batching block
// there too (they were ignored).
TEST(TritonConfigTest, ConfigPbtxtIsHeldToTheSameChecks) {
  auto loose =
      ParseLoadConfig(R"(parameters { key: "max_batch_rows" value { string_value: "8" } })");
  EXPECT_EQ(loose.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(loose.status().message()),
              HasSubstr("config.pbtxt: parameters['max_batch_rows']: needs a dynamic_batching"));
  auto in_block = ParseLoadConfig(
      R"(dynamic_batching {} parameters { key: "max_batch_rows" value { string_value: "8" } })");
  ASSERT_TRUE(in_block.ok()) << in_block.status();
  EXPECT_EQ(*SettingParameter(*in_block, kMaxBatchRowsParameter), 8u);
}

// Triton's version policies, out of the versions on disk.
TEST(TritonConfigTest, VersionPoliciesChooseTheServedVersions) {
  const std::vector<int64_t> available = {1, 2, 5};
  const struct {
    const char* pbtxt;
    std::vector<int64_t> served;
  } cases[] = {
      {"", {5}},
      {"version_policy { latest { num_versions: 2 } }", {2, 5}},
      {"version_policy { latest { num_versions: 9 } }", {1, 2, 5}},
      {"version_policy { all {} }", {1, 2, 5}},
      {"version_policy { specific { versions: [5, 1, 5] } }", {1, 5}},
  };
  for (const auto& c : cases) {
    auto config = ParseModelConfigFile(c.pbtxt);
    ASSERT_TRUE(config.ok()) << c.pbtxt << ": " << config.status();
    auto served = ServedVersions(*config, available);
    ASSERT_TRUE(served.ok()) << c.pbtxt << ": " << served.status();
    EXPECT_EQ(*served, c.served) << c.pbtxt;
  }
  auto specific = ParseModelConfigFile("version_policy { specific { versions: [3] } }");
  absl::Status missing = ServedVersions(*specific, available).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("version 3"));
  std::vector<int64_t> many(kMaxServedVersions + 1);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>(i + 1);
  auto all = ParseModelConfigFile("version_policy { all {} }");
  EXPECT_EQ(ServedVersions(*all, many).status().code(), absl::StatusCode::kInvalidArgument);
}

// instance_group's counts are the batches run at once; the older parameter
// must agree with them.
TEST(TritonConfigTest, InstanceGroupCountIsConcurrentBatches) {
  EXPECT_EQ(*ConcurrentBatches(*ParseModelConfigFile("")), 1);
  EXPECT_EQ(*ConcurrentBatches(*ParseModelConfigFile("instance_group [{ count: 2 }, {}]")), 3);
  EXPECT_EQ(*ConcurrentBatches(*ParseModelConfigFile(
                R"(dynamic_batching {}
                   parameters { key: "max_concurrent_batches" value { string_value: "4" } })")),
            4);
  EXPECT_EQ(*ConcurrentBatches(*ParseModelConfigFile(
                R"(dynamic_batching {}
                   parameters { key: "max_concurrent_batches" value { string_value: "64" } })")),
            64);
  auto both = ParseModelConfigFile(
      R"(dynamic_batching {} instance_group { count: 2 }
         parameters { key: "max_concurrent_batches" value { string_value: "4" } })");
  EXPECT_THAT(std::string(both.status().message()),
              HasSubstr("differs from instance_group's count 2"));
}

}  // namespace
}  // namespace gemmserve
