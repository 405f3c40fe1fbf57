#include "server/core/input_binding.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gemmserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

// An input whose shape and name live in the test object; `data` points at
// caller-owned bytes or elements.
struct Input {
  std::string name;
  std::string datatype;
  Shape shape;
  ContentsKind contents = ContentsKind::kNone;
  const void* data = nullptr;
  int64_t count = 0;
};

// Owns everything an InferRequestView points to.
class RequestBuilder {
 public:
  RequestBuilder& Add(Input input) {
    inputs_.push_back(std::make_unique<Input>(std::move(input)));
    return *this;
  }
  // Raw input whose `count` is `bytes` (data from a zeroed buffer of that size).
  RequestBuilder& Raw(const std::string& name, const std::string& datatype, Shape shape,
                      int64_t bytes) {
    buffers_.push_back(std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(bytes) + 1));
    return Add(
        {name, datatype, std::move(shape), ContentsKind::kRaw, buffers_.back()->data(), bytes});
  }
  RequestBuilder& Typed(const std::string& name, const std::string& datatype, Shape shape,
                        ContentsKind kind, int64_t elements) {
    buffers_.push_back(
        std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(elements) * 8 + 1));
    return Add({name, datatype, std::move(shape), kind, buffers_.back()->data(), elements});
  }
  InferRequestView View(absl::string_view model = "matmul") const {
    InferRequestView view;
    view.model_name = model;
    for (const auto& in : inputs_) {
      InputTensorView t;
      t.name = in->name;
      t.datatype = in->datatype;
      t.shape = in->shape;
      t.contents = in->contents;
      t.data = in->data;
      t.count = in->count;
      view.inputs.push_back(t);
    }
    return view;
  }

 private:
  std::vector<std::unique_ptr<Input>> inputs_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> buffers_;
};

class InputBindingTest : public ::testing::Test {
 protected:
  const ModelMetadata& matmul() const { return *matmul_; }
  const ModelMetadata& grouped() const { return *grouped_; }

  // Binds and expects INVALID_ARGUMENT; returns the message.
  std::string BindError(const ModelMetadata& metadata, const InferRequestView& view) {
    absl::StatusOr<BoundInputs> bound = BindInputs(metadata, view);
    EXPECT_EQ(bound.status().code(), absl::StatusCode::kInvalidArgument) << bound.status();
    return std::string(bound.status().message());
  }

  // Signatures like the built-in models' (server/models/builtin_models.cc):
  // binding knows nothing of what a model computes.
  static std::unique_ptr<ModelMetadata> MatMulSignature() {
    const std::vector<DataType> all = {DataType::kFP32,   DataType::kFP64,  DataType::kFP16,
                                       DataType::kBF16,   DataType::kINT32, DataType::kINT64,
                                       DataType::kUINT32, DataType::kUINT64};
    auto m = std::make_unique<ModelMetadata>();
    m->name = "matmul";
    m->versions = {"1"};
    m->inputs = {{"A", all, {-1, -1}, /*variable_rank=*/true, false},
                 {"B", all, {-1, -1}, /*variable_rank=*/true, false}};
    m->outputs = {{"Y", all, {-1, -1}, true, false}};
    return m;
  }
  static std::unique_ptr<ModelMetadata> GroupedSignature() {
    const std::vector<DataType> floats = {DataType::kFP32, DataType::kFP64, DataType::kFP16,
                                          DataType::kBF16};
    auto m = std::make_unique<ModelMetadata>();
    m->name = "grouped_matmul";
    m->versions = {"1"};
    m->inputs = {{"input", floats, {-1, -1}, false, false},
                 {"weights", floats, {-1, -1, -1}, false, false},
                 {"group_indices", {DataType::kINT64, DataType::kINT32}, {-1, -1}, false, false},
                 {"bias", floats, {-1, -1}, false, /*optional=*/true}};
    m->outputs = {{"output", floats, {-1, -1, -1}, false, false}};
    return m;
  }
  std::unique_ptr<ModelMetadata> matmul_ = MatMulSignature();
  std::unique_ptr<ModelMetadata> grouped_ = GroupedSignature();
};

