#include "server/http/infer_json.h"
#include "server/http/json_numbers.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

using ::testing::HasSubstr;

absl::Status Decode(const std::string& body, HttpInferRequest* r,
                    std::optional<int64_t> header_length = std::nullopt) {
  r->body = body;
  return DecodeInferRequestJson("matmul", "", header_length, r);
}

template <typename T>
std::vector<T> Values(const InputTensorView& t) {
  EXPECT_EQ(t.contents, ContentsKind::kRaw);
  std::vector<T> v(static_cast<size_t>(t.count) / sizeof(T));
  std::memcpy(v.data(), t.data, v.size() * sizeof(T));
  return v;
}

TEST(InferJson, FlatAndNestedDataInAnyFieldOrder) {
  HttpInferRequest r;
  ASSERT_TRUE(Decode(R"({"id":"7","inputs":[
      {"name":"A","shape":[2,3],"datatype":"FP32","data":[1,2,3,4,5,6.5]},
      {"data":[[1,2],[3,4],[5,6]],"name":"B","datatype":"INT64","shape":[3,2]}],
      "outputs":[{"name":"Y","parameters":{"binary_data":true}}],
      "parameters":{"priority":2,"timeout":100}})",
                     &r)
                  .ok());
  ASSERT_EQ(r.view.inputs.size(), 2u);
  EXPECT_EQ(r.view.id, "7");
  EXPECT_EQ(r.view.priority, 2u);
  EXPECT_EQ(r.view.timeout_us, 100u);
  EXPECT_FALSE(r.view.may_run_inline);
  EXPECT_EQ(r.view.inputs[0].name, "A");
  EXPECT_EQ(Values<float>(r.view.inputs[0]), (std::vector<float>{1, 2, 3, 4, 5, 6.5f}));
  // B's data came before its datatype and shape: filled by the second pass.
  EXPECT_EQ(Values<int64_t>(r.view.inputs[1]), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_THAT(r.view.inputs[1].shape, ::testing::ElementsAre(3, 2));
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_TRUE(r.outputs[0].binary);
  ASSERT_EQ(r.view.requested_outputs.size(), 1u);
  EXPECT_EQ(r.view.requested_outputs[0], "Y");
}

// The fast path for data arrays (every number after an array's first is
// read without RapidJSON's scanner) against RapidJSON's own, on numbers and
// near-numbers at every position: same status and message, same bytes.
TEST(InferJson, DataNumberScanAgreesWithRapidJsonEverywhere) {
  const std::vector<std::string> elements = {
      "0", "-0", "1", "-1", "12345678901234567890123", "1.5", "-0.25", "1e5", "1E+05", "1e-05",
      "2.5e38", "1e99", "1e100", "1e308", "1e309", "1e-400", "3.4028236e38", "NaN", "-Infinity",
      "Infinity", "01", "1.", ".5", "-", "1e", "1e+", "+1", "0x10", "1.5.2", "\"1\"", "[1]", "true",
      "null", "1 ", " 1", "\t2\n", "65536", "-2147483649", "4294967296",
      // integer parts around RapidJSON's "number too big" (about 309 digits)
      std::string(300, '7'), std::string(301, '7'), std::string(400, '6') + ".5",
      "-" + std::string(350, '3')};
  const std::vector<std::string> types = {"FP32",  "FP64",  "BF16",   "FP16",
                                          "INT32", "INT64", "UINT32", "UINT64"};
  int compared = 0;
  for (const std::string& type : types) {
    for (const std::string& a : elements) {
      for (const std::string& b : elements) {
        for (const std::string& tail : {std::string("]"), std::string(",]"), std::string(",")}) {
          const std::string body =
              absl::StrCat(R"({"inputs":[{"name":"A","shape":[3],"datatype":")", type,
                           R"(","data":[1,)", a, ",", b, tail, "}]}");
          HttpInferRequest fast, reference;
          fast.body = reference.body = body;
          const absl::Status s = DecodeInferRequestJson("matmul", "", std::nullopt, &fast);
          const absl::Status r =
              DecodeInferRequestJsonWithoutNumberScan("matmul", "", std::nullopt, &reference);
          ASSERT_EQ(s.ToString(), r.ToString()) << body;
          ASSERT_EQ(fast.json_data, reference.json_data) << body;
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 8 * 43 * 43 * 3);
}

