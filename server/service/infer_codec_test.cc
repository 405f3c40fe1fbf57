#include "server/service/infer_codec.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "server/models/builtin_models.h"

namespace gemmserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

using InputTensor = inference::ModelInferRequest::InferInputTensor;

InputTensor* AddInput(inference::ModelInferRequest* request, const std::string& name,
                      const std::string& datatype, std::vector<int64_t> shape) {
  InputTensor* input = request->add_inputs();
  input->set_name(name);
  input->set_datatype(datatype);
  for (int64_t d : shape) input->add_shape(d);
  return input;
}

std::string DecodeError(const inference::ModelInferRequest& request) {
  absl::StatusOr<InferRequestView> view = DecodeInferRequest(request);
  EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument) << view.status();
  return std::string(view.status().message());
}

// --- DecodeInferRequest -------------------------------------------------------------------

TEST(DecodeInferRequestTest, RawInputsAreViewedNotCopied) {
  inference::ModelInferRequest request;
  request.set_model_name("matmul");
  request.set_model_version("1");
  AddInput(&request, "A", "FP32", {2, 3});
  AddInput(&request, "B", "FP16", {3});
  request.add_raw_input_contents(std::string(24, 'a'));
  request.add_raw_input_contents(std::string(6, 'b'));
  absl::StatusOr<InferRequestView> view = DecodeInferRequest(request);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->model_name, "matmul");
  EXPECT_EQ(view->model_version, "1");
  ASSERT_EQ(view->inputs.size(), 2u);
  const InputTensorView& a = view->inputs[0];
  EXPECT_EQ(a.name, "A");
  EXPECT_EQ(a.datatype, "FP32");
  EXPECT_THAT(a.shape, ElementsAre(2, 3));
  EXPECT_EQ(a.contents, ContentsKind::kRaw);
  EXPECT_EQ(a.data, request.raw_input_contents(0).data());
  EXPECT_EQ(a.count, 24);
  EXPECT_EQ(a.shape.data(), request.inputs(0).shape().data());
  EXPECT_EQ(view->inputs[1].data, request.raw_input_contents(1).data());
  EXPECT_EQ(view->inputs[1].count, 6);
  EXPECT_THAT(view->requested_outputs, IsEmpty());
}

void SetShm(google::protobuf::Map<std::string, inference::InferParameter>* params,
            const std::string& region, int64_t size, int64_t offset = -1) {
  (*params)["shared_memory_region"].set_string_param(region);
  (*params)["shared_memory_byte_size"].set_int64_param(size);
  if (offset >= 0) (*params)["shared_memory_offset"].set_uint64_param(offset);
}

TEST(DecodeInferRequestTest, SharedMemoryInputsAndOutputsAreReferences) {
  inference::ModelInferRequest request;
  SetShm(AddInput(&request, "A", "FP32", {2, 3})->mutable_parameters(), "in", 24, 8);
  AddInput(&request, "B", "FP32", {3});
  request.add_raw_input_contents(std::string(12, 'b'));  // pairs with B, the one not in shm
  auto* y = request.add_outputs();
  y->set_name("Y");
  SetShm(y->mutable_parameters(), "out", 100);
  absl::StatusOr<InferRequestView> view = DecodeInferRequest(request);
  ASSERT_TRUE(view.ok()) << view.status();
  const InputTensorView& a = view->inputs[0];
  EXPECT_EQ(a.contents, ContentsKind::kNone);
  ASSERT_TRUE(a.shm.has_value());
  EXPECT_EQ(a.shm->region, "in");
  EXPECT_EQ(a.shm->byte_size, 24u);
  EXPECT_EQ(a.shm->offset, 8u);
  EXPECT_EQ(view->inputs[1].data, request.raw_input_contents(0).data());
  EXPECT_EQ(view->message_bytes, 12);
  ASSERT_EQ(view->output_shm.size(), 1u);
  EXPECT_EQ(view->output_shm[0].name, "Y");
  EXPECT_EQ(view->output_shm[0].ref.region, "out");
  EXPECT_EQ(view->output_shm[0].ref.byte_size, 100u);
  EXPECT_EQ(view->output_shm[0].ref.offset, 0u);
  EXPECT_THAT(view->requested_outputs, ElementsAre("Y"));
}

