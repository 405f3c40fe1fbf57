#include "server/serving/model_protos.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/models/builtin_models.h"

namespace gemmserve {
namespace {

using ::testing::ElementsAre;

// --- EncodeModelMetadata -----------------------------------------------------------------------

TEST(EncodeModelMetadataTest, MatMulReportsItsDefaultDatatypeFirst) {
  inference::ModelMetadataResponse response;
  EncodeModelMetadata(MakeMatMulModel()->metadata(), {"1"}, &response);
  EXPECT_EQ(response.name(), "matmul");
  EXPECT_THAT(response.versions(), ElementsAre("1"));
  EXPECT_EQ(response.platform(), "gemmserve");
  ASSERT_EQ(response.inputs_size(), 2);
  EXPECT_EQ(response.inputs(0).name(), "A");
  EXPECT_EQ(response.inputs(0).datatype(), "FP32");
  EXPECT_THAT(response.inputs(0).shape(), ElementsAre(-1, -1));
  EXPECT_EQ(response.inputs(1).name(), "B");
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "Y");
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
}

TEST(EncodeModelMetadataTest, GroupedMatMulListsEveryInput) {
  inference::ModelMetadataResponse response;
  EncodeModelMetadata(MakeGroupedMatMulModel()->metadata(), {"1"}, &response);
  EXPECT_EQ(response.name(), "grouped_matmul");
  ASSERT_EQ(response.inputs_size(), 4);
  EXPECT_EQ(response.inputs(0).name(), "input");
  EXPECT_EQ(response.inputs(1).name(), "weights");
  EXPECT_THAT(response.inputs(1).shape(), ElementsAre(-1, -1, -1));
  EXPECT_EQ(response.inputs(2).name(), "group_indices");
  EXPECT_EQ(response.inputs(2).datatype(), "INT64");
  EXPECT_EQ(response.inputs(3).name(), "bias");
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_THAT(response.outputs(0).shape(), ElementsAre(-1, -1, -1));
}

TEST(EncodeModelMetadataTest, TheFirstAcceptedDatatypeIsTheDefault) {
  ModelMetadata metadata;
  metadata.name = "custom";
  metadata.versions = {"3", "7"};
  metadata.platform = "p";
  metadata.inputs = {{"x", {DataType::kBF16, DataType::kFP32}, {4, -1}, false, false}};
  metadata.outputs = {{"y", {DataType::kUINT64}, {}, true, false}};
  inference::ModelMetadataResponse response;
  EncodeModelMetadata(metadata, metadata.versions, &response);
  EXPECT_THAT(response.versions(), ElementsAre("3", "7"));
  EXPECT_EQ(response.inputs(0).datatype(), "BF16");
  EXPECT_THAT(response.inputs(0).shape(), ElementsAre(4, -1));
  EXPECT_EQ(response.outputs(0).datatype(), "UINT64");
  EXPECT_EQ(response.outputs(0).shape_size(), 0);
}

}  // namespace
}  // namespace gemmserve