TEST(InferJson, BinaryTensorsFollowTheHeaderInInputOrder) {
  const std::string header = R"({"inputs":[
      {"name":"A","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}},
      {"name":"B","shape":[1],"datatype":"FP64","data":[0.25]},
      {"name":"C","shape":[3],"datatype":"INT32","parameters":{"binary_data_size":12}}],
      "parameters":{"binary_data_output":true}})";
  std::string body = header;
  const float a[2] = {1.5f, -2};
  const int32_t c[3] = {7, 8, 9};
  body.append(reinterpret_cast<const char*>(a), sizeof a);
  body.append(reinterpret_cast<const char*>(c), sizeof c);
  HttpInferRequest r;
  ASSERT_TRUE(Decode(body, &r, header.size()).ok());
  EXPECT_EQ(Values<float>(r.view.inputs[0]), (std::vector<float>{1.5f, -2}));
  EXPECT_EQ(Values<double>(r.view.inputs[1]), (std::vector<double>{0.25}));
  EXPECT_EQ(Values<int32_t>(r.view.inputs[2]), (std::vector<int32_t>{7, 8, 9}));
  EXPECT_TRUE(r.binary_data_output);

  // H4: a header length past the body or negative; sizes past the body;
  // bytes left over.
  EXPECT_THAT(Decode(body, &r, body.size() + 1).message(), HasSubstr("not within the body"));
  HttpInferRequest r2;
  EXPECT_THAT(Decode(body, &r2, -1).message(), HasSubstr("not within the body"));
  HttpInferRequest r3;
  EXPECT_THAT(Decode(body.substr(0, body.size() - 1), &r3, header.size()).message(),
              HasSubstr("goes past the end"));
  HttpInferRequest r4;
  EXPECT_THAT(Decode(body + "x", &r4, header.size()).message(), HasSubstr("bytes after"));
}

struct BadCase {
  const char* body;
  const char* message;
};

TEST(InferJson, MalformedRequestsNameTheFault) {
  const BadCase cases[] = {
      {"", "empty"},
      {"{", "malformed JSON"},
      {R"({"inputs":[]} x)", "malformed JSON"},
      {"[1]", "must be a JSON object"},
      {R"({"inputs":{}})", "unexpected an object for 'inputs'"},
      {R"({"inputs":[1]})", "must be an object"},
      {R"({"bogus":1})", "unknown field 'bogus'"},
      {R"({"id":1})", "expected a string"},
      {R"({"inputs":[{"name":"A","shape":[2],"datatype":"FP32","data":[1,"2"]}]})",
       "expected numbers, got a string"},
      {R"({"inputs":[{"name":"A","shape":[2],"datatype":"FP32","data":[true,1]}]})",
       "expected numbers, got a boolean"},
      {R"({"inputs":[{"name":"A","shape":[2],"datatype":"INT32","data":[1,2147483648]}]})",
       "out of range for INT32"},
      {R"({"inputs":[{"name":"A","shape":[1],"datatype":"UINT32","data":[-1]}]})",
       "out of range for UINT32"},
      {R"({"inputs":[{"name":"A","shape":[1],"datatype":"INT64","data":[1.5]}]})",
       "not an integer"},
      {R"({"inputs":[{"name":"A","shape":[1],"datatype":"FP32","data":[1e39]}]})",
       "out of range for FP32"},
      {R"({"inputs":[{"name":"A","shape":[1],"datatype":"FP16","data":[65520]}]})",
       "out of range for FP16"},
      {R"({"inputs":[{"name":"A","shape":[1],"datatype":"FP64","data":[1e309]}]})",
       "out of range for every datatype"},  // RapidJSON's NumberTooBig, in our words
      {R"({"inputs":[{"name":"A","shape":[2,2],"datatype":"FP32","data":[[1,2],[3]]}]})", "ragged"},
      {R"({"inputs":[{"name":"A","shape":[2,2],"datatype":"FP32","data":[[1,2],3,4]}]})",
       "mixes numbers and arrays"},
      {R"({"inputs":[{"name":"A","shape":[2,2],"datatype":"FP32","data":[1,[2]]}]})",
       "mixes numbers and arrays"},
      {R"({"inputs":[{"name":"A","shape":[3,2],"datatype":"FP32","data":[[1,2,3],[4,5,6]]}]})",
       "nested as [2,3] but its shape is [3,2]"},
      {R"({"inputs":[{"name":"A","shape":[2,2],"datatype":"FP32","data":[1,2,3]}]})",
       "expected 4 elements"},
      {R"({"inputs":[{"name":"A","shape":[2],"datatype":"FP32","data":[1,2,3]}]})",
       "more than the 2 elements"},
      {R"({"inputs":[{"name":"A","shape":[1],"datatype":"FP32","data":[1],"data":[1]}]})",
       "'data' appears twice"},
      {R"({"inputs":[{"name":"A","shape":[1],"datatype":"FP32","data":[1],
           "parameters":{"binary_data_size":4}}]})",
       "both 'data' and binary_data_size"},
      {R"({"inputs":[{"name":"A","shape":[1e3],"datatype":"FP32","data":[1]}]})",
       "expected integers"},
      {R"({"parameters":{"priority":-1}})", "non-negative integer"},
      {R"({"outputs":[{"name":"Y","parameters":{"classification":2}}]})", "classification"},
      {R"({"inputs":[{"name":"A","shape":[1000000000,1000000000],"datatype":"FP32","data":[1]}]})",
       "expected 1000000000000000000 elements"},
  };
  for (const BadCase& c : cases) {
    HttpInferRequest r;
    absl::Status s = Decode(c.body, &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.body;
  }
}