TEST(DecodeInferRequestTest, SharedMemoryParametersMustBeWhole) {
  auto decode = [](auto edit) {
    inference::ModelInferRequest request;
    InputTensor* a = AddInput(&request, "A", "FP32", {1});
    SetShm(a->mutable_parameters(), "r", 4);
    edit(request, *a->mutable_parameters());
    return DecodeError(request);
  };
  using Params = google::protobuf::Map<std::string, inference::InferParameter>;
  EXPECT_THAT(decode([](auto&, Params& p) { p.erase("shared_memory_byte_size"); }),
              HasSubstr("needs both"));
  EXPECT_THAT(decode([](auto&, Params& p) { p.erase("shared_memory_region"); }),
              HasSubstr("needs both"));
  EXPECT_THAT(decode([](auto&, Params& p) {
                p.erase("shared_memory_region");
                p.erase("shared_memory_byte_size");
                p["shared_memory_offset"].set_int64_param(0);
              }),
              HasSubstr("without shared_memory_region"));
  EXPECT_THAT(decode([](auto&, Params& p) { p["shared_memory_region"].set_int64_param(1); }),
              HasSubstr("must be a string"));
  EXPECT_THAT(decode([](auto&, Params& p) { p["shared_memory_byte_size"].set_int64_param(-1); }),
              HasSubstr("non-negative integer"));
  EXPECT_THAT(decode([](auto&, Params& p) { p["shared_memory_offset"].set_bool_param(true); }),
              HasSubstr("non-negative integer"));
  EXPECT_THAT(decode([](inference::ModelInferRequest& r, Params&) {
                r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
              }),
              HasSubstr("send its bytes one way"));
  EXPECT_THAT(decode([](inference::ModelInferRequest& r, Params&) {
                r.add_raw_input_contents(std::string(4, '\0'));
              }),
              HasSubstr("0 inputs outside shared memory"));
}

TEST(DecodeInferRequestTest, EmptyRequestDecodesToNoInputs) {
  inference::ModelInferRequest request;
  absl::StatusOr<InferRequestView> view = DecodeInferRequest(request);
  ASSERT_TRUE(view.ok());
  EXPECT_TRUE(view->model_name.empty());
  EXPECT_THAT(view->inputs, IsEmpty());
}

TEST(DecodeInferRequestTest, E3FewerRawContentsThanInputs) {
  inference::ModelInferRequest request;
  AddInput(&request, "A", "FP32", {1});
  AddInput(&request, "B", "FP32", {1});
  request.add_raw_input_contents(std::string(4, '\0'));
  EXPECT_THAT(DecodeError(request),
              AllOf(HasSubstr("2 inputs"), HasSubstr("1 raw_input_contents")));
}

TEST(DecodeInferRequestTest, E3MoreRawContentsThanInputs) {
  inference::ModelInferRequest request;
  AddInput(&request, "A", "FP32", {1});
  request.add_raw_input_contents(std::string(4, '\0'));
  request.add_raw_input_contents(std::string(4, '\0'));
  EXPECT_THAT(DecodeError(request),
              AllOf(HasSubstr("1 inputs"), HasSubstr("2 raw_input_contents")));
  inference::ModelInferRequest no_inputs;
  no_inputs.add_raw_input_contents("x");
  DecodeError(no_inputs);
}

TEST(DecodeInferRequestTest, E3RawAndTypedContentsMixed) {
  inference::ModelInferRequest request;
  AddInput(&request, "A", "FP32", {1});
  AddInput(&request, "B", "FP32", {1})->mutable_contents()->add_fp32_contents(1.0f);
  request.add_raw_input_contents(std::string(4, '\0'));
  request.add_raw_input_contents(std::string(4, '\0'));
  EXPECT_THAT(DecodeError(request), AllOf(HasSubstr("input 'B'"), HasSubstr("fp32_contents"),
                                          HasSubstr("raw_input_contents")));
}

