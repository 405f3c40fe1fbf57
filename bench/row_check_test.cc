// The row check must reject a wrong result, or a broken kernel would be timed.
#include "bench/row_check.h"

#include <cstdint>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "bench/bench_inputs.h"
#include "bench/grouped_matmul_baselines.h"
#include "server/ops/grouped_matmul.h"

namespace gemmserve {
namespace {

using ::testing::HasSubstr;

TEST(RowCheckTest, RejectsARowComputedWithTheWrongGroup) {
  Tensor x = *RandomTensor(DataType::kFP32, {4, 64}, 1);
  Tensor w = *RandomTensor(DataType::kFP32, {4, 64, 8}, 2);
  Tensor idx = *MakeRouting(4, 2, 4, Routing::kUniform, 3);
  GroupedMatMulPlan plan = *PlanGroupedMatMul(x.shape(), w.shape(), idx.shape(), nullptr);
  Tensor out = *Tensor::Zeros(DataType::kFP32, plan.output_shape);
  ASSERT_TRUE(RunPerGroupLoop(plan, x, w, idx, &out, 1).ok());
  ASSERT_TRUE(CheckGroupedMatMulSample(plan, x, w, idx, out).ok());
  int64_t* groups = idx.data<int64_t>();
  groups[0] = (groups[0] + 1) % 4;  // the output no longer matches the routing
  absl::Status status = CheckGroupedMatMulSample(plan, x, w, idx, out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("output[0,0,:]"));
}

TEST(RowCheckTest, RejectsAnIntegerOffByOne) {
  const int32_t a[] = {1, 2};
  const int32_t b[] = {3, 4, 5, 6};  // 2 x 2
  int32_t c[] = {1 * 3 + 2 * 5, 1 * 4 + 2 * 6};
  EXPECT_TRUE(CheckGemmRow(DataType::kINT32, a, b, 2, 2, c, "row").ok());
  c[1] += 1;
  EXPECT_THAT(CheckGemmRow(DataType::kINT32, a, b, 2, 2, c, "row").message(),
              HasSubstr("row column 1: got 17, expected 16"));
}

TEST(RowCheckTest, RejectsNaN) {
  const float a[] = {1.0f};
  const float b[] = {2.0f};
  const float c[] = {std::numeric_limits<float>::quiet_NaN()};
  EXPECT_FALSE(CheckGemmRow(DataType::kFP32, a, b, 1, 1, c, "row").ok());
}

TEST(RowCheckTest, AcceptsOneRoundingOfAHalfType) {
  // 1 + 2^-9 is not a BF16 value: the kernel must round it, and either
  // neighbour within one rounding passes.
  const uint16_t one = 0x3f80, tiny = 0x3b00;  // 1.0 and 2^-9 in BF16
  const uint16_t a[] = {one, one};
  const uint16_t b[] = {one, tiny};
  const uint16_t c[] = {one};
  EXPECT_TRUE(CheckGemmRow(DataType::kBF16, a, b, 2, 1, c, "row").ok());
}

}  // namespace
}  // namespace gemmserve