TEST_F(InputBindingTest, BindsValidRawInputsInMetadataOrder) {
  RequestBuilder r;
  r.Raw("B", "FP32", {3, 4}, 48).Raw("A", "FP32", {2, 3}, 24);  // B first on the wire
  const InferRequestView view = r.View();
  absl::StatusOr<BoundInputs> bound = BindInputs(matmul(), view);
  ASSERT_TRUE(bound.ok()) << bound.status();
  ASSERT_EQ(bound->size(), 2u);
  const BoundInput& a = (*bound)[0];
  const BoundInput& b = (*bound)[1];
  EXPECT_EQ(a.spec->name, "A");
  EXPECT_EQ(a.type, DataType::kFP32);
  EXPECT_THAT(a.shape, ElementsAre(2, 3));
  EXPECT_EQ(a.byte_size, 24);
  EXPECT_EQ(a.view, &view.inputs[1]);
  EXPECT_EQ(b.spec->name, "B");
  EXPECT_THAT(b.shape, ElementsAre(3, 4));
  EXPECT_EQ(b.byte_size, 48);
  EXPECT_EQ(b.view, &view.inputs[0]);
}

TEST_F(InputBindingTest, EveryMatMulDatatypeBindsFromRaw) {
  for (DataType type : kAllDataTypes) {
    RequestBuilder r;
    const std::string name(DataTypeName(type));
    r.Raw("A", name, {2, 3}, 6 * DataTypeSize(type)).Raw("B", name, {3}, 3 * DataTypeSize(type));
    absl::StatusOr<BoundInputs> bound = BindInputs(matmul(), r.View());
    ASSERT_TRUE(bound.ok()) << name << ": " << bound.status();
    EXPECT_EQ((*bound)[0].type, type);
    EXPECT_EQ((*bound)[1].byte_size, 3 * DataTypeSize(type));
  }
}

TEST_F(InputBindingTest, NeverReadsTensorData) {
  // Sizes are checked from the counts alone: a view whose data pointer is
  // null still binds (Materialize is what copies, later).
  RequestBuilder r;
  r.Add({"A", "FP32", {2, 3}, ContentsKind::kRaw, nullptr, 24})
      .Add({"B", "FP32", {3, 4}, ContentsKind::kFp32, nullptr, 12});
  EXPECT_TRUE(BindInputs(matmul(), r.View()).ok());
}

// --- E2: datatypes ---------------------------------------------------------------

TEST_F(InputBindingTest, E2UnknownDatatypeNamesTheInput) {
  for (const char* datatype : {"FP8", "", "fp32", "FLOAT"}) {
    RequestBuilder r;
    r.Raw("A", "FP32", {2, 3}, 24).Raw("B", datatype, {3, 4}, 48);
    EXPECT_THAT(BindError(matmul(), r.View()),
                AllOf(HasSubstr("input 'B'"), HasSubstr("unknown datatype")))
        << datatype;
  }
}

TEST_F(InputBindingTest, E2KServeDatatypeGemmserveDoesNotComputeIsUnsupported) {
  RequestBuilder r;
  r.Raw("A", "INT8", {2, 3}, 6).Raw("B", "INT8", {3, 4}, 12);
  EXPECT_THAT(BindError(matmul(), r.View()),
              AllOf(HasSubstr("input 'A'"), HasSubstr("INT8"), HasSubstr("not supported")));
}

