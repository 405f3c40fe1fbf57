#include "server/core/resident_models.h"

#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/ops/gemm_problems.h"
#include "server/ops/grouped_matmul.h"
#include "server/ops/matmul.h"

namespace gemmserve {
namespace {

constexpr char kResidentPlatform[] = "gemmserve_onnx";

int64_t SaturatingBytes(int64_t elements, DataType type) {
  int64_t bytes;
  if (__builtin_mul_overflow(elements, DataTypeSize(type), &bytes)) {
    return std::numeric_limits<int64_t>::max();
  }
  return bytes;
}

// Hands request i its own consecutive rows of `all` (row_bytes per row),
// shaped as it planned: parts[i] = (rows, output shape).
absl::Status SplitRows(const Tensor& all, int64_t row_bytes,
                       const std::vector<std::pair<int64_t, Shape>>& parts,
                       const std::string& output_name, std::vector<InferOutputs>* results) {
  int64_t at = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(all.type(), parts[i].second));
    if (out.byte_size() > 0) {
      std::memcpy(out.raw_data(), static_cast<const uint8_t*>(all.raw_data()) + at * row_bytes,
                  static_cast<size_t>(out.byte_size()));
    }
    at += parts[i].first;
    std::vector<NamedTensor> outputs;
    outputs.push_back({output_name, std::move(out)});
    (*results)[i] = std::move(outputs);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- MatMul

class PreparedResidentMatMul final : public PreparedInference {
 public:
  PreparedResidentMatMul(MatMulPlan plan, BoundInput a, std::string output_name)
      : plan_(std::move(plan)), a_(std::move(a)), output_name_(std::move(output_name)) {}
  int64_t output_bytes() const override { return SaturatingBytes(plan_.output_elements, a_.type); }
  std::vector<std::pair<std::string, Shape>> output_shapes() const override {
    return {{output_name_, plan_.output_shape}};
  }
  int64_t flops() const override { return plan_.flops; }
  int64_t rows() const override { return plan_.batch_count * plan_.m; }
  const BoundInput& a() const { return a_; }
  const MatMulPlan& plan() const { return plan_; }

 private:
  MatMulPlan plan_;
  BoundInput a_;
  std::string output_name_;
};

class ResidentMatMulModel final : public Model {
 public:
  explicit ResidentMatMulModel(ResidentMatMulSpec spec) : spec_(std::move(spec)) {
    metadata_.name = spec_.name;
    metadata_.versions = {spec_.version};
    metadata_.platform = kResidentPlatform;
    metadata_.inputs = {spec_.a};
    Shape out(spec_.a.shape.begin(), spec_.a.shape.end() - 1);
    out.push_back(spec_.b.shape()[1]);
    metadata_.outputs = {{spec_.output_name, spec_.a.datatypes, out, false, false}};
  }
  const ModelMetadata& metadata() const override { return metadata_; }
  std::vector<std::pair<std::string, std::string>> parameters() const override {
    return {{"k", absl::StrCat(spec_.b.shape()[0])}, {"n", absl::StrCat(spec_.b.shape()[1])}};
  }

  absl::StatusOr<std::unique_ptr<PreparedInference>> Prepare(
      const BoundInputs& inputs) const override {
    const BoundInput& a = inputs[0];
    const int64_t k = spec_.b.shape()[0];
    if (a.shape.empty() || a.shape.back() != k) {
      return absl::InvalidArgumentError(absl::StrCat("input '", spec_.a.name,
                                                     "': expected last dimension K=", k,
                                                     ", got ", ShapeToString(a.shape)));
    }
    GEMMSERVE_ASSIGN_OR_RETURN(MatMulPlan plan, PlanMatMul(a.shape, spec_.b.shape()));
    return std::make_unique<PreparedResidentMatMul>(std::move(plan), a, spec_.output_name);
  }