TEST(DecodeInferRequestTest, EmptyContentsMessageBesideRawIsNotMixing) {
  inference::ModelInferRequest request;
  AddInput(&request, "A", "FP32", {1})->mutable_contents();  // present, all fields empty
  request.add_raw_input_contents(std::string(4, '\0'));
  absl::StatusOr<InferRequestView> view = DecodeInferRequest(request);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->inputs[0].contents, ContentsKind::kRaw);
}

TEST(DecodeInferRequestTest, TwoTypedFieldsInOneInput) {
  inference::ModelInferRequest request;
  auto* contents = AddInput(&request, "A", "FP32", {1})->mutable_contents();
  contents->add_int_contents(1);
  contents->add_fp32_contents(1.0f);
  EXPECT_THAT(DecodeError(request),
              AllOf(HasSubstr("input 'A'"), HasSubstr("int_contents"), HasSubstr("fp32_contents")));
}

TEST(DecodeInferRequestTest, TypedKindsMapToTheirContentsKind) {
  inference::ModelInferRequest request;
  AddInput(&request, "bool", "BOOL", {2})->mutable_contents()->add_bool_contents(true);
  request.mutable_inputs(0)->mutable_contents()->add_bool_contents(false);
  auto* i32 = AddInput(&request, "i32", "INT32", {3})->mutable_contents();
  for (int v : {1, -2, 3}) i32->add_int_contents(v);
  AddInput(&request, "i64", "INT64", {1})->mutable_contents()->add_int64_contents(-5);
  AddInput(&request, "u32", "UINT32", {1})->mutable_contents()->add_uint_contents(7);
  AddInput(&request, "u64", "UINT64", {1})->mutable_contents()->add_uint64_contents(9);
  auto* f32 = AddInput(&request, "f32", "FP32", {4})->mutable_contents();
  for (float v : {1.5f, 2.5f, 3.5f, 4.5f}) f32->add_fp32_contents(v);
  AddInput(&request, "f64", "FP64", {1})->mutable_contents()->add_fp64_contents(0.25);
  auto* bytes = AddInput(&request, "bytes", "BYTES", {2})->mutable_contents();
  bytes->add_bytes_contents("ab");
  bytes->add_bytes_contents("c");
  AddInput(&request, "none", "FP32", {0});

  absl::StatusOr<InferRequestView> view = DecodeInferRequest(request);
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->inputs.size(), 9u);
  const auto& in = view->inputs;
  const auto& c = [&](int i) -> const inference::InferTensorContents& {
    return request.inputs(i).contents();
  };
  EXPECT_EQ(in[0].contents, ContentsKind::kBool);
  EXPECT_EQ(in[0].count, 2);
  EXPECT_EQ(in[0].data, c(0).bool_contents().data());
  EXPECT_EQ(in[1].contents, ContentsKind::kInt32);
  EXPECT_EQ(in[1].count, 3);
  EXPECT_EQ(in[1].data, c(1).int_contents().data());
  EXPECT_EQ(static_cast<const int32_t*>(in[1].data)[1], -2);
  EXPECT_EQ(in[2].contents, ContentsKind::kInt64);
  EXPECT_EQ(in[2].data, c(2).int64_contents().data());
  EXPECT_EQ(in[3].contents, ContentsKind::kUint32);
  EXPECT_EQ(in[3].data, c(3).uint_contents().data());
  EXPECT_EQ(in[4].contents, ContentsKind::kUint64);
  EXPECT_EQ(in[4].data, c(4).uint64_contents().data());
  EXPECT_EQ(in[5].contents, ContentsKind::kFp32);
  EXPECT_EQ(in[5].count, 4);
  EXPECT_EQ(static_cast<const float*>(in[5].data)[3], 4.5f);
  EXPECT_EQ(in[6].contents, ContentsKind::kFp64);
  EXPECT_EQ(static_cast<const double*>(in[6].data)[0], 0.25);
  EXPECT_EQ(in[7].contents, ContentsKind::kBytes);
  EXPECT_EQ(in[7].count, 2);
  EXPECT_EQ(in[8].contents, ContentsKind::kNone);
  EXPECT_EQ(in[8].count, 0);
}

