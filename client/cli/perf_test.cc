#include "client/cli/perf.h"
#include "client/cli/perf_stream.h"
#include "client/cli/perf_input_data.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/cli/noop_server.h"
#include "client/cpp/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/tensor/half.h"

namespace gemmserve::client {
namespace {

using ::testing::DoubleEq;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

inference::ModelMetadataResponse Metadata(
    const std::string& model,
    const std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>>& inputs) {
  inference::ModelMetadataResponse metadata;
  metadata.set_name(model);
  for (const auto& [name, datatype, shape] : inputs) {
    auto* input = metadata.add_inputs();
    input->set_name(name);
    input->set_datatype(datatype);
    for (int64_t d : shape) input->add_shape(d);
  }
  return metadata;
}

inference::ModelMetadataResponse MatMulMetadata() {
  return Metadata("matmul", {{"A", "FP32", {-1, -1}}, {"B", "FP32", {-1, -1}}});
}

inference::ModelMetadataResponse GroupedMatMulMetadata() {
  return Metadata("grouped_matmul", {{"input", "FP32", {-1, -1}},
                                     {"weights", "FP32", {-1, -1, -1}},
                                     {"group_indices", "INT64", {-1, -1}},
                                     {"bias", "FP32", {-1, -1}}});
}

inference::ModelConfig BiasOptionalConfig() {
  inference::ModelConfig config;
  for (const char* name : {"input", "weights", "group_indices", "bias"}) {
    inference::ModelInput* input = config.add_input();
    input->set_name(name);
    input->set_optional(std::string(name) == "bias");
  }
  return config;
}

template <typename T>
std::vector<T> Values(const HostTensor& tensor) {
  std::vector<T> values(tensor.bytes.size() / sizeof(T));
  std::memcpy(values.data(), tensor.bytes.data(), tensor.bytes.size());
  return values;
}

// ------------------------------------------------------------ options

TEST(ParseShapeOverrideTest, ParsesNameAndDims) {
  absl::StatusOr<ShapeOverride> shape = ParseShapeOverride("A:2,3");
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->name, "A");
  EXPECT_THAT(shape->dims, ElementsAre(2, 3));
}

TEST(ParseShapeOverrideTest, EmptyDimsIsScalar) {
  absl::StatusOr<ShapeOverride> shape = ParseShapeOverride("x:");
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_THAT(shape->dims, IsEmpty());
}

TEST(ParseShapeOverrideTest, RejectsMalformed) {
  for (const char* text : {"A", ":2,3", "A:2,-1", "A:2,,3", "A:2x3", "A:two"}) {
    EXPECT_EQ(ParseShapeOverride(text).status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(CheckPerfOptionsTest, AcceptsDefaultsWithModel) {
  PerfOptions options;
  options.model = "matmul";
  EXPECT_TRUE(CheckPerfOptions(options).ok());
}

TEST(CheckPerfOptionsTest, RejectsOutOfRange) {
  const auto invalid = [](auto change) {
    PerfOptions options;
    options.model = "matmul";
    change(options);
    return CheckPerfOptions(options).code() == absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(invalid([](PerfOptions& o) { o.model = ""; }));
  EXPECT_TRUE(invalid([](PerfOptions& o) { o.concurrency = 0; }));
  EXPECT_TRUE(invalid([](PerfOptions& o) { o.concurrency = 10001; }));
  EXPECT_TRUE(invalid([](PerfOptions& o) { o.duration = absl::ZeroDuration(); }));
  EXPECT_TRUE(invalid([](PerfOptions& o) { o.duration = absl::Hours(25); }));
  EXPECT_TRUE(invalid([](PerfOptions& o) { o.warmup = absl::Seconds(-1); }));
  EXPECT_TRUE(invalid([](PerfOptions& o) { o.rate = -1; }));
  EXPECT_TRUE(invalid([](PerfOptions& o) { o.rate = std::nan(""); }));
  EXPECT_TRUE(invalid([](PerfOptions& o) { o.rows = -1; }));
  EXPECT_TRUE(invalid([](PerfOptions& o) { o.timeout = absl::ZeroDuration(); }));
  EXPECT_TRUE(invalid([](PerfOptions& o) { o.request_pool = 0; }));
  EXPECT_TRUE(invalid([](PerfOptions& o) { o.request_pool = 100001; }));
  EXPECT_TRUE(invalid([](PerfOptions& o) { o.shapes = {{"A", {1}}, {"A", {2}}}; }));
}

// ------------------------------------------------------------- inputs

TEST(MakePerfInputsTest, VariableFirstDimensionIsRowsOthersOne) {
  PerfOptions options;
  options.rows = 5;
  absl::StatusOr<std::vector<HostTensor>> inputs =
      MakePerfInputs(MatMulMetadata(), nullptr, options);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  ASSERT_EQ(inputs->size(), 2u);
  EXPECT_EQ((*inputs)[0].name, "A");
  EXPECT_EQ((*inputs)[0].datatype, "FP32");
  EXPECT_THAT((*inputs)[0].shape, ElementsAre(5, 1));
  EXPECT_EQ((*inputs)[0].bytes.size(), 5 * sizeof(float));
}

TEST(MakePerfInputsTest, ShapeOverrideWinsAndFloatsAreInUnitRange) {
  PerfOptions options;
  options.shapes = {{"A", {2, 3}}, {"B", {3, 4}}};
  absl::StatusOr<std::vector<HostTensor>> inputs =
      MakePerfInputs(MatMulMetadata(), nullptr, options);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_THAT((*inputs)[0].shape, ElementsAre(2, 3));
  EXPECT_THAT((*inputs)[1].shape, ElementsAre(3, 4));
  for (float v : Values<float>((*inputs)[1])) {
    EXPECT_GE(v, -1.0f);
    EXPECT_LT(v, 1.0f);
  }
}

TEST(MakePerfInputsTest, HalfTypesAreBitsOfUnitRangeValues) {
  absl::StatusOr<std::vector<HostTensor>> inputs = MakePerfInputs(
      Metadata("m", {{"x", "BF16", {64}}, {"y", "FP16", {64}}}), nullptr, PerfOptions());
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  for (uint16_t bits : Values<uint16_t>((*inputs)[0])) {
    EXPECT_LE(std::abs(BFloat16ToFloat(bits)), 1.0f);
  }
  for (uint16_t bits : Values<uint16_t>((*inputs)[1])) {
    EXPECT_LE(std::abs(HalfToFloat(bits)), 1.0f);
  }
}

TEST(MakePerfInputsTest, SameSeedSameData) {
  PerfOptions options;
  options.shapes = {{"A", {4, 4}}, {"B", {4, 4}}};
  options.seed = 3;
  absl::StatusOr<std::vector<HostTensor>> first =
      MakePerfInputs(MatMulMetadata(), nullptr, options);
  absl::StatusOr<std::vector<HostTensor>> again =
      MakePerfInputs(MatMulMetadata(), nullptr, options);
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ((*first)[0].bytes, (*again)[0].bytes);
  EXPECT_NE((*first)[0].bytes, (*first)[1].bytes);
}

TEST(MakePerfInputsTest, ShapeNamingNoInputIsInvalidArgument) {
  PerfOptions options;
  options.shapes = {{"C", {2}}};
  absl::Status status = MakePerfInputs(MatMulMetadata(), nullptr, options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'C'"));
}

TEST(MakePerfInputsTest, UnknownDatatypeIsFailedPrecondition) {
  EXPECT_EQ(
      MakePerfInputs(Metadata("m", {{"s", "BYTES", {1}}}), nullptr, PerfOptions()).status().code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST(MakePerfInputsTest, OverLimitShapeIsInvalidArgument) {
  PerfOptions options;
  options.shapes = {{"A", {1 << 20, 1 << 20}}};
  EXPECT_EQ(MakePerfInputs(MatMulMetadata(), nullptr, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MakePerfInputsTest, GroupIndicesAreBelowFirstDimensionOfWeights) {
  PerfOptions options;
  options.shapes = {{"input", {64, 8}}, {"weights", {3, 8, 5}}, {"group_indices", {64, 2}}};
  const inference::ModelConfig config = BiasOptionalConfig();
  absl::StatusOr<std::vector<HostTensor>> inputs =
      MakePerfInputs(GroupedMatMulMetadata(), &config, options);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  ASSERT_EQ(inputs->size(), 3u);  // the optional bias is left out
  const HostTensor& indices = (*inputs)[2];
  EXPECT_EQ(indices.name, "group_indices");
  EXPECT_EQ(indices.datatype, "INT64");
  std::set<int64_t> seen;
  for (int64_t v : Values<int64_t>(indices)) seen.insert(v);
  EXPECT_THAT(seen, ElementsAre(0, 1, 2));
}

// A pool of requests: each with its own values and group indices (fresh
// routing per request), the same inputs and shapes, bounded in bytes.
TEST(MakePerfInputPoolTest, EachRequestRoutesAnewWithTheSameShapes) {
  PerfOptions options;
  options.shapes = {{"input", {64, 8}}, {"weights", {16, 8, 5}}, {"group_indices", {64, 2}}};
  options.request_pool = 8;
  const inference::ModelConfig config = BiasOptionalConfig();
  absl::StatusOr<std::vector<std::vector<HostTensor>>> pool =
      MakePerfInputPool(GroupedMatMulMetadata(), &config, options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_EQ(pool->size(), 8u);
  std::set<std::vector<int64_t>> routings;
  std::set<std::string> inputs;
  for (const std::vector<HostTensor>& request : *pool) {
    ASSERT_EQ(request.size(), 3u);
    EXPECT_EQ(request[2].shape, (std::vector<int64_t>{64, 2}));
    for (int64_t v : Values<int64_t>(request[2])) ASSERT_TRUE(v >= 0 && v < 16) << v;
    routings.insert(Values<int64_t>(request[2]));
    inputs.insert(request[0].bytes);
  }
  EXPECT_EQ(routings.size(), 8u) << "every request routes its tokens anew";
  EXPECT_EQ(inputs.size(), 8u) << "every request has its own values";
}

TEST(MakePerfInputPoolTest, ZeroDataIsOneAllZeroRequest) {
  PerfOptions options;
  options.shapes = {{"input", {64, 8}}, {"weights", {16, 8, 5}}, {"group_indices", {64, 2}}};
  options.request_pool = 8;
  options.zero_data = true;
  const inference::ModelConfig config = BiasOptionalConfig();
  absl::StatusOr<std::vector<std::vector<HostTensor>>> pool =
      MakePerfInputPool(GroupedMatMulMetadata(), &config, options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_EQ(pool->size(), 1u);
  ASSERT_EQ((*pool)[0].size(), 3u);
  for (const HostTensor& t : (*pool)[0]) {
    EXPECT_FALSE(t.bytes.empty()) << t.name;
    EXPECT_EQ(t.bytes, std::string(t.bytes.size(), '\0')) << t.name;
  }
  EXPECT_EQ((*pool)[0][0].shape, (std::vector<int64_t>{64, 8}));
}

TEST(MakePerfInputPoolTest, PoolStopsAtItsByteLimitButHoldsOneRequest) {
  PerfOptions options;
  options.shapes = {{"A", {4096, 4096}}, {"B", {4096, 1}}};  // 64 MiB + 16 KiB per request
  options.request_pool = 10;
  absl::StatusOr<std::vector<std::vector<HostTensor>>> pool =
      MakePerfInputPool(MatMulMetadata(), nullptr, options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ(pool->size(), 3u);  // a fourth would pass kPerfPoolMaxBytes (256 MiB)
  options.request_pool = 1;
  pool = MakePerfInputPool(MatMulMetadata(), nullptr, options);
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ(pool->size(), 1u);
}

TEST(MakePerfInputsTest, OptionalInputIsSentWhenShapeNamesIt) {
  PerfOptions options;
  options.shapes = {{"weights", {3, 8, 5}}, {"bias", {3, 5}}};
  const inference::ModelConfig config = BiasOptionalConfig();
  absl::StatusOr<std::vector<HostTensor>> inputs =
      MakePerfInputs(GroupedMatMulMetadata(), &config, options);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  ASSERT_EQ(inputs->size(), 4u);
  EXPECT_THAT((*inputs)[3].shape, ElementsAre(3, 5));
}

TEST(MakePerfInputsTest, WithoutConfigEveryInputIsSent) {
  absl::StatusOr<std::vector<HostTensor>> inputs =
      MakePerfInputs(GroupedMatMulMetadata(), nullptr, PerfOptions());
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_EQ(inputs->size(), 4u);
}

TEST(MakePerfInputsTest, GroupsParameterBoundsEveryIntegerInput) {
  inference::ModelConfig config;
  (*config.mutable_parameters())["groups"].set_string_value("64");
  PerfOptions options;
  options.shapes = {{"experts", {256, 4}}};
  absl::StatusOr<std::vector<HostTensor>> inputs = MakePerfInputs(
      Metadata("resident", {{"input", "FP32", {-1, -1}}, {"experts", "INT32", {-1, -1}}}), &config,
      options);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  int32_t largest = 0;
  for (int32_t v : Values<int32_t>((*inputs)[1])) {
    EXPECT_GE(v, 0);
    EXPECT_LT(v, 64);
    largest = std::max(largest, v);
  }
  EXPECT_GT(largest, 8);  // indices, not the small [-8, 8] values
}

TEST(MakePerfInputsTest, GroupsParameterWinsOverWeights) {
  inference::ModelConfig config;
  (*config.mutable_parameters())["groups"].set_string_value("2");
  PerfOptions options;
  options.shapes = {{"weights", {50, 1, 1}}, {"group_indices", {100, 1}}};
  absl::StatusOr<std::vector<HostTensor>> inputs =
      MakePerfInputs(GroupedMatMulMetadata(), &config, options);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  for (int64_t v : Values<int64_t>((*inputs)[2])) EXPECT_LT(v, 2);
}

TEST(MakePerfInputsTest, IndicesWithoutWeightsOrGroupsAreZero) {
  absl::StatusOr<std::vector<HostTensor>> inputs =
      MakePerfInputs(Metadata("m", {{"group_indices", "INT32", {16}}}), nullptr, PerfOptions());
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  for (int32_t v : Values<int32_t>((*inputs)[0])) EXPECT_EQ(v, 0);
}

TEST(MakePerfInputsTest, BadGroupsParameterIsFailedPrecondition) {
  inference::ModelConfig config;
  (*config.mutable_parameters())["groups"].set_string_value("many");
  EXPECT_EQ(MakePerfInputs(GroupedMatMulMetadata(), &config, PerfOptions()).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// ------------------------------------------------------------ reports

TEST(SummarizeLatenciesTest, NearestRankPercentiles) {
  std::vector<int64_t> latencies;
  for (int64_t v = 100; v >= 1; --v) latencies.push_back(v);
  std::optional<LatencySummary> s = SummarizeLatencies(latencies);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->p50_us, 50);
  EXPECT_EQ(s->p90_us, 90);
  EXPECT_EQ(s->p95_us, 95);
  EXPECT_EQ(s->p99_us, 99);
  EXPECT_EQ(s->max_us, 100);
  EXPECT_DOUBLE_EQ(s->mean_us, 50.5);
}

TEST(SummarizeLatenciesTest, OneValueIsEveryPercentile) {
  std::optional<LatencySummary> s = SummarizeLatencies({7});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->p50_us, 7);
  EXPECT_EQ(s->p99_us, 7);
  EXPECT_EQ(s->max_us, 7);
}

TEST(SummarizeLatenciesTest, EmptyIsNullopt) { EXPECT_FALSE(SummarizeLatencies({}).has_value()); }

PerfResult SampleResult() {
  PerfResult result;
  result.model = "grouped_matmul";
  result.inputs = {{"A", "FP32", {2, 3}}};
  result.concurrency = 8;
  result.duration_s = 10;
  result.ok = 12345;
  result.throughput = 1234.5;
  result.latency = LatencySummary{812, 1203, 1500, 2101, 3100, 850.25};
  return result;
}

TEST(FormatPerfReportTest, ClosedLoopWithoutErrors) {
  EXPECT_EQ(FormatPerfReport(SampleResult()),
            "model grouped_matmul, closed loop, concurrency 8, 10.0 s\n"
            "  inputs A FP32 [2,3]; 1 request throughout\n"
            "  requests 12345 ok, 0 errors; throughput 1234.5 infer/s\n"
            "  latency p50 812 us, p90 1203 us, p95 1500 us, p99 2101 us, max 3100 us, "
            "mean 850 us\n");
}

TEST(FormatPerfReportTest, ServerBreakdownHasItsLine) {
  PerfResult result = SampleResult();
  result.server = ServerBreakdown{12000, 120.4, 0, 610.6, 0};
  EXPECT_THAT(FormatPerfReport(result),
              HasSubstr("\n  server: queue 120 us, compute infer 611 us per request; 12000 "
                        "requests answered\n"));
}

TEST(FormatPerfReportTest, OpenLoopNamesDropsAndErrorsMostFrequentFirst) {
  PerfResult result = SampleResult();
  result.open_loop = true;
  result.rate = 200;
  result.client_dropped = 4;
  result.errors = {{"DEADLINE_EXCEEDED", 1}, {"UNAVAILABLE", 3}};
  const std::string report = FormatPerfReport(result);
  EXPECT_THAT(report, HasSubstr("open loop, 200 infer/s (Poisson), at most 8 in flight"));
  EXPECT_THAT(report, HasSubstr("requests 12345 ok, 4 errors;"));
  EXPECT_THAT(report, HasSubstr("dropped by the client 4"));
  EXPECT_THAT(report, HasSubstr("  errors: UNAVAILABLE 3, DEADLINE_EXCEEDED 1\n"));
}

TEST(PerfResultJsonTest, HasEveryField) {
  PerfResult result = SampleResult();
  result.errors = {{"UNAVAILABLE", 3}};
  EXPECT_EQ(PerfResultJson(result),
            "{\"model\": \"grouped_matmul\", \"inputs\": {\"A\": {\"datatype\": \"FP32\", "
            "\"shape\": [2, 3]}}, \"distinct_requests\": 1, \"mode\": \"closed_loop\", "
            "\"concurrency\": 8, \"rate\": null, "
            "\"duration_s\": 10, \"ok\": 12345, \"errors\": {\"UNAVAILABLE\": 3}, "
            "\"client_dropped\": 0, \"throughput\": 1234.500, \"p50_us\": 812, \"p90_us\": 1203, "
            "\"p95_us\": 1500, \"p99_us\": 2101, \"max_us\": 3100, \"mean_us\": 850.250, "
            "\"server\": null, \"shared_memory\": \"none\", \"protocol\": \"grpc\", "
            "\"streaming\": false}\n");
}

TEST(PerfResultJsonTest, ServerBreakdownIsAnObject) {
  PerfResult result = SampleResult();
  result.server = ServerBreakdown{10, 1.5, 0, 2.25, 0};
  EXPECT_THAT(
      PerfResultJson(result),
      HasSubstr(
          "\"server\": {\"requests\": 10, \"queue_us\": 1.500, "
          "\"compute_input_us\": 0.000, \"compute_infer_us\": 2.250, "
          "\"compute_output_us\": 0.000}, \"shared_memory\": \"none\", \"protocol\": \"grpc\", \"streaming\": false}\n"));
}

TEST(PerfResultJsonTest, SharedMemoryRunsSayHowTheTensorsWent) {
  PerfResult result = SampleResult();
  result.system_shared_memory = true;
  EXPECT_THAT(PerfResultJson(result),
              HasSubstr("\"shared_memory\": \"system\", \"protocol\": \"grpc\", \"streaming\": false}\n"));
  result.http = true;
  EXPECT_THAT(PerfResultJson(result), HasSubstr("\"protocol\": \"http\", \"streaming\": false}\n"));
  EXPECT_THAT(FormatPerfReport(result),
              HasSubstr("tensors in system shared memory; over HTTP/REST\n"));
  result.http = false;
  EXPECT_THAT(FormatPerfReport(result),
              HasSubstr("1 request throughout; tensors in system shared memory\n"));
  result.system_shared_memory = false;
  EXPECT_THAT(FormatPerfReport(result), Not(HasSubstr("shared memory")));
}

inference::ModelStatistics Stats(uint64_t success, uint64_t queue_ns, uint64_t infer_ns) {
  inference::ModelStatistics s;
  s.mutable_inference_stats()->mutable_success()->set_count(success);
  s.mutable_inference_stats()->mutable_queue()->set_ns(queue_ns);
  s.mutable_inference_stats()->mutable_compute_infer()->set_ns(infer_ns);
  return s;
}

TEST(ServerBreakdownBetweenTest, MeansPerRequestAnsweredInBetween) {
  std::optional<ServerBreakdown> b =
      ServerBreakdownBetween(Stats(5, 1000, 9000), Stats(9, 1000 + 4 * 3000, 9000 + 4 * 250000));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->requests, 4);
  EXPECT_DOUBLE_EQ(b->queue_us, 3);
  EXPECT_DOUBLE_EQ(b->compute_infer_us, 250);
  EXPECT_DOUBLE_EQ(b->compute_input_us, 0);
}

TEST(ServerBreakdownBetweenTest, NoneWithoutNewRequestsOrWhenCountersGoBack) {
  EXPECT_FALSE(ServerBreakdownBetween(Stats(5, 10, 10), Stats(5, 20, 20)).has_value());
  EXPECT_FALSE(ServerBreakdownBetween(Stats(5, 10, 10), Stats(3, 20, 20)).has_value());
  // A reload resets the times while the count grew past the old one.
  EXPECT_FALSE(ServerBreakdownBetween(Stats(5, 5000, 10), Stats(9, 100, 20)).has_value());
}

grpc::ByteBuffer Serialized(const google::protobuf::Message& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

TEST(StreamAnswerHeadTest, ReadsTheIdAndErrorWhateverElseTheAnswerHolds) {
  inference::ModelStreamInferResponse answer;
  inference::ModelInferResponse* response = answer.mutable_infer_response();
  response->set_model_name("matmul");
  response->add_outputs()->set_name("Y");
  response->add_raw_output_contents(std::string(100000, '\x7f'));  // skipped, not read
  response->set_id("req-17");
  response->mutable_parameters()->insert({"p", inference::InferParameter()});
  std::optional<StreamAnswerHead> head = ReadStreamAnswerHead(Serialized(answer));
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->id, "req-17");
  EXPECT_EQ(head->error_message, "");
  answer.Clear();
  answer.set_error_message("input 'B' is missing");
  answer.mutable_infer_response()->set_id("9");
  head = ReadStreamAnswerHead(Serialized(answer));
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->id, "9");
  EXPECT_EQ(head->error_message, "input 'B' is missing");
  head = ReadStreamAnswerHead(Serialized(inference::ModelStreamInferResponse()));
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->id, "");
}

TEST(StreamAnswerHeadTest, BytesThatAreNoAnswerAreRefused) {
  inference::ModelStreamInferResponse answer;
  answer.mutable_infer_response()->set_id("12345");
  std::string bytes = answer.SerializeAsString();
  for (size_t cut = 1; cut < bytes.size(); ++cut) {  // every truncation
    grpc::Slice slice(bytes.substr(0, cut));
    EXPECT_FALSE(ReadStreamAnswerHead(grpc::ByteBuffer(&slice, 1)).has_value()) << cut;
  }
  grpc::Slice group("\x0b\x0c\x0d", 3);  // wire types 3 and 4: deprecated groups, unbalanced
  EXPECT_FALSE(ReadStreamAnswerHead(grpc::ByteBuffer(&group, 1)).has_value());
}

TEST(StreamAnswerHeadTest, WithRequestIdSetsTheIdAndKeepsTheRest) {
  inference::ModelInferRequest request;
  request.set_model_name("matmul");
  request.set_id("old");
  request.add_raw_input_contents("abc");
  for (const std::string id : {"0", "18446744073709551615"}) {
    grpc::ByteBuffer bytes = WithRequestId(Serialized(request), id);
    inference::ModelInferRequest parsed;
    grpc::Slice whole;
    ASSERT_TRUE(bytes.DumpToSingleSlice(&whole).ok());
    ASSERT_TRUE(parsed.ParseFromArray(whole.begin(), static_cast<int>(whole.size())));
    EXPECT_EQ(parsed.id(), id);
    EXPECT_EQ(parsed.model_name(), "matmul");
    EXPECT_EQ(parsed.raw_input_contents(0), "abc");
  }
}

TEST(ParsePerfRangeTest, LevelsFromStartToEndByStep) {
  EXPECT_THAT(*ParsePerfRange("concurrency_range", "1:8:2", true), ElementsAre(1, 3, 5, 7));
  EXPECT_THAT(*ParsePerfRange("concurrency_range", "4", true), ElementsAre(4));
  EXPECT_THAT(*ParsePerfRange("concurrency_range", "2:4", true), ElementsAre(2, 3, 4));
  EXPECT_THAT(*ParsePerfRange("request_rate_range", "0.1:0.3:0.1", false),
              ElementsAre(DoubleEq(0.1), DoubleEq(0.2), DoubleEq(0.3)));
  EXPECT_THAT(*ParsePerfRange("request_rate_range", "100:1000:300", false),
              ElementsAre(100, 400, 700, 1000));
}

TEST(ParsePerfRangeTest, RejectsWhatIsNotARange) {
  for (const char* text : {"", "0", "-1:4", "4:2", "1:4:0", "1:4:-1", "1:2:3:4", "a", "1.5",
                           "1:1000000", "nan", "1:inf"}) {
    absl::StatusOr<std::vector<double>> levels = ParsePerfRange("concurrency_range", text, true);
    EXPECT_EQ(levels.status().code(), absl::StatusCode::kInvalidArgument) << text;
    if (!levels.ok()) {
      EXPECT_THAT(levels.status().message(), HasSubstr("--concurrency_range"));
    }
  }
  for (const char* text : {"0", "nan", "1:inf", "2:1", "1:2:0", "x"}) {
    EXPECT_FALSE(ParsePerfRange("request_rate_range", text, false).ok()) << text;
  }
}

TEST(PerfCsvTest, PerfAnalyzerColumnsARowPerLevel) {
  PerfResult one = SampleResult();
  one.concurrency = 1;
  one.server = ServerBreakdown{100, 120, 0, 600, 0};
  PerfResult two = SampleResult();
  two.concurrency = 2;
  two.latency.reset();
  EXPECT_EQ(PerfCsv({one, two}),
            "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
            "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
            "p50 latency,p90 latency,p95 latency,p99 latency\n"
            "1,1234.50,0,130,120,0,600,0,0,812,1203,1500,2101\n"
            "2,1234.50,0,0,0,0,0,0,0,0,0,0,0\n");
}

TEST(PerfCsvTest, RatesNameTheirColumn) {
  PerfResult r = SampleResult();
  r.open_loop = true;
  r.rate = 250.5;
  const std::string csv = PerfCsv({r});
  EXPECT_EQ(csv.substr(0, csv.find(',')), "Request Rate");
  EXPECT_THAT(csv, HasSubstr("\n250.5,1234.50,"));
}

TEST(PerfResultJsonTest, NoSuccessfulCallsGiveNullLatencies) {
  PerfResult result = SampleResult();
  result.model = "a\"b";
  result.latency.reset();
  const std::string json = PerfResultJson(result);
  EXPECT_THAT(json, HasSubstr("\"model\": \"a\\\"b\""));
  EXPECT_THAT(json, HasSubstr("\"p50_us\": null"));
  EXPECT_THAT(json, HasSubstr("\"mean_us\": null, \"server\": null, \"shared_memory\": \"none\", "
                              "\"protocol\": \"grpc\", \"streaming\": false}"));
}

// --------------------------------------------------------------- load

class RunLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<NoopServer>> server = NoopServer::Start("127.0.0.1", 0);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    absl::StatusOr<Client> client = Client::Connect(server_->address());
    ASSERT_TRUE(client.ok()) << client.status();
    client_.emplace(*std::move(client));
  }

  PerfOptions ShortRun() {
    PerfOptions options;
    options.model = "matmul";
    options.concurrency = 2;
    options.warmup = absl::Milliseconds(50);
    options.duration = absl::Milliseconds(300);
    options.timeout = absl::Seconds(10);
    options.shapes = {{"A", {2, 3}}, {"B", {3, 4}}};
    return options;
  }

  std::vector<HostTensor> Inputs(const PerfOptions& options) {
    absl::StatusOr<inference::ModelMetadataResponse> metadata =
        client_->ModelMetadata("matmul", absl::Seconds(10));
    EXPECT_TRUE(metadata.ok()) << metadata.status();
    absl::StatusOr<std::vector<HostTensor>> inputs = MakePerfInputs(*metadata, nullptr, options);
    EXPECT_TRUE(inputs.ok()) << inputs.status();
    return *std::move(inputs);
  }

  std::unique_ptr<NoopServer> server_;
  std::optional<Client> client_;
};

TEST_F(RunLoadTest, ClosedLoopCountsSuccessfulCalls) {
  const PerfOptions options = ShortRun();
  absl::StatusOr<PerfResult> result = RunLoad(client_->channel(), Inputs(options), options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->ok, 0);
  EXPECT_THAT(result->errors, IsEmpty());
  EXPECT_EQ(result->client_dropped, 0);
  ASSERT_TRUE(result->latency.has_value());
  EXPECT_LE(result->latency->p50_us, result->latency->p99_us);
  EXPECT_DOUBLE_EQ(result->throughput, result->ok / 0.3);
}

TEST_F(RunLoadTest, OpenLoopSendsAtTheRate) {
  PerfOptions options = ShortRun();
  options.rate = 100;
  options.concurrency = 64;
  options.duration = absl::Seconds(1);
  absl::StatusOr<PerfResult> result = RunLoad(client_->channel(), Inputs(options), options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->open_loop);
  // Poisson with mean 100: outside [50, 150] is a 5-sigma event.
  EXPECT_GE(result->ok + result->client_dropped, 50);
  EXPECT_LE(result->ok + result->client_dropped, 150);
}

TEST_F(RunLoadTest, ServerErrorsAreCountedByCode) {
  PerfOptions options = ShortRun();
  std::vector<HostTensor> inputs = Inputs(options);
  options.model = "no_such_model";
  absl::StatusOr<PerfResult> result = RunLoad(client_->channel(), std::move(inputs), options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->ok, 0);
  EXPECT_FALSE(result->latency.has_value());
  ASSERT_EQ(result->errors.count("NOT_FOUND"), 1u);
  EXPECT_GT(result->errors.at("NOT_FOUND"), 0);
}

// No call outlives RunLoad: each holds a reference to the channel (in its
// ClientContext), and one destroyed late on a gRPC thread can drop the last
// one there, where ~Channel deletes the completion queue that very thread
// polls. Large answers make destroying a call slow, so that a call destroyed
// after the run is caught (not every time: it is a race).
TEST_F(RunLoadTest, NoCallOutlivesTheRun) {
  PerfOptions options = ShortRun();
  options.concurrency = 4;
  options.warmup = absl::ZeroDuration();
  options.duration = absl::Milliseconds(20);
  options.shapes = {{"A", {1024, 1}}, {"B", {1, 4096}}};  // Y is 16 MiB
  const std::vector<HostTensor> inputs = Inputs(options);
  const std::shared_ptr<grpc::Channel>& channel = client_->channel();
  const long owners = channel.use_count();
  for (int run = 0; run < 10; ++run) {
    absl::StatusOr<PerfResult> result = RunLoad(channel, inputs, options);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(channel.use_count(), owners) << "after run " << run;
  }
}

TEST(NoopServerTest, RepliesWithZerosOfTheProductShape) {
  absl::StatusOr<std::unique_ptr<NoopServer>> server = NoopServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<Client> client = Client::Connect((*server)->address());
  ASSERT_TRUE(client.ok());
  std::vector<HostTensor> inputs = {{"A", "FP16", {5, 7}, std::string(70, '\1')},
                                    {"B", "FP16", {2, 3}, ""}};  // not checked
  absl::StatusOr<std::vector<HostTensor>> outputs =
      client->Infer("matmul", std::move(inputs), absl::Seconds(10));
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_EQ(outputs->size(), 1u);
  EXPECT_EQ((*outputs)[0].name, "Y");
  EXPECT_EQ((*outputs)[0].datatype, "FP16");
  EXPECT_THAT((*outputs)[0].shape, ElementsAre(5, 3));
  EXPECT_EQ((*outputs)[0].bytes, std::string(30, '\0'));
}

TEST(NoopServerTest, RejectsAHugeOutputBeforeAllocating) {
  absl::StatusOr<std::unique_ptr<NoopServer>> server = NoopServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<Client> client = Client::Connect((*server)->address());
  ASSERT_TRUE(client.ok());
  std::vector<HostTensor> inputs = {{"A", "FP64", {int64_t{1} << 40, 1}, ""},
                                    {"B", "FP64", {1, int64_t{1} << 40}, ""}};
  EXPECT_EQ(client->Infer("matmul", std::move(inputs), absl::Seconds(10)).status().code(),
            absl::StatusCode::kInvalidArgument);  // 2^80 elements overflow int64
  inputs = {{"A", "FP64", {1 << 20, 1}, ""}, {"B", "FP64", {1, 1 << 20}, ""}};
  EXPECT_EQ(client->Infer("matmul", std::move(inputs), absl::Seconds(10)).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(NoopServerTest, MetadataMatchesTheBuiltInMatMul) {
  absl::StatusOr<std::unique_ptr<NoopServer>> server = NoopServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<Client> client = Client::Connect((*server)->address());
  ASSERT_TRUE(client.ok());
  absl::StatusOr<inference::ModelMetadataResponse> metadata =
      client->ModelMetadata("matmul", absl::Seconds(10));
  ASSERT_TRUE(metadata.ok()) << metadata.status();
  ASSERT_EQ(metadata->inputs_size(), 2);
  EXPECT_EQ(metadata->inputs(0).name(), "A");
  EXPECT_EQ(metadata->inputs(1).name(), "B");
  EXPECT_EQ(metadata->inputs(0).datatype(), "FP32");
  EXPECT_THAT(metadata->inputs(0).shape(), ElementsAre(-1, -1));
  ASSERT_EQ(metadata->outputs_size(), 1);
  EXPECT_EQ(metadata->outputs(0).name(), "Y");
  EXPECT_TRUE(client->ModelConfig("matmul", absl::Seconds(10)).ok());
  EXPECT_EQ(client->ModelMetadata("other", absl::Seconds(10)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(*client->ServerLive(absl::Seconds(10)), true);
  EXPECT_EQ(*client->ServerReady(absl::Seconds(10)), true);
}

TEST(PerfInputDataTest, EveryFormOfPerfAnalyzersFileIsRead) {
  PerfOptions options;
  options.shapes = {{"A", {3, 1}}};
  // A resident model: A is [-1, 2] FP32, idx [-1, 1] INT64, b optional BF16.
  const inference::ModelMetadataResponse md =
      Metadata("moe", {{"A", "FP32", {-1, 2}}, {"idx", "INT64", {-1, 1}}, {"b", "BF16", {2}}});
  inference::ModelConfig config;
  for (const char* name : {"A", "idx", "b"}) {
    inference::ModelInput* in = config.add_input();
    in->set_name(name);
    in->set_optional(std::string(name) == "b");
  }
  // 1.0f and 2.0f little-endian, base64.
  const std::string json = R"({"data": [
      {"A": {"content": [[1, 2], [3, 4]], "shape": [2, 2]}, "idx": [0, 1]},
      {"A": {"b64": "AACAPwAAAEA=", "shape": [1, 2]}, "idx": [[7]], "b": [1.5, -2]},
      {"A": [0.5, 0.25, 0.125], "idx": {"content": [0, 0, 0]}}
  ]})";
  absl::StatusOr<std::vector<std::vector<HostTensor>>> pool =
      ParsePerfInputData(json, md, &config, options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_EQ(pool->size(), 3u);
  const std::vector<HostTensor>& r0 = (*pool)[0];
  ASSERT_EQ(r0.size(), 2u);  // b is optional and not given
  EXPECT_EQ(r0[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Values<float>(r0[0]), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(r0[1].shape, (std::vector<int64_t>{2, 1}));  // -1 from the count
  EXPECT_EQ(Values<int64_t>(r0[1]), (std::vector<int64_t>{0, 1}));
  const std::vector<HostTensor>& r1 = (*pool)[1];
  ASSERT_EQ(r1.size(), 3u);
  EXPECT_EQ(Values<float>(r1[0]), (std::vector<float>{1, 2}));
  EXPECT_EQ(r1[2].datatype, "BF16");
  EXPECT_EQ(Values<uint16_t>(r1[2]), (std::vector<uint16_t>{0x3fc0, 0xc000}));
  // No "shape": --shape's, then the model's with its variable dimension filled.
  EXPECT_EQ((*pool)[2][0].shape, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ((*pool)[2][1].shape, (std::vector<int64_t>{3, 1}));
}

TEST(PerfInputDataTest, EveryFaultIsNamed) {
  PerfOptions options;
  const inference::ModelMetadataResponse md =
      Metadata("m", {{"A", "FP32", {-1, 2}}, {"i", "INT32", {-1}}, {"v", "FP32", {-1, -1}}});
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[1, 2]", "expected an object with \"data\""},
      {"{\"data\": []}", "\"data\" must be a non-empty array"},
      {"{\"data\": [{}], \"validation_data\": []}", "\"validation_data\" is not supported"},
      {"{\"dta\": []}", "unknown field \"dta\""},
      {"{\"data\": [{\"A\": [1, 2], \"i\": [1], \"v\": {\"content\": [1], \"shape\": [1, 1]},"
       " \"Z\": [1]}]}",
       "request 0: model 'm' has no input 'Z'"},
      {"{\"data\": [{\"i\": [1], \"v\": [[1]]}]}", "request 0, input 'A': missing"},
      {"{\"data\": [{\"A\": [1, 2, 3], \"i\": [1]}]}", "3 elements do not fill the model's shape"},
      {"{\"data\": [{\"A\": [1, 2], \"i\": [1.5], \"v\": {\"content\": [1], \"shape\": [1, 1]}}]}",
       "element 0 is not a INT32 value"},
      {"{\"data\": [{\"A\": [1, 2], \"i\": [4294967296], \"v\": {\"content\": [1], "
       "\"shape\": [1, 1]}}]}",
       "element 0 is not a INT32 value"},
      {"{\"data\": [{\"A\": [1, 2], \"i\": [1], \"v\": [1]}]}",
       "has several variable dimensions; give \"shape\" or --shape"},
      {"{\"data\": [{\"A\": {\"content\": [1, 2], \"shape\": [3, 2]}, \"i\": [1], \"v\": [[1]]}]}",
       "2 elements, but shape [3,2] holds 6"},
      {"{\"data\": [{\"A\": {\"b64\": \"AAAA\"}, \"i\": [1], \"v\": [[1]]}]}",
       "3 bytes are not whole FP32 elements"},
      {"{\"data\": [{\"A\": {\"b64\": \"!!\"}, \"i\": [1], \"v\": [[1]]}]}", "is not base64"},
      {"{\"data\": [{\"A\": {\"content\": [1, 2], \"b64\": \"\"}, \"i\": [1], \"v\": [[1]]}]}",
       "give one of \"content\" and \"b64\""},
      {"{\"data\": [{\"A\": {\"content\": [1, 2], \"shape\": [-1, 2]}, \"i\": [1]}]}",
       "\"shape\" holds non-negative integers"},
      {"{\"data\": [{\"A\": [\"1\", 2], \"i\": [1]}]}", "expected a (rectangular) array"},
      {"{\"data\": [{\"A\": [[1, 2], [3]], \"i\": [1]}]}", "expected a (rectangular) array"},
      {"{\"data\": [{\"A\": [[1, 2], 3], \"i\": [1]}]}", "expected a (rectangular) array"},
      {absl::StrCat("{\"data\": [{\"A\": ", std::string(100000, '['), std::string(100000, ']'),
                    "}]}"),
       "expected a (rectangular) array"},
      {"{\"data\": [{\"A\": [1, 2], \"i\": [1]", "not JSON at offset"},
  };
  for (const auto& [json, message] : cases) {
    absl::StatusOr<std::vector<std::vector<HostTensor>>> pool =
        ParsePerfInputData(json, md, nullptr, options);
    ASSERT_FALSE(pool.ok()) << json;
    EXPECT_EQ(pool.status().code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_THAT(std::string(pool.status().message()), HasSubstr(message)) << json;
  }
  EXPECT_EQ(ReadPerfInputData("/nonexistent/input.json", md, nullptr, options).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadPerfInputData("/tmp", md, nullptr, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gemmserve::client
