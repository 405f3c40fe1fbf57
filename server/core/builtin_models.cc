#include "server/core/builtin_models.h"

#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/ops/grouped_matmul.h"
#include "server/ops/matmul.h"

namespace gemmserve {
namespace {

const std::vector<DataType> kFloatTypes = {DataType::kFP32, DataType::kFP64, DataType::kFP16,
                                           DataType::kBF16};
const std::vector<DataType> kMatMulTypes = {DataType::kFP32,  DataType::kFP64,  DataType::kFP16,
                                            DataType::kBF16,  DataType::kINT32, DataType::kINT64,
                                            DataType::kUINT32, DataType::kUINT64};
const std::vector<DataType> kIndexTypes = {DataType::kINT64, DataType::kINT32};

// Bytes of `elements` values of `type`, saturating: an output too large to
// count is over every limit.
int64_t SaturatingBytes(int64_t elements, DataType type) {
  int64_t bytes;
  if (__builtin_mul_overflow(elements, DataTypeSize(type), &bytes)) {
    return std::numeric_limits<int64_t>::max();
  }
  return bytes;
}

absl::Status SameType(const BoundInput& reference, const BoundInput& other) {
  if (other.type == reference.type) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "input '", other.spec->name, "': expected datatype ", DataTypeName(reference.type),
      " like '", reference.spec->name, "', got ", DataTypeName(other.type)));
}

class PreparedMatMul final : public PreparedInference {
 public:
  PreparedMatMul(MatMulPlan plan, BoundInput a, BoundInput b)
      : plan_(std::move(plan)), a_(std::move(a)), b_(std::move(b)) {}

  int64_t output_bytes() const override {
    return SaturatingBytes(plan_.output_elements, a_.type);
  }
  std::vector<std::pair<std::string, Shape>> output_shapes() const override {
    return {{"Y", plan_.output_shape}};
  }
  int64_t flops() const override { return plan_.flops; }

  absl::StatusOr<std::vector<NamedTensor>> Run(int threads) override {
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor a, a_.Materialize());
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor b, b_.Materialize());
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor y, Tensor::Allocate(a_.type, plan_.output_shape));
    GEMMSERVE_RETURN_IF_ERROR(RunMatMul(plan_, a, b, &y, threads));
    std::vector<NamedTensor> out;
    out.push_back({"Y", std::move(y)});
    return out;
  }

 private:
  MatMulPlan plan_;
  BoundInput a_, b_;
};

class MatMulModel final : public Model {
 public:
  MatMulModel() {
    metadata_.name = "matmul";
    metadata_.versions = {kBuiltinVersion};
    metadata_.platform = kPlatform;
    metadata_.inputs = {{"A", kMatMulTypes, {-1, -1}, /*variable_rank=*/true, false},
                        {"B", kMatMulTypes, {-1, -1}, /*variable_rank=*/true, false}};
    metadata_.outputs = {{"Y", kMatMulTypes, {-1, -1}, /*variable_rank=*/true, false}};
  }
  const ModelMetadata& metadata() const override { return metadata_; }

  absl::StatusOr<std::unique_ptr<PreparedInference>> Prepare(
      const BoundInputs& inputs) const override {
    const BoundInput& a = inputs[0];
    const BoundInput& b = inputs[1];
    GEMMSERVE_RETURN_IF_ERROR(SameType(a, b));
    GEMMSERVE_ASSIGN_OR_RETURN(MatMulPlan plan, PlanMatMul(a.shape, b.shape));
    return std::make_unique<PreparedMatMul>(std::move(plan), a, b);
  }

 private:
  ModelMetadata metadata_;
};

class PreparedGroupedMatMul final : public PreparedInference {
 public:
  PreparedGroupedMatMul(GroupedMatMulPlan plan, BoundInputs inputs)
      : plan_(std::move(plan)), inputs_(std::move(inputs)) {}

  int64_t output_bytes() const override {
    return SaturatingBytes(plan_.output_elements, inputs_[0].type);
  }
  std::vector<std::pair<std::string, Shape>> output_shapes() const override {
    return {{"output", plan_.output_shape}};
  }
  int64_t flops() const override { return plan_.flops; }

  absl::StatusOr<std::vector<NamedTensor>> Run(int threads) override {
    // Indices first: nothing else is copied or read for an invalid request.
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor indices, inputs_[2].Materialize());
    GEMMSERVE_RETURN_IF_ERROR(ValidateGroupIndices(indices, plan_.g));
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor input, inputs_[0].Materialize());
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor weights, inputs_[1].Materialize());
    Tensor bias;
    if (plan_.has_bias) {
      GEMMSERVE_ASSIGN_OR_RETURN(bias, inputs_[3].Materialize());
    }
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor output, Tensor::Allocate(input.type(), plan_.output_shape));
    GEMMSERVE_RETURN_IF_ERROR(RunGroupedMatMul(plan_, input, weights, indices,
                                               plan_.has_bias ? &bias : nullptr, &output, threads));
    std::vector<NamedTensor> out;
    out.push_back({"output", std::move(output)});
    return out;
  }

 private:
  GroupedMatMulPlan plan_;
  BoundInputs inputs_;
};

class GroupedMatMulModel final : public Model {
 public:
  GroupedMatMulModel() {
    metadata_.name = "grouped_matmul";
    metadata_.versions = {kBuiltinVersion};
    metadata_.platform = kPlatform;
    metadata_.inputs = {{"input", kFloatTypes, {-1, -1}, false, false},
                        {"weights", kFloatTypes, {-1, -1, -1}, false, false},
                        {"group_indices", kIndexTypes, {-1, -1}, false, false},
                        {"bias", kFloatTypes, {-1, -1}, false, /*optional=*/true}};
    metadata_.outputs = {{"output", kFloatTypes, {-1, -1, -1}, false, false}};
  }
  const ModelMetadata& metadata() const override { return metadata_; }

  absl::StatusOr<std::unique_ptr<PreparedInference>> Prepare(
      const BoundInputs& inputs) const override {
    GEMMSERVE_RETURN_IF_ERROR(SameType(inputs[0], inputs[1]));
    const bool has_bias = inputs[3].spec != nullptr;
    if (has_bias) GEMMSERVE_RETURN_IF_ERROR(SameType(inputs[0], inputs[3]));
    GEMMSERVE_ASSIGN_OR_RETURN(
        GroupedMatMulPlan plan,
        PlanGroupedMatMul(inputs[0].shape, inputs[1].shape, inputs[2].shape,
                          has_bias ? &inputs[3].shape : nullptr));
    return std::make_unique<PreparedGroupedMatMul>(std::move(plan), inputs);
  }

 private:
  ModelMetadata metadata_;
};

}  // namespace

std::unique_ptr<Model> MakeMatMulModel() { return std::make_unique<MatMulModel>(); }
std::unique_ptr<Model> MakeGroupedMatMulModel() {
  return std::make_unique<GroupedMatMulModel>();
}

}  // namespace gemmserve