TEST(DecodeInferRequestTest, RequestedOutputsKeepTheirOrder) {
  inference::ModelInferRequest request;
  request.add_outputs()->set_name("Y");
  request.add_outputs()->set_name("Z");
  absl::StatusOr<InferRequestView> view = DecodeInferRequest(request);
  ASSERT_TRUE(view.ok());
  EXPECT_THAT(view->requested_outputs, ElementsAre("Y", "Z"));
}

TEST(DecodeInferRequestTest, HostileNamesAreEscapedInMessages) {
  inference::ModelInferRequest request;
  auto* contents = AddInput(&request, std::string("\x01\n") + std::string(300, 'q'), "FP32", {1})
                       ->mutable_contents();
  contents->add_int_contents(1);
  contents->add_fp32_contents(1.0f);
  const std::string message = DecodeError(request);
  EXPECT_THAT(message, AllOf(HasSubstr("\\x01"), HasSubstr("..."), Not(HasSubstr("\n")),
                             Not(HasSubstr(std::string(100, 'q')))));
}

// --- EncodeInferResponse --------------------------------------------------------------------

TEST(EncodeInferResponseTest, WritesOutputsAsRawContentsInOrder) {
  InferResult result;
  result.model_name = "matmul";
  result.model_version = "1";
  absl::StatusOr<Tensor> y = Tensor::Allocate(DataType::kFP32, {2, 2});
  absl::StatusOr<Tensor> z = Tensor::Allocate(DataType::kBF16, {3});
  absl::StatusOr<Tensor> empty = Tensor::Allocate(DataType::kINT64, {0, 5});
  ASSERT_TRUE(y.ok() && z.ok() && empty.ok());
  const float yv[] = {1, 2, 3, 4};
  std::memcpy(y->raw_data(), yv, sizeof yv);
  const uint16_t zv[] = {0x3f80, 0x4000, 0xbf80};
  std::memcpy(z->raw_data(), zv, sizeof zv);
  result.outputs.push_back({"Y", std::move(*y)});
  result.outputs.push_back({"Z", std::move(*z)});
  result.outputs.push_back({"E", std::move(*empty)});

  inference::ModelInferResponse response;
  ASSERT_TRUE(EncodeInferResponse(result, "request-42", &response).ok());
  EXPECT_EQ(response.model_name(), "matmul");
  EXPECT_EQ(response.model_version(), "1");
  EXPECT_EQ(response.id(), "request-42");
  ASSERT_EQ(response.outputs_size(), 3);
  ASSERT_EQ(response.raw_output_contents_size(), 3);
  EXPECT_EQ(response.outputs(0).name(), "Y");
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  EXPECT_THAT(response.outputs(0).shape(), ElementsAre(2, 2));
  EXPECT_EQ(response.raw_output_contents(0),
            std::string(reinterpret_cast<const char*>(yv), sizeof yv));
  EXPECT_EQ(response.outputs(1).name(), "Z");
  EXPECT_EQ(response.outputs(1).datatype(), "BF16");
  EXPECT_THAT(response.outputs(1).shape(), ElementsAre(3));
  EXPECT_EQ(response.raw_output_contents(1),
            std::string(reinterpret_cast<const char*>(zv), sizeof zv));
  EXPECT_EQ(response.outputs(2).datatype(), "INT64");
  EXPECT_THAT(response.outputs(2).shape(), ElementsAre(0, 5));
  EXPECT_TRUE(response.raw_output_contents(2).empty());
  // Outputs travel only as raw bytes.
  for (const auto& out : response.outputs()) EXPECT_FALSE(out.has_contents());
}

TEST(EncodeInferResponseTest, ScalarOutputHasAnEmptyShape) {
  InferResult result;
  absl::StatusOr<Tensor> s = Tensor::Allocate(DataType::kFP64, {});
  ASSERT_TRUE(s.ok());
  s->data<double>()[0] = 2.5;
  result.outputs.push_back({"Y", std::move(*s)});
  inference::ModelInferResponse response;
  ASSERT_TRUE(EncodeInferResponse(result, "", &response).ok());
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).shape_size(), 0);
  EXPECT_EQ(response.raw_output_contents(0).size(), 8u);
}

}  // namespace
}  // namespace gemmserve