TEST(InferJson, DeepNestingAndHugeShapesAreCheap) {
  // H2: 10^5 deep; a million-dimension shape; more inputs than the cap.
  std::string deep = R"({"inputs":[{"name":"A","shape":[1],"datatype":"FP32","data":)";
  deep += std::string(100000, '[') + "1" + std::string(100000, ']') + "}]}";
  HttpInferRequest r;
  EXPECT_THAT(Decode(deep, &r).message(), HasSubstr("nested deeper than the maximum rank"));
  std::string root_deep = std::string(100000, '[') + std::string(100000, ']');
  HttpInferRequest r1;
  EXPECT_THAT(Decode(root_deep, &r1).message(), HasSubstr("must be a JSON object"));
  std::string dims = R"({"inputs":[{"name":"A","datatype":"FP32","shape":[)";
  for (int i = 0; i < 1000000; ++i) absl::StrAppend(&dims, i ? ",1" : "1");
  dims += "]}]}";
  HttpInferRequest r2;
  EXPECT_THAT(Decode(dims, &r2).message(), HasSubstr("exceeds the maximum rank"));
  std::string many = R"({"inputs":[)";
  for (int i = 0; i < 1000000; ++i) absl::StrAppend(&many, i ? ",{}" : "{}");
  many += "]}";
  HttpInferRequest r3;
  EXPECT_THAT(Decode(many, &r3).message(), HasSubstr("more than 1024 inputs"));
}

TEST(InferJson, InvalidDatatypeOrShapeIsLeftToTheEngine) {
  // The engine's own check names these, as it does for gRPC.
  HttpInferRequest r;
  ASSERT_TRUE(
      Decode(R"({"inputs":[{"name":"A","shape":[1],"datatype":"FP8","data":[1]}]})", &r).ok());
  EXPECT_EQ(r.view.inputs[0].datatype, "FP8");
  EXPECT_EQ(r.view.inputs[0].count, 0);
  HttpInferRequest r2;
  ASSERT_TRUE(
      Decode(R"({"inputs":[{"name":"A","shape":[-1],"datatype":"FP32","data":[1]}]})", &r2).ok());
  EXPECT_EQ(r2.view.inputs[0].shape[0], -1);
}