  std::vector<InferOutputs> RunBatch(absl::Span<PreparedInference* const> batch,
                                     int threads) const override {
    std::vector<InferOutputs> results(batch.size());
    absl::Status status = RunTogether(batch, threads, &results);
    if (!status.ok()) {
      for (InferOutputs& r : results) r = status;
    }
    return results;
  }

 private:
  // The rows of every request stacked into one [R, K] x [K, N] GEMM.
  absl::Status RunTogether(absl::Span<PreparedInference* const> batch, int threads,
                           std::vector<InferOutputs>* results) const {
    const DataType type = spec_.b.type();
    const int64_t k = spec_.b.shape()[0], n = spec_.b.shape()[1];
    int64_t rows = 0;
    for (PreparedInference* p : batch) rows += p->rows();
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor a, Tensor::Allocate(type, {rows, k}));
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor y, Tensor::Allocate(type, {rows, n}));
    const int64_t es = DataTypeSize(type);
    int64_t at = 0;
    for (PreparedInference* p : batch) {
      const auto* r = static_cast<const PreparedResidentMatMul*>(p);
      r->a().CopyTo(static_cast<uint8_t*>(a.raw_data()) + at * k * es);
      at += r->rows();
    }
    GemmProblem problem;
    problem.type = type;
    problem.m = rows;
    problem.n = n;
    problem.k = k;
    problem.a = a.raw_data();
    problem.lda = k;
    problem.b = spec_.b.raw_data();
    problem.ldb = n;
    problem.c = y.raw_data();
    problem.ldc = n;
    GEMMSERVE_RETURN_IF_ERROR(RunGemmProblems({problem}, threads));
    std::vector<std::pair<int64_t, Shape>> parts;
    for (PreparedInference* p : batch) {
      const auto* r = static_cast<const PreparedResidentMatMul*>(p);
      parts.emplace_back(r->rows(), r->plan().output_shape);
    }
    return SplitRows(y, n * es, parts, spec_.output_name, results);
  }

  ResidentMatMulSpec spec_;
  ModelMetadata metadata_;
};

// --------------------------------------------------------- GroupedMatMul

class PreparedResidentGrouped final : public PreparedInference {
 public:
  PreparedResidentGrouped(GroupedMatMulPlan plan, BoundInput input, BoundInput indices,
                          std::string output_name)
      : plan_(std::move(plan)),
        input_(std::move(input)),
        indices_(std::move(indices)),
        output_name_(std::move(output_name)) {}
  int64_t output_bytes() const override {
    return SaturatingBytes(plan_.output_elements, input_.type);
  }
  std::vector<std::pair<std::string, Shape>> output_shapes() const override {
    return {{output_name_, plan_.output_shape}};
  }
  int64_t flops() const override { return plan_.flops; }
  int64_t rows() const override { return plan_.m; }
  const GroupedMatMulPlan& plan() const { return plan_; }
  const BoundInput& input() const { return input_; }
  const BoundInput& indices() const { return indices_; }

 private:
  GroupedMatMulPlan plan_;
  BoundInput input_, indices_;
  std::string output_name_;
};

template <typename Index>
void WidenIndices(const Index* in, int64_t count, int64_t* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int64_t>(in[i]);
}

class ResidentGroupedModel final : public Model {
 public:
  explicit ResidentGroupedModel(ResidentGroupedMatMulSpec spec) : spec_(std::move(spec)) {
    metadata_.name = spec_.name;
    metadata_.versions = {spec_.version};
    metadata_.platform = kResidentPlatform;
    metadata_.inputs = {spec_.input, spec_.group_indices};
    const Shape& w = spec_.weights.shape();
    metadata_.outputs = {{spec_.output_name,
                          spec_.input.datatypes,
                          {spec_.input.shape[0], spec_.group_indices.shape[1], w[2]},
                          false,
                          false}};
  }
  const ModelMetadata& metadata() const override { return metadata_; }
  std::vector<std::pair<std::string, std::string>> parameters() const override {
    const Shape& w = spec_.weights.shape();
    return {{"groups", absl::StrCat(w[0])},
            {"k", absl::StrCat(w[1])},
            {"n", absl::StrCat(w[2])},
            {"bias", spec_.bias ? "true" : "false"}};
  }