TEST_F(InputBindingTest, E2DatatypeNotAcceptedByTheInput) {
  // INT32 values for GroupedMatMul's float input.
  RequestBuilder r;
  r.Raw("input", "INT32", {2, 3}, 24)
      .Raw("weights", "FP32", {1, 3, 4}, 48)
      .Raw("group_indices", "INT64", {2, 1}, 16);
  EXPECT_THAT(BindError(grouped(), r.View()),
              AllOf(HasSubstr("input 'input'"), HasSubstr("datatype INT32 is not accepted"),
                    HasSubstr("FP32"), HasSubstr("BF16")));
  // Float group indices.
  RequestBuilder r2;
  r2.Raw("input", "FP32", {2, 3}, 24)
      .Raw("weights", "FP32", {1, 3, 4}, 48)
      .Raw("group_indices", "FP32", {2, 1}, 8);
  EXPECT_THAT(BindError(grouped(), r2.View()),
              AllOf(HasSubstr("input 'group_indices'"), HasSubstr("INT64"), HasSubstr("INT32")));
}

// --- E4: raw byte length ------------------------------------------------------------

TEST_F(InputBindingTest, E4RawByteLengthOneShortOrOneOver) {
  for (int64_t bytes : {47, 49, 40, 0}) {
    RequestBuilder r;
    r.Raw("A", "FP32", {2, 3}, 24).Raw("B", "FP32", {3, 4}, bytes);
    EXPECT_EQ(BindError(matmul(), r.View()),
              "input 'B': expected 48 bytes (shape [3,4], FP32), got " + std::to_string(bytes));
  }
  RequestBuilder half;
  half.Raw("A", "FP16", {2, 3}, 13).Raw("B", "FP16", {3, 4}, 24);
  EXPECT_EQ(BindError(matmul(), half.View()),
            "input 'A': expected 12 bytes (shape [2,3], FP16), got 13");
}

TEST_F(InputBindingTest, RawZeroElementTensorNeedsZeroBytes) {
  RequestBuilder r;
  r.Raw("A", "FP32", {0, 3}, 0).Raw("B", "FP32", {3, 4}, 48);
  EXPECT_TRUE(BindInputs(matmul(), r.View()).ok());
  RequestBuilder over;
  over.Raw("A", "FP32", {0, 3}, 4).Raw("B", "FP32", {3, 4}, 48);
  EXPECT_THAT(BindError(matmul(), over.View()), HasSubstr("expected 0 bytes"));
}

// --- E5: typed contents ---------------------------------------------------------------

TEST_F(InputBindingTest, E5TypedElementCountMismatch) {
  for (int64_t elements : {11, 13}) {
    RequestBuilder r;
    r.Typed("A", "FP32", {2, 3}, ContentsKind::kFp32, 6)
        .Typed("B", "FP32", {3, 4}, ContentsKind::kFp32, elements);
    EXPECT_EQ(BindError(matmul(), r.View()),
              "input 'B': expected 12 elements (shape [3,4], FP32) in FP32 contents, got " +
                  std::to_string(elements));
  }
}

TEST_F(InputBindingTest, E5EachDatatypeBindsFromItsOwnTypedField) {
  const std::vector<std::pair<DataType, ContentsKind>> mapping = {
      {DataType::kFP32, ContentsKind::kFp32},     {DataType::kFP64, ContentsKind::kFp64},
      {DataType::kINT32, ContentsKind::kInt32},   {DataType::kINT64, ContentsKind::kInt64},
      {DataType::kUINT32, ContentsKind::kUint32}, {DataType::kUINT64, ContentsKind::kUint64},
  };
  for (const auto& [type, kind] : mapping) {
    const std::string name(DataTypeName(type));
    RequestBuilder r;
    r.Typed("A", name, {2, 3}, kind, 6).Typed("B", name, {3, 4}, kind, 12);
    absl::StatusOr<BoundInputs> bound = BindInputs(matmul(), r.View());
    ASSERT_TRUE(bound.ok()) << name << ": " << bound.status();
    EXPECT_EQ((*bound)[1].byte_size, 12 * DataTypeSize(type)) << name;
  }
}

