// The protocol's rules both front ends apply to a request's parameters.
#include "server/core/inference_request.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gemmserve {
namespace {

using ::testing::HasSubstr;

TEST(SharedMemoryOfTest, NoneOrRegionAndSizeTogether) {
  auto none = SharedMemoryOf({}, "input 'x'");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto ref = SharedMemoryOf({"r", 64, std::nullopt}, "input 'x'");
  ASSERT_TRUE(ref.ok() && ref->has_value());
  EXPECT_EQ((*ref)->region, "r");
  EXPECT_EQ((*ref)->byte_size, 64u);
  EXPECT_EQ((*ref)->offset, 0u);
  auto offset = SharedMemoryOf({"r", 0, 8}, "input 'x'");
  ASSERT_TRUE(offset.ok() && offset->has_value());
  EXPECT_EQ((*offset)->offset, 8u);
  EXPECT_EQ((*offset)->byte_size, 0u);
}

TEST(SharedMemoryOfTest, HalfAPairOrAnOffsetAloneIsRefusedNamingTheTensor) {
  for (const SharedMemoryParameters& p :
       {SharedMemoryParameters{"r", std::nullopt, std::nullopt},
        SharedMemoryParameters{std::nullopt, 4, std::nullopt},
        SharedMemoryParameters{std::nullopt, 4, 0}}) {
    absl::Status s = SharedMemoryOf(p, "output 'y'").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("output 'y' needs both shared_memory_region and shared_memory_byte_size"));
  }
  absl::Status alone = SharedMemoryOf({std::nullopt, std::nullopt, 0}, "input 'x'").status();
  EXPECT_EQ(alone.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(alone.message()), HasSubstr("input 'x' has shared_memory_offset"));
}

TEST(CheckOutputParameterTest, ClassificationIsRefusedOthersPass) {
  EXPECT_EQ(CheckOutputParameter("classification").code(), absl::StatusCode::kInvalidArgument);
  for (const char* key : {"binary_data", "shared_memory_region", "anything"}) {
    EXPECT_TRUE(CheckOutputParameter(key).ok()) << key;
  }
}

}  // namespace
}  // namespace gemmserve