  absl::StatusOr<std::unique_ptr<PreparedInference>> Prepare(
      const BoundInputs& inputs) const override {
    const Shape* bias_shape = spec_.bias ? &spec_.bias->shape() : nullptr;
    GEMMSERVE_ASSIGN_OR_RETURN(
        GroupedMatMulPlan plan,
        PlanGroupedMatMul(inputs[0].shape, spec_.weights.shape(), inputs[1].shape, bias_shape));
    return std::make_unique<PreparedResidentGrouped>(std::move(plan), inputs[0], inputs[1],
                                                     spec_.output_name);
  }

  std::vector<InferOutputs> RunBatch(absl::Span<PreparedInference* const> batch,
                                     int threads) const override {
    std::vector<InferOutputs> results(batch.size());
    // A request whose indices are out of range fails alone, before anything
    // is computed; the others run together.
    std::vector<const PreparedResidentGrouped*> valid;
    std::vector<size_t> slot;
    std::vector<Tensor> indices;
    for (size_t i = 0; i < batch.size(); ++i) {
      const auto* r = static_cast<const PreparedResidentGrouped*>(batch[i]);
      absl::StatusOr<Tensor> idx = r->indices().Materialize();
      absl::Status s = idx.ok() ? ValidateGroupIndices(*idx, r->plan().g) : idx.status();
      if (!s.ok()) {
        results[i] = s;
        continue;
      }
      valid.push_back(r);
      slot.push_back(i);
      indices.push_back(*std::move(idx));
    }
    if (valid.empty()) return results;
    std::vector<InferOutputs> ran(valid.size());
    absl::Status status = RunTogether(valid, indices, threads, &ran);
    for (size_t v = 0; v < valid.size(); ++v) {
      results[slot[v]] = status.ok() ? std::move(ran[v]) : InferOutputs(status);
    }
    return results;
  }

 private:
  // Token rows and index rows concatenated along M: one fused call.
  absl::Status RunTogether(const std::vector<const PreparedResidentGrouped*>& batch,
                           const std::vector<Tensor>& indices, int threads,
                           std::vector<InferOutputs>* results) const {
    const DataType type = spec_.weights.type();
    const Shape& w = spec_.weights.shape();
    const int64_t k = w[1], n = w[2], s = spec_.group_indices.shape[1];
    int64_t rows = 0;
    for (const auto* r : batch) rows += r->rows();
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor input, Tensor::Allocate(type, {rows, k}));
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor idx, Tensor::Allocate(DataType::kINT64, {rows, s}));
    const int64_t es = DataTypeSize(type);
    int64_t at = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const auto* r = batch[i];
      r->input().CopyTo(static_cast<uint8_t*>(input.raw_data()) + at * k * es);
      int64_t* dst = idx.data<int64_t>() + at * s;
      if (indices[i].type() == DataType::kINT32) {
        WidenIndices(indices[i].data<int32_t>(), indices[i].num_elements(), dst);
      } else {
        WidenIndices(indices[i].data<int64_t>(), indices[i].num_elements(), dst);
      }
      at += r->rows();
    }
    const Shape* bias_shape = spec_.bias ? &spec_.bias->shape() : nullptr;
    GEMMSERVE_ASSIGN_OR_RETURN(GroupedMatMulPlan plan,
                               PlanGroupedMatMul({rows, k}, w, {rows, s}, bias_shape));
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor output, Tensor::Allocate(type, plan.output_shape));
    GEMMSERVE_ASSIGN_OR_RETURN(
        GroupedMatMulWork work,
        BuildGroupedMatMulWork(plan, input, spec_.weights, idx,
                               spec_.bias ? &*spec_.bias : nullptr, &output));
    GEMMSERVE_RETURN_IF_ERROR(RunGemmProblems(work.problems, threads));
    std::vector<std::pair<int64_t, Shape>> parts;
    for (const auto* r : batch) parts.emplace_back(r->rows(), r->plan().output_shape);
    return SplitRows(output, s * n * es, parts, spec_.output_name, results);
  }

  ResidentGroupedMatMulSpec spec_;
  ModelMetadata metadata_;
};

