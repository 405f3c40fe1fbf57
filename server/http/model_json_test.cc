// The REST JSON of the API's answers (model_json.h): protobuf's JSON, shaped
// as Triton writes it. Each answer is checked against protobuf's own parser
// reading it back (a differential test: the shaping changes the form, never
// a value).
#include "server/http/model_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "google/protobuf/util/json_util.h"

namespace gemmserve {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

template <typename Message>
Message ReadBack(const std::string& json) {
  Message message;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &message, options).ok()) << json;
  return message;
}

TEST(ModelJsonTest, SixtyFourBitIntegersAreNumbersAtEveryDepth) {
  inference::ModelConfigResponse response;
  inference::ModelConfig& config = *response.mutable_config();
  config.set_name("m");
  config.add_input()->add_dims(-1);
  config.mutable_input(0)->add_dims(9007199254740993);  // past a double's exact range
  config.mutable_dynamic_batching()->set_max_queue_delay_microseconds(18446744073709551615u);
  (*config.add_model_warmup()->mutable_inputs())["x"].add_dims(7);
  absl::StatusOr<std::string> json = ModelConfigJson(response);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_THAT(*json, HasSubstr(R"("dims":[-1,9007199254740993])"));
  EXPECT_THAT(*json, HasSubstr(R"("max_queue_delay_microseconds":18446744073709551615)"));
  EXPECT_THAT(*json, HasSubstr(R"("inputs":{"x":{"data_type":"TYPE_INVALID","dims":[7])"));
  EXPECT_THAT(*json, HasSubstr(R"("max_batch_size":0)"));  // defaults are written
  EXPECT_THAT(*json, Not(HasSubstr(R"("config")")));      // the config itself, as Triton
  EXPECT_EQ(ReadBack<inference::ModelConfig>(*json).DebugString(), config.DebugString());
}

TEST(ModelJsonTest, StatisticsAndMetadataReadBackAsTheyWere) {
  inference::ModelStatisticsResponse stats;
  inference::ModelStatistics* s = stats.add_model_stats();
  s->set_name("matmul");
  s->set_inference_count(12345678901234);
  s->mutable_inference_stats()->mutable_compute_input();
  s->add_batch_stats()->set_batch_size(3);
  absl::StatusOr<std::string> json = ModelStatisticsJson(stats);
  ASSERT_TRUE(json.ok());
  EXPECT_THAT(*json, HasSubstr(R"("inference_count":12345678901234)"));
  EXPECT_THAT(*json, HasSubstr(R"("compute_input":{"count":0,"ns":0})"));
  EXPECT_EQ(ReadBack<inference::ModelStatisticsResponse>(*json).DebugString(),
            stats.DebugString());
  inference::ModelMetadataResponse metadata;
  metadata.set_name("m");
  metadata.add_inputs()->add_shape(-1);
  json = ModelMetadataJson(metadata);
  ASSERT_TRUE(json.ok());
  EXPECT_THAT(*json, HasSubstr(R"("shape":[-1])"));
  EXPECT_EQ(ReadBack<inference::ModelMetadataResponse>(*json).DebugString(),
            metadata.DebugString());
}

TEST(ModelJsonTest, IndexAndSharedMemoryStatusAreArrays) {
  inference::RepositoryIndexResponse index;
  EXPECT_EQ(*RepositoryIndexJson(index), "[]");
  auto* m = index.add_models();
  m->set_name("a");
  m->set_state("READY");
  EXPECT_EQ(*RepositoryIndexJson(index),
            R"([{"name":"a","version":"","state":"READY","reason":""}])");
  inference::SystemSharedMemoryStatusResponse shm;
  EXPECT_EQ(*ShmStatusJson(shm), "[]");
  for (const char* name : {"b", "a"}) {
    auto& r = (*shm.mutable_regions())[name];
    r.set_name(name);
    r.set_key(std::string("/") + name);
    r.set_byte_size(1ull << 40);
  }
  EXPECT_EQ(*ShmStatusJson(shm),
            R"([{"name":"a","key":"/a","offset":0,"byte_size":1099511627776},)"
            R"({"name":"b","key":"/b","offset":0,"byte_size":1099511627776}])");
}

TEST(ModelJsonTest, SettingsAreFlatObjects) {
  inference::LogSettingsResponse log;
  (*log.mutable_settings())["log_info"].set_bool_param(false);
  (*log.mutable_settings())["log_verbose_level"].set_uint32_param(2);
  (*log.mutable_settings())["log_format"].set_string_param("default");
  EXPECT_EQ(*LogSettingsJson(log),
            R"({"log_format":"default","log_info":false,"log_verbose_level":2})");
  inference::TraceSettingResponse trace;
  (*trace.mutable_settings())["trace_level"].add_value("TIMESTAMPS");
  (*trace.mutable_settings())["trace_rate"].add_value("1000");
  (*trace.mutable_settings())["trace_file"];
  EXPECT_EQ(*TraceSettingJson(trace),
            R"({"trace_file":"","trace_level":["TIMESTAMPS"],"trace_rate":"1000"})");
}

TEST(ModelJsonTest, ProtocolBodiesAreReadByProtobuf) {
  absl::StatusOr<inference::RepositoryIndexRequest> index =
      ParseRepositoryIndexRequest(R"({"ready": true})");
  ASSERT_TRUE(index.ok());
  EXPECT_TRUE(index->ready());
  EXPECT_FALSE(ParseRepositoryIndexRequest("").value().ready());
  EXPECT_THAT(std::string(ParseRepositoryIndexRequest(R"({"redy": true})").status().message()),
              HasSubstr("redy"));
  absl::StatusOr<inference::SystemSharedMemoryRegisterRequest> shm =
      ParseShmRegisterRequest(R"({"key": "/r", "offset": 8, "byte_size": 64})");
  ASSERT_TRUE(shm.ok()) << shm.status();
  EXPECT_EQ(shm->key(), "/r");
  EXPECT_EQ(shm->offset(), 8u);
  EXPECT_EQ(shm->byte_size(), 64u);
  for (const char* bad : {R"({"key": "/r"})", R"({"key": "/r", "byte_size": -1})",
                          R"({"key": 3, "byte_size": 1})", "[1]", "{"}) {
    EXPECT_EQ(ParseShmRegisterRequest(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(ModelJsonTest, ALoadBodyBecomesTheLoadRequest) {
  absl::StatusOr<inference::RepositoryModelLoadRequest> load = ParseModelLoadRequest(
      R"({"parameters": {"config": "{}", "file:1/model.onnx": "AAEC", "other": "x"}})");
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(load->parameters().at("config").string_param(), "{}");
  EXPECT_EQ(load->parameters().at("file:1/model.onnx").bytes_param(), std::string("\0\1\2", 3));
  EXPECT_EQ(load->parameters().at("other").string_param(), "x");  // Serving refuses it by name
  EXPECT_THAT(std::string(
                  ParseModelLoadRequest(R"({"parameters": {"file:a": "!"}})").status().message()),
              HasSubstr("not base64"));
}

}  // namespace
}  // namespace gemmserve
