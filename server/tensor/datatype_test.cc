#include "server/tensor/datatype.h"

#include <string>
#include <type_traits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gemmserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

struct TypeFacts {
  DataType type;
  absl::string_view name;
  int64_t size;
  bool floating;
  bool half;
};

constexpr TypeFacts kFacts[] = {
    {DataType::kBF16, "BF16", 2, true, true},       {DataType::kFP16, "FP16", 2, true, true},
    {DataType::kFP32, "FP32", 4, true, false},      {DataType::kFP64, "FP64", 8, true, false},
    {DataType::kINT32, "INT32", 4, false, false},   {DataType::kINT64, "INT64", 8, false, false},
    {DataType::kUINT32, "UINT32", 4, false, false}, {DataType::kUINT64, "UINT64", 8, false, false},
};

TEST(DataTypeTest, AllDataTypesListsEveryTypeOnce) {
  EXPECT_EQ(std::size(kAllDataTypes), std::size(kFacts));
  for (const TypeFacts& f : kFacts) {
    int seen = 0;
    for (DataType t : kAllDataTypes) seen += t == f.type;
    EXPECT_EQ(seen, 1) << f.name;
  }
}

TEST(DataTypeTest, NamesSizesAndKinds) {
  for (const TypeFacts& f : kFacts) {
    EXPECT_EQ(DataTypeName(f.type), f.name);
    EXPECT_EQ(DataTypeSize(f.type), f.size) << f.name;
    EXPECT_EQ(IsFloatingPoint(f.type), f.floating) << f.name;
    EXPECT_EQ(IsHalfPrecision(f.type), f.half) << f.name;
  }
}

TEST(ParseDataTypeTest, ParsesAllEightSupportedNames) {
  for (const TypeFacts& f : kFacts) {
    absl::StatusOr<DataType> t = ParseDataType(f.name);
    ASSERT_TRUE(t.ok()) << f.name << ": " << t.status();
    EXPECT_EQ(*t, f.type) << f.name;
  }
}

TEST(ParseDataTypeTest, RoundTripsWithDataTypeName) {
  for (DataType t : kAllDataTypes) EXPECT_EQ(*ParseDataType(DataTypeName(t)), t);
}

TEST(ParseDataTypeTest, KServeTypesGemmserveDoesNotComputeAreUnsupported) {
  for (absl::string_view name : {"BOOL", "UINT8", "UINT16", "INT8", "INT16", "BYTES"}) {
    absl::StatusOr<DataType> t = ParseDataType(name);
    ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(
        std::string(t.status().message()),
        AllOf(HasSubstr(std::string(name)), HasSubstr("not supported"), Not(HasSubstr("unknown"))))
        << name;
  }
}

TEST(ParseDataTypeTest, NonKServeNamesAreUnknown) {
  for (absl::string_view name : {"FP8", "", "fp32", "Fp16", "FP32 ", " FP32", "INT128", "F"}) {
    absl::StatusOr<DataType> t = ParseDataType(name);
    ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << "'" << name << "'";
    EXPECT_THAT(std::string(t.status().message()),
                AllOf(HasSubstr("unknown datatype"), HasSubstr("expected one of"),
                      Not(HasSubstr("not supported"))))
        << name;
  }
}

TEST(ParseDataTypeTest, UnsupportedAndUnknownMessagesDiffer) {
  const std::string unsupported(ParseDataType("INT8").status().message());
  const std::string unknown(ParseDataType("FP8").status().message());
  const std::string empty(ParseDataType("").status().message());
  EXPECT_NE(unsupported, unknown);
  EXPECT_NE(unsupported, empty);
  EXPECT_THAT(unknown, HasSubstr("\"FP8\""));
  EXPECT_THAT(empty, HasSubstr("\"\""));
}

TEST(ParseDataTypeTest, UnknownNameIsEscapedAndCutShort) {
  const std::string hostile = std::string("\x01\xff\"evil\n") + std::string(1000, 'A');
  const std::string message(ParseDataType(hostile).status().message());
  EXPECT_THAT(message, Not(HasSubstr("\x01")));
  EXPECT_THAT(message, Not(HasSubstr("\n")));
  EXPECT_THAT(message, HasSubstr("\\x01"));
  EXPECT_THAT(message, HasSubstr("..."));
  EXPECT_LT(message.size(), 200u);
  EXPECT_THAT(message, Not(HasSubstr(std::string(100, 'A'))));
}

TEST(ParseDataTypeTest, EmbeddedNulIsNotAccepted) {
  EXPECT_FALSE(ParseDataType(absl::string_view("FP32\0", 5)).ok());
}

TEST(DataTypeOfTest, MapsCppTypes) {
  EXPECT_EQ(DataTypeOf<float>::value, DataType::kFP32);
  EXPECT_EQ(DataTypeOf<double>::value, DataType::kFP64);
  EXPECT_EQ(DataTypeOf<int32_t>::value, DataType::kINT32);
  EXPECT_EQ(DataTypeOf<int64_t>::value, DataType::kINT64);
  EXPECT_EQ(DataTypeOf<uint32_t>::value, DataType::kUINT32);
  EXPECT_EQ(DataTypeOf<uint64_t>::value, DataType::kUINT64);
  EXPECT_EQ(DataTypeSize(DataTypeOf<double>::value), int64_t{sizeof(double)});
  EXPECT_EQ(DataTypeSize(DataTypeOf<uint32_t>::value), int64_t{sizeof(uint32_t)});
}

}  // namespace
}  // namespace gemmserve