TEST(InferJson, HalfTypesRoundToNearestEven) {
  uint16_t h;
  ASSERT_TRUE(DoubleToHalf(1.0 + 1.0 / 2048, &h));  // a tie between 1 and 1+2^-10
  EXPECT_EQ(h, 0x3c00);
  ASSERT_TRUE(DoubleToHalf(1.0 + 1.0 / 2048 + 1e-12, &h));  // just above the tie
  EXPECT_EQ(h, 0x3c01);
  ASSERT_TRUE(DoubleToHalf(65504, &h));
  EXPECT_EQ(h, 0x7bff);
  EXPECT_FALSE(DoubleToHalf(65520, &h));
  ASSERT_TRUE(DoubleToHalf(std::numeric_limits<double>::infinity(), &h));
  EXPECT_EQ(h, 0x7c00);
  ASSERT_TRUE(DoubleToBFloat16(1.0 + 1.0 / 256, &h));  // tie: to even
  EXPECT_EQ(h, 0x3f80);
  ASSERT_TRUE(
      DoubleToBFloat16(1.0 + 1.0 / 256 + 1e-15, &h));  // above: double rounding would miss it
  EXPECT_EQ(h, 0x3f81);
  ASSERT_TRUE(DoubleToBFloat16(1e-45, &h));
  EXPECT_EQ(h, 0);
}

TEST(InferJson, SpecialValuesAndSubnormalsPass) {
  HttpInferRequest r;
  ASSERT_TRUE(Decode(R"({"inputs":[{"name":"A","shape":[5],"datatype":"FP32",
      "data":[NaN,Infinity,-Infinity,1e-45,1e-50]}]})",
                     &r)
                  .ok());
  std::vector<float> v = Values<float>(r.view.inputs[0]);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], std::numeric_limits<float>::infinity());
  EXPECT_EQ(v[2], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(v[3], std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(v[4], 0.0f);
}

Tensor MakeTensor(DataType t, const Shape& shape) {
  absl::StatusOr<Tensor> x = Tensor::Zeros(t, shape);
  EXPECT_TRUE(x.ok());
  return *std::move(x);
}

Tensor Copy(const Tensor& t) {
  Tensor c = MakeTensor(t.type(), t.shape());
  std::memcpy(c.raw_data(), t.raw_data(), static_cast<size_t>(t.byte_size()));
  return c;
}

// Property: every datatype's values, written as JSON by the encoder, read
// back by the decoder bit for bit (NaN payloads aside).
TEST(InferJson, EncodeThenDecodeIsExactForEveryDatatype) {
  std::mt19937_64 rng(5);
  for (DataType type : kAllDataTypes) {
    Tensor t = MakeTensor(type, Shape{3, 37});
    uint8_t* bytes = static_cast<uint8_t*>(t.raw_data());
    for (int64_t i = 0; i < t.byte_size(); ++i) bytes[i] = static_cast<uint8_t>(rng());
    // No NaNs: their payloads are not kept by text.
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      if (type == DataType::kFP32 && std::isnan(t.data<float>()[i])) t.data<float>()[i] = 1;
      if (type == DataType::kFP64 && std::isnan(t.data<double>()[i])) t.data<double>()[i] = 1;
      if (type == DataType::kBF16 && std::isnan(BFloat16ToFloat(t.data<uint16_t>()[i]))) {
        t.data<uint16_t>()[i] = 0x3f80;
      }
      if (type == DataType::kFP16 && std::isnan(HalfToFloat(t.data<uint16_t>()[i]))) {
        t.data<uint16_t>()[i] = 0x3c00;
      }
    }
    InferResult result;
    result.model_name = "m";
    result.model_version = "1";
    result.outputs.push_back({"Y", Copy(t)});
    HttpInferRequest request;
    HttpResponseBody out;
    ASSERT_TRUE(EncodeInferResponseJson(result, request, &out).ok());
    EXPECT_FALSE(out.header_length);
    rapidjson::Document doc;
    doc.Parse<rapidjson::kParseNanAndInfFlag>(out.body.c_str());
    ASSERT_FALSE(doc.HasParseError()) << out.body.substr(0, 200);
    const auto& o = doc["outputs"][0];
    EXPECT_EQ(std::string(o["datatype"].GetString()), DataTypeName(type));
    // Feed the output back as an input.
    const size_t data_at = out.body.find("\"data\":");
    ASSERT_NE(data_at, std::string::npos);
    const std::string data = out.body.substr(data_at + 7, out.body.rfind("}]}") - data_at - 7);
    HttpInferRequest back;
    ASSERT_TRUE(Decode(absl::StrCat(R"({"inputs":[{"name":"A","shape":[3,37],"datatype":")",
                                    DataTypeName(type), R"(","data":)", data, "}]}"),
                       &back)
                    .ok())
        << DataTypeName(type);
    ASSERT_EQ(back.view.inputs[0].count, t.byte_size());
    EXPECT_EQ(std::memcmp(back.view.inputs[0].data, t.raw_data(), t.byte_size()), 0)
        << DataTypeName(type);
  }
}