TEST_F(InputBindingTest, E5TypedFieldOfTheWrongKind) {
  const std::vector<std::tuple<DataType, ContentsKind, std::string>> wrong = {
      {DataType::kFP32, ContentsKind::kInt32,
       "FP32 data belongs in FP32 contents, got INT32 contents"},
      {DataType::kFP32, ContentsKind::kFp64,
       "FP32 data belongs in FP32 contents, got FP64 contents"},
      {DataType::kFP64, ContentsKind::kFp32,
       "FP64 data belongs in FP64 contents, got FP32 contents"},
      {DataType::kINT32, ContentsKind::kInt64,
       "INT32 data belongs in INT32 contents, got INT64 contents"},
      {DataType::kINT64, ContentsKind::kInt32,
       "INT64 data belongs in INT64 contents, got INT32 contents"},
      {DataType::kUINT32, ContentsKind::kInt32,
       "UINT32 data belongs in UINT32 contents, got INT32 contents"},
      {DataType::kUINT64, ContentsKind::kUint32,
       "UINT64 data belongs in UINT64 contents, got UINT32 contents"},
      {DataType::kINT32, ContentsKind::kBool,
       "INT32 data belongs in INT32 contents, got BOOL contents"},
      {DataType::kFP32, ContentsKind::kBytes,
       "FP32 data belongs in FP32 contents, got BYTES contents"},
  };
  for (const auto& [type, kind, message] : wrong) {
    const std::string name(DataTypeName(type));
    RequestBuilder r;
    r.Typed("A", name, {2, 3}, kind, 6).Typed("B", name, {3, 4}, ContentsKind::kNone, 0);
    EXPECT_EQ(BindError(matmul(), r.View()), "input 'A': " + message);
  }
}

TEST_F(InputBindingTest, E5HalfTypesHaveNoTypedField) {
  for (const char* half : {"FP16", "BF16"}) {
    RequestBuilder r;
    r.Typed("A", half, {2, 3}, ContentsKind::kFp32, 6).Raw("B", half, {3, 4}, 24);
    EXPECT_EQ(BindError(matmul(), r.View()),
              std::string("input 'A': ") + half +
                  " has no typed contents field; send it in raw contents, got FP32 contents");
  }
}

TEST_F(InputBindingTest, MissingContentsForANonEmptyTensor) {
  RequestBuilder r;
  r.Raw("A", "FP32", {2, 3}, 24).Add({"B", "FP32", {3, 4}, ContentsKind::kNone, nullptr, 0});
  EXPECT_EQ(BindError(matmul(), r.View()),
            "input 'B': no data: expected 48 bytes (shape [3,4], FP32) in raw contents or "
            "FP32 contents");
  RequestBuilder half;
  half.Raw("A", "BF16", {2, 3}, 12).Add({"B", "BF16", {3, 4}, ContentsKind::kNone, nullptr, 0});
  EXPECT_EQ(BindError(matmul(), half.View()),
            "input 'B': no data: expected 24 bytes (shape [3,4], BF16) in raw contents");
}

// A front end names its wire's fields (InferRequestView::contents_name);
// the core's messages use its names.
absl::string_view WireName(ContentsKind kind) {
  return kind == ContentsKind::kRaw ? "the body" : "a typed field";
}

TEST_F(InputBindingTest, MessagesUseTheFrontEndsNamesForContents) {
  RequestBuilder r;
  r.Raw("A", "FP32", {2, 3}, 24).Add({"B", "FP32", {3, 4}, ContentsKind::kNone, nullptr, 0});
  InferRequestView view = r.View();
  view.contents_name = &WireName;
  EXPECT_EQ(BindError(matmul(), view),
            "input 'B': no data: expected 48 bytes (shape [3,4], FP32) in the body or a typed "
            "field");
}

TEST_F(InputBindingTest, EmptyTensorNeedsNoContents) {
  RequestBuilder r;
  r.Add({"A", "FP32", {2, 0}, ContentsKind::kNone, nullptr, 0})
      .Add({"B", "FP32", {0, 4}, ContentsKind::kNone, nullptr, 0});
  EXPECT_TRUE(BindInputs(matmul(), r.View()).ok());
}

