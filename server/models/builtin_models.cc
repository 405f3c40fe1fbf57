#include "server/models/builtin_models.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/allocation.h"
#include "server/common/status_macros.h"
#include "server/ops/gemm_scheduler.h"
#include "server/ops/grouped_matmul.h"
#include "server/ops/matmul.h"

namespace gemmserve {
namespace {

const std::vector<DataType> kFloatTypes = {DataType::kFP32, DataType::kFP64, DataType::kFP16,
                                           DataType::kBF16};
const std::vector<DataType> kMatMulTypes = {DataType::kFP32,   DataType::kFP64,  DataType::kFP16,
                                            DataType::kBF16,   DataType::kINT32, DataType::kINT64,
                                            DataType::kUINT32, DataType::kUINT64};
const std::vector<DataType> kIndexTypes = {DataType::kINT64, DataType::kINT32};

// What the request's inputs take once copied into aligned tensors.
int64_t InputBytes(const BoundInputs& inputs) {
  int64_t bytes = 0;
  for (const BoundInput& b : inputs) bytes = SaturatingAdd(bytes, b.byte_size);
  return bytes;
}

absl::Status SameType(const BoundInput& reference, const BoundInput& other) {
  if (other.type == reference.type) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "input '", other.spec->name, "': expected datatype ", DataTypeName(reference.type), " like '",
      reference.spec->name, "', got ", DataTypeName(other.type)));
}

// A built-in request staged for a batch: its tensors copied in, its output
// allocated and its GEMM problems listed; the batch runs every staged
// request's problems in one scheduler call.
struct Staged {
  std::vector<Tensor> inputs;
  GroupedMatMulWork grouped;  // row lists the grouped problems point into
  std::vector<GemmProblem> problems;
  std::vector<NamedTensor> outputs;
};

class PreparedBuiltin : public PreparedInference {
 public:
  virtual absl::Status Stage(Staged* staged) const = 0;
};

// Stages each request (a request's own error fails it alone), runs all their
// problems in one call, and hands back each request's outputs.
std::vector<InferOutputs> RunStagedBatch(absl::Span<PreparedInference* const> batch, int threads) {
  std::vector<InferOutputs> results(batch.size());
  std::vector<Staged> staged(batch.size());
  std::vector<absl::Status> stage_status(batch.size());
  std::vector<GemmProblem> problems;
  for (size_t i = 0; i < batch.size(); ++i) {
    const size_t listed = problems.size();
    stage_status[i] = CatchAllocationFailure("the request's tensors and problem list", [&] {
      GEMMSERVE_RETURN_IF_ERROR(static_cast<const PreparedBuiltin*>(batch[i])->Stage(&staged[i]));
      problems.insert(problems.end(), staged[i].problems.begin(), staged[i].problems.end());
      return absl::OkStatus();
    });
    if (!stage_status[i].ok()) {  // none of its problems run; its memory goes at once
      problems.resize(listed);
      staged[i] = Staged();
    }
  }
  const absl::Status run = RunGemmProblems(problems, threads);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!stage_status[i].ok()) {
      results[i] = stage_status[i];
    } else if (!run.ok()) {
      results[i] = run;
    } else {
      batch[i]->set_weight_bytes_read(GemmWeightBytes(staged[i].problems));
      results[i] = std::move(staged[i].outputs);
    }
  }
  return results;
}

class PreparedMatMul final : public PreparedBuiltin {
 public:
  PreparedMatMul(MatMulPlan plan, BoundInput a, BoundInput b)
      : plan_(std::move(plan)), a_(std::move(a)), b_(std::move(b)) {}

  int64_t output_bytes() const override { return SaturatingBytes(plan_.output_elements, a_.type); }
  std::vector<std::pair<std::string, Shape>> output_shapes() const override {
    return {{"Y", plan_.output_shape}};
  }
  int64_t flops() const override { return plan_.flops; }
  int64_t rows() const override { return SaturatingMul(plan_.batch_count, plan_.m); }
  int64_t held_bytes(int threads) const override {
    return SaturatingAdd(SaturatingAdd(SaturatingAdd(a_.byte_size, b_.byte_size), output_bytes()),
                         MatMulWorkBytes(plan_, a_.type, threads));
  }

  absl::Status Stage(Staged* staged) const override {
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor a, a_.Materialize());
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor b, b_.Materialize());
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor y, Tensor::Allocate(a_.type, plan_.output_shape));
    GEMMSERVE_RETURN_IF_ERROR(AppendMatMulProblems(plan_, a, b, &y, &staged->problems));
    // Tensors keep their buffers when moved, so the problems stay valid.
    staged->inputs.push_back(std::move(a));
    staged->inputs.push_back(std::move(b));
    staged->outputs.push_back({"Y", std::move(y)});
    return absl::OkStatus();
  }

 private:
  MatMulPlan plan_;
  BoundInput a_, b_;
};

class MatMulModel final : public Model {
 public:
  MatMulModel() {
    metadata_.name = kMatMulModelName;
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
  std::vector<InferOutputs> RunBatch(absl::Span<PreparedInference* const> batch,
                                     int threads) const override {
    return RunStagedBatch(batch, threads);
  }

 private:
  ModelMetadata metadata_;
};

class PreparedGroupedMatMul final : public PreparedBuiltin {
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
  int64_t rows() const override { return plan_.m; }
  int64_t held_bytes(int threads) const override {
    return SaturatingAdd(SaturatingAdd(InputBytes(inputs_), output_bytes()),
                         GroupedMatMulWorkBytes(plan_, inputs_[0].type, threads));
  }

  absl::Status Stage(Staged* staged) const override {
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
    GEMMSERVE_ASSIGN_OR_RETURN(staged->grouped,
                               BuildGroupedMatMulWork(plan_, input, weights, indices,
                                                      plan_.has_bias ? &bias : nullptr, &output));
    staged->problems = staged->grouped.problems;
    staged->inputs.push_back(std::move(indices));
    staged->inputs.push_back(std::move(input));
    staged->inputs.push_back(std::move(weights));
    staged->inputs.push_back(std::move(bias));
    staged->outputs.push_back({"output", std::move(output)});
    return absl::OkStatus();
  }

 private:
  GroupedMatMulPlan plan_;
  BoundInputs inputs_;
};

class GroupedMatMulModel final : public Model {
 public:
  GroupedMatMulModel() {
    metadata_.name = kGroupedMatMulModelName;
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
    GEMMSERVE_ASSIGN_OR_RETURN(GroupedMatMulPlan plan,
                               PlanGroupedMatMul(inputs[0].shape, inputs[1].shape, inputs[2].shape,
                                                 has_bias ? &inputs[3].shape : nullptr));
    return std::make_unique<PreparedGroupedMatMul>(std::move(plan), inputs);
  }
  std::vector<InferOutputs> RunBatch(absl::Span<PreparedInference* const> batch,
                                     int threads) const override {
    return RunStagedBatch(batch, threads);
  }

 private:
  ModelMetadata metadata_;
};

}  // namespace

std::unique_ptr<Model> MakeMatMulModel() { return std::make_unique<MatMulModel>(); }
std::unique_ptr<Model> MakeGroupedMatMulModel() { return std::make_unique<GroupedMatMulModel>(); }

}  // namespace gemmserve