TEST(InferJson, BinaryOutputsFollowTheHeader) {
  Tensor t = MakeTensor(DataType::kFP32, Shape{2});
  t.data<float>()[0] = 1;
  t.data<float>()[1] = 2;
  Tensor u = MakeTensor(DataType::kINT32, Shape{1});
  u.data<int32_t>()[0] = -3;
  InferResult result;
  result.model_name = "m\"q";
  result.outputs.push_back({"Y", Copy(t)});
  result.outputs.push_back({"Z", Copy(u)});
  HttpInferRequest request;
  request.id = "abc";
  request.outputs.push_back({"Y", true});
  HttpResponseBody out;
  ASSERT_TRUE(EncodeInferResponseJson(result, request, &out).ok());
  ASSERT_TRUE(out.header_length);
  const std::string header = out.body.substr(0, *out.header_length);
  EXPECT_THAT(header, HasSubstr(R"("model_name":"m\"q")"));
  EXPECT_THAT(header, HasSubstr(R"("id":"abc")"));
  EXPECT_THAT(
      header,
      HasSubstr(
          R"({"name":"Y","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}})"));
  EXPECT_THAT(header, HasSubstr(R"({"name":"Z","datatype":"INT32","shape":[1],"data":[-3]})"));
  ASSERT_EQ(out.body.size(), *out.header_length + 8);
  EXPECT_EQ(std::memcmp(out.body.data() + *out.header_length, t.raw_data(), 8), 0);
}

TEST(InferJson, NumbersAreShortest) {
  std::string s;
  AppendJsonNumber(0.1f, &s);
  EXPECT_EQ(s, "0.1");
  s.clear();
  AppendJsonNumber(std::numeric_limits<double>::quiet_NaN(), &s);
  EXPECT_EQ(s, "NaN");
}