// --- E6: names -------------------------------------------------------------------------

TEST_F(InputBindingTest, E6DuplicateInputName) {
  RequestBuilder r;
  r.Raw("A", "FP32", {2, 3}, 24).Raw("B", "FP32", {3, 4}, 48).Raw("A", "FP32", {2, 3}, 24);
  EXPECT_THAT(BindError(matmul(), r.View()),
              AllOf(HasSubstr("input 'A'"), HasSubstr("more than once")));
}

TEST_F(InputBindingTest, E6UnknownExtraInputListsTheKnownOnes) {
  RequestBuilder r;
  r.Raw("A", "FP32", {2, 3}, 24).Raw("B", "FP32", {3, 4}, 48).Raw("C", "FP32", {1}, 4);
  EXPECT_EQ(BindError(matmul(), r.View()), "unknown input 'C' for model 'matmul'; it takes A, B");
  RequestBuilder g;
  g.Raw("expert_bias", "FP32", {1}, 4);
  EXPECT_THAT(BindError(grouped(), g.View("grouped_matmul")),
              HasSubstr("it takes input, weights, group_indices, bias (optional)"));
}

TEST_F(InputBindingTest, E6UnknownNameIsEscapedAndCutShort) {
  RequestBuilder r;
  r.Raw(std::string("\x01\n") + std::string(500, 'x'), "FP32", {1}, 4);
  const std::string message = BindError(matmul(), r.View());
  EXPECT_THAT(message, AllOf(HasSubstr("\\x01"), HasSubstr("\\n"), HasSubstr("..."),
                             Not(HasSubstr(std::string(100, 'x')))));
  EXPECT_LT(message.size(), 300u);
}

TEST_F(InputBindingTest, E6MissingRequiredInput) {
  RequestBuilder r;
  r.Raw("A", "FP32", {2, 3}, 24);
  EXPECT_EQ(BindError(matmul(), r.View()), "missing required input 'B' for model 'matmul'");
  RequestBuilder none;
  EXPECT_EQ(BindError(matmul(), none.View()), "missing required input 'A' for model 'matmul'");
}

TEST_F(InputBindingTest, OptionalBiasMayBeAbsentOrPresent) {
  RequestBuilder r;
  r.Raw("input", "FP32", {2, 3}, 24)
      .Raw("weights", "FP32", {5, 3, 4}, 240)
      .Raw("group_indices", "INT32", {2, 1}, 8);
  absl::StatusOr<BoundInputs> bound = BindInputs(grouped(), r.View("grouped_matmul"));
  ASSERT_TRUE(bound.ok()) << bound.status();
  ASSERT_EQ(bound->size(), 4u);
  EXPECT_EQ((*bound)[2].type, DataType::kINT32);
  EXPECT_EQ((*bound)[3].spec, nullptr);

  r.Raw("bias", "FP32", {5, 4}, 80);
  bound = BindInputs(grouped(), r.View("grouped_matmul"));
  ASSERT_TRUE(bound.ok()) << bound.status();
  ASSERT_NE((*bound)[3].spec, nullptr);
  EXPECT_EQ((*bound)[3].spec->name, "bias");
  EXPECT_EQ((*bound)[3].byte_size, 80);
}

// --- E7 / E10: shapes -----------------------------------------------------------------

TEST_F(InputBindingTest, E7NegativeDimension) {
  RequestBuilder r;
  r.Raw("A", "FP32", {2, -3}, 24).Raw("B", "FP32", {3, 4}, 48);
  EXPECT_THAT(BindError(matmul(), r.View()),
              AllOf(HasSubstr("input 'A'"), HasSubstr("negative dimension -3")));
}

TEST_F(InputBindingTest, E7Int64MinDimension) {
  RequestBuilder r;
  r.Raw("A", "FP32", {2, 3}, 24).Raw("B", "FP32", {kInt64Min, 4}, 48);
  EXPECT_THAT(BindError(matmul(), r.View()),
              AllOf(HasSubstr("input 'B'"), HasSubstr("negative dimension")));
}