absl::Status OneDatatype(const TensorSpec& spec, DataType want, const char* what) {
  if (spec.datatypes.size() != 1 || spec.datatypes[0] != want) {
    return absl::InvalidArgumentError(absl::StrCat("input '", spec.name, "': expected datatype ",
                                                   DataTypeName(want), " like ", what));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> MakeResidentMatMulModel(ResidentMatMulSpec spec) {
  if (spec.b.shape().size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "initializer B: a resident MatMul weight must be 2-D [K, N], got ",
        ShapeToString(spec.b.shape())));
  }
  GEMMSERVE_RETURN_IF_ERROR(OneDatatype(spec.a, spec.b.type(), "initializer B"));
  if (spec.a.shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", spec.a.name, "': MatMul needs rank >= 1"));
  }
  const int64_t k = spec.a.shape.back();
  if (k != -1 && k != spec.b.shape()[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", spec.a.name, "': last dimension ", k, " differs from K=",
        spec.b.shape()[0], " of initializer B ", ShapeToString(spec.b.shape())));
  }
  if (k == -1) spec.a.shape.back() = spec.b.shape()[0];
  return std::unique_ptr<Model>(new ResidentMatMulModel(std::move(spec)));
}

absl::StatusOr<std::unique_ptr<Model>> MakeResidentGroupedMatMulModel(
    ResidentGroupedMatMulSpec spec) {
  const Shape& w = spec.weights.shape();
  if (w.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "initializer weights: expected rank 3 [G, K, N], got ", ShapeToString(w)));
  }
  if (!IsFloatingPoint(spec.weights.type())) {
    return absl::InvalidArgumentError(
        absl::StrCat("initializer weights: GroupedMatMul needs BF16, FP16, FP32 or FP64, got ",
                     DataTypeName(spec.weights.type())));
  }
  GEMMSERVE_RETURN_IF_ERROR(OneDatatype(spec.input, spec.weights.type(), "initializer weights"));
  if (spec.input.shape.size() != 2 || (spec.input.shape[1] != -1 && spec.input.shape[1] != w[1])) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", spec.input.name, "': expected [M, K] with K=", w[1], " from weights ",
        ShapeToString(w), ", got ", ShapeToString(spec.input.shape)));
  }
  spec.input.shape[1] = w[1];
  // S is fixed: requests with the same S can be stacked along M.
  if (spec.group_indices.shape.size() != 2 || spec.group_indices.shape[1] < 0) {
    return absl::InvalidArgumentError(absl::StrCat("input '", spec.group_indices.name,
                                                   "': expected rank 2 [M, S] with a fixed S, got ",
                                                   ShapeToString(spec.group_indices.shape)));
  }
  for (DataType t : spec.group_indices.datatypes) {
    if (t != DataType::kINT32 && t != DataType::kINT64) {
      return absl::InvalidArgumentError(absl::StrCat("input '", spec.group_indices.name,
                                                     "': expected INT32 or INT64, got ",
                                                     DataTypeName(t)));
    }
  }
  if (spec.bias) {
    const Shape& b = spec.bias->shape();
    if (b.size() != 2 || b[0] != w[0] || b[1] != w[2]) {
      return absl::InvalidArgumentError(absl::StrCat("initializer bias: expected [G, N] = [",
                                                     w[0], ",", w[2], "], got ",
                                                     ShapeToString(b)));
    }
    if (spec.bias->type() != spec.weights.type()) {
      return absl::InvalidArgumentError("initializer bias: datatype differs from weights");
    }
  }
  return std::unique_ptr<Model>(new ResidentGroupedModel(std::move(spec)));
}

}  // namespace gemmserve