TEST(InferJson, SharedMemoryParametersReferToRegionsAndCarryNoBytes) {
  HttpInferRequest r;
  ASSERT_TRUE(Decode(R"({"inputs":[
      {"name":"A","shape":[2,3],"datatype":"FP32",
       "parameters":{"shared_memory_region":"in","shared_memory_byte_size":24,
                     "shared_memory_offset":64,"other":1}},
      {"name":"B","shape":[3,1],"datatype":"FP32","data":[1,2,3]}],
    "outputs":[{"name":"Y","parameters":{"binary_data":true,
                "shared_memory_region":"out","shared_memory_byte_size":8}},
               {"name":"Z"}]})",
                     &r)
                  .ok());
  ASSERT_EQ(r.view.inputs.size(), 2u);
  const InputTensorView& a = r.view.inputs[0];
  ASSERT_TRUE(a.shm);
  EXPECT_EQ(a.contents, ContentsKind::kNone);
  EXPECT_EQ(a.shm->region, "in");
  EXPECT_EQ(a.shm->offset, 64u);
  EXPECT_EQ(a.shm->byte_size, 24u);
  EXPECT_FALSE(r.view.inputs[1].shm);
  EXPECT_EQ(Values<float>(r.view.inputs[1]), (std::vector<float>{1, 2, 3}));
  ASSERT_EQ(r.view.output_shm.size(), 1u);
  EXPECT_EQ(r.view.output_shm[0].name, "Y");
  EXPECT_EQ(r.view.output_shm[0].ref.region, "out");
  EXPECT_EQ(r.view.output_shm[0].ref.offset, 0u);
  EXPECT_FALSE(r.outputs[0].binary);    // the region takes its bytes
  EXPECT_NE(r.view.output_element_bytes, nullptr);  // Z is JSON numbers

  struct Case {
    std::string body, message;
  };
  const std::string b = R"({"name":"B","shape":[1],"datatype":"FP32","data":[1]})";
  for (const Case& c : std::vector<Case>{
           {R"({"inputs":[{"name":"A","shape":[1],"datatype":"FP32",
                "parameters":{"shared_memory_region":"in"}}]})",
            "input 'A' needs both shared_memory_region and shared_memory_byte_size"},
           {R"({"inputs":[{"name":"A","shape":[1],"datatype":"FP32",
                "parameters":{"shared_memory_offset":4}}]})",
            "shared_memory_offset without shared_memory_region"},
           {R"({"inputs":[{"name":"A","shape":[1],"datatype":"FP32","data":[1],
                "parameters":{"shared_memory_region":"in","shared_memory_byte_size":4}}]})",
            "has 'data' and shared memory parameters"},
           {R"({"inputs":[{"name":"A","shape":[1],"datatype":"FP32",
                "parameters":{"shared_memory_region":7,"shared_memory_byte_size":4}}]})",
            "'shared_memory_region' in input 'A': expected a string"},
           {R"({"inputs":[{"name":"A","shape":[1],"datatype":"FP32",
                "parameters":{"shared_memory_region":"r","shared_memory_byte_size":-4}}]})",
            "parameter 'shared_memory_byte_size': expected a non-negative integer"},
           {R"({"inputs":[{"name":"A","shape":[1],"datatype":"FP32",
                "parameters":{"shared_memory_region":"r","shared_memory_region":"s",
                              "shared_memory_byte_size":4}}]})",
            "'shared_memory_region' appears twice"},
           {absl::StrCat(R"({"inputs":[)", b, R"(],"outputs":[{"name":"Y",
                "parameters":{"shared_memory_byte_size":4}}]})"),
            "requested output 'Y' needs both shared_memory_region and shared_memory_byte_size"},
           {absl::StrCat(R"({"inputs":[)", b, R"(],"outputs":[{"name":"Y",
                "parameters":{"shared_memory_region":"o","shared_memory_byte_size":1.5}}]})"),
            "expected a non-negative integer"},
       }) {
    HttpInferRequest bad;
    const absl::Status s = Decode(c.body, &bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.body;
  }
}

TEST(InferJson, AnOutputWrittenToSharedMemoryIsAnsweredWithItsWindow) {
  Tensor t = MakeTensor(DataType::kFP32, Shape{2});
  t.data<float>()[0] = 1;
  t.data<float>()[1] = 2;
  InferResult result;
  result.model_name = "m";
  result.outputs.push_back({"Y", Copy(t)});
  result.outputs.back().shm = SharedMemoryWritten{"out\"r", 16, 8};
  result.outputs.push_back({"Z", Copy(t)});
  HttpInferRequest request;
  request.binary_data_output = true;
  HttpResponseBody out;
  ASSERT_TRUE(EncodeInferResponseJson(result, request, &out).ok());
  ASSERT_TRUE(out.header_length);
  const std::string header = out.body.substr(0, *out.header_length);
  EXPECT_THAT(header, HasSubstr(R"({"name":"Y","datatype":"FP32","shape":[2],"parameters":)"
                                R"({"shared_memory_region":"out\"r","shared_memory_byte_size":8,)"
                                R"("shared_memory_offset":16}})"));
  // Only Z's bytes follow the header.
  EXPECT_EQ(out.body.size(), *out.header_length + 8);
}

}  // namespace
}  // namespace gemmserve