TEST_F(InputBindingTest, E7ElementCountOverflow) {
  RequestBuilder r;
  r.Raw("A", "FP32", {int64_t{1} << 32, int64_t{1} << 32}, 0).Raw("B", "FP32", {3, 4}, 48);
  EXPECT_THAT(BindError(matmul(), r.View()),
              AllOf(HasSubstr("input 'A'"), HasSubstr("overflows int64")));
  // Elements fit, bytes do not.
  RequestBuilder bytes;
  bytes.Raw("A", "FP64", {int64_t{1} << 61}, 0).Raw("B", "FP64", {3, 4}, 96);
  EXPECT_THAT(BindError(matmul(), bytes.View()),
              AllOf(HasSubstr("input 'A'"), HasSubstr("overflows int64")));
}

TEST_F(InputBindingTest, E10MillionDimensionShapeIsRejectedCheaply) {
  RequestBuilder r;
  r.Raw("A", "FP32", Shape(1000000, 1), 4).Raw("B", "FP32", {1, 1}, 4);
  const std::string message = BindError(matmul(), r.View());
  EXPECT_THAT(message, AllOf(HasSubstr("input 'A'"), HasSubstr("rank 1000000")));
  EXPECT_LT(message.size(), 300u);
}

TEST_F(InputBindingTest, E10ThousandInputsAreRejected) {
  RequestBuilder r;
  r.Raw("A", "FP32", {2, 3}, 24).Raw("B", "FP32", {3, 4}, 48);
  for (int i = 0; i < 1000; ++i) r.Raw("x" + std::to_string(i), "FP32", {1}, 4);
  EXPECT_THAT(BindError(matmul(), r.View()), HasSubstr("unknown input 'x0'"));
}

// --- Materialize ---------------------------------------------------------------------

TEST_F(InputBindingTest, MaterializeCopiesFromAnOddOffsetIntoAnAlignedTensor) {
  std::vector<uint8_t> wire(1 + 6 * sizeof(float));
  const float values[] = {1.5f, -2, 3, 4.25f, 5, 6};
  std::memcpy(wire.data() + 1, values, sizeof values);  // misaligned on purpose
  RequestBuilder r;
  r.Add({"A", "FP32", {2, 3}, ContentsKind::kRaw, wire.data() + 1, 24}).Raw("B", "FP32", {3}, 12);
  const InferRequestView view = r.View();
  absl::StatusOr<BoundInputs> bound = BindInputs(matmul(), view);
  ASSERT_TRUE(bound.ok()) << bound.status();
  absl::StatusOr<Tensor> t = (*bound)[0].Materialize();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw_data()) % AlignedBuffer::kAlignment, 0u);
  EXPECT_EQ(t->type(), DataType::kFP32);
  EXPECT_THAT(t->shape(), ElementsAre(2, 3));
  EXPECT_EQ(t->byte_size(), 24);
  wire[1] ^= 0xff;  // a copy, not a view
  EXPECT_THAT(std::vector<float>(t->data<float>(), t->data<float>() + 6),
              ElementsAre(1.5f, -2, 3, 4.25f, 5, 6));
}

TEST_F(InputBindingTest, MaterializeOfAnEmptyTensor) {
  RequestBuilder r;
  r.Add({"A", "FP32", {0, 3}, ContentsKind::kNone, nullptr, 0}).Raw("B", "FP32", {3}, 12);
  const InferRequestView view = r.View();
  absl::StatusOr<BoundInputs> bound = BindInputs(matmul(), view);
  ASSERT_TRUE(bound.ok()) << bound.status();
  absl::StatusOr<Tensor> t = (*bound)[0].Materialize();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_elements(), 0);
  EXPECT_THAT(t->shape(), ElementsAre(0, 3));
}

}  // namespace
}  // namespace gemmserve
