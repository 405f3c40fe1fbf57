#include "server/models/resident_models.h"

#include <cstring>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/common/allocation.h"
#include "server/common/status_macros.h"
#include "server/ops/gemm_scheduler.h"
#include "server/ops/grouped_matmul.h"
#include "server/ops/matmul.h"
#include "server/models/resident_common.h"
#include "server/ops/packed_weights.h"

namespace gemmserve {
namespace {

// ---------------------------------------------------------------- MatMul

class PreparedResidentMatMul final : public PreparedInference {
 public:
  PreparedResidentMatMul(MatMulPlan plan, BoundInput a, std::string output_name, bool panels,
                         bool quantized, bool int8)
      : plan_(std::move(plan)),
        a_(std::move(a)),
        output_name_(std::move(output_name)),
        panels_(panels),
        quantized_(quantized),
        int8_(int8) {}
  int64_t output_bytes() const override { return SaturatingBytes(plan_.output_elements, a_.type); }
  std::vector<std::pair<std::string, Shape>> output_shapes() const override {
    return {{output_name_, plan_.output_shape}};
  }
  int64_t flops() const override { return plan_.flops; }
  int64_t rows() const override { return SaturatingMul(plan_.batch_count, plan_.m); }
  int64_t held_bytes(int threads) const override {
    // One problem of all the batch's rows; its bound grows with the rows no
    // faster than linearly, so this request's share is its own bound.
    GemmWorkShape work;
    work.type = a_.type;
    work.problems = 1;
    work.rows = work.min_rows = work.max_rows = rows();
    work.k = plan_.k;
    work.n = plan_.n;
    work.panels = panels_;
    work.quantized = quantized_;
    work.int8_activations = int8_;
    return ResidentHeldBytes(a_.byte_size, output_bytes(), GemmWorkBytes(work, threads));
  }
  const BoundInput& a() const { return a_; }
  const MatMulPlan& plan() const { return plan_; }

 private:
  MatMulPlan plan_;
  BoundInput a_;
  std::string output_name_;
  bool panels_, quantized_, int8_;
};

class ResidentMatMulModel final : public Model {
 public:
  // With `packed`, B is computed on from its panels and the row-major
  // tensor is dropped: one copy stays resident.
  ResidentMatMulModel(ResidentMatMulSpec spec, std::optional<PackedWeights> packed)
      : spec_(std::move(spec)),
        type_(spec_.b_quantized ? spec_.b_quantized->value_type() : spec_.b.type()),
        b_shape_(spec_.b_quantized ? spec_.b_quantized->shape() : spec_.b.shape()),
        packed_(std::move(packed)) {
    if (packed_) spec_.b = Tensor();
    metadata_.name = spec_.name;
    metadata_.versions = {spec_.version};
    metadata_.platform = kResidentPlatform;
    metadata_.inputs = {spec_.a};
    Shape out(spec_.a.shape.begin(), spec_.a.shape.end() - 1);
    out.push_back(b_shape_[1]);
    metadata_.outputs = {{spec_.output_name, spec_.a.datatypes, out, false, false}};
  }
  const ModelMetadata& metadata() const override { return metadata_; }
  std::vector<std::pair<std::string, std::string>> parameters() const override {
    std::vector<std::pair<std::string, std::string>> p = {
        {"k", absl::StrCat(b_shape_[0])},
        {"n", absl::StrCat(b_shape_[1])},
        {"weights_layout", spec_.b_quantized ? "quantized"
                           : packed_         ? "panels"
                                             : "row_major"},
        {"weights_bytes", absl::StrCat(spec_.b_quantized ? spec_.b_quantized->bytes()
                                       : packed_         ? packed_->bytes()
                                                         : spec_.b.byte_size())}};
    if (spec_.b_quantized) {
      AddQuantizationParameters(*spec_.b_quantized, &p);
      p.push_back(AccuracyLevelParameter(spec_.accuracy_level));
    }
    return p;
  }

  absl::StatusOr<std::unique_ptr<PreparedInference>> Prepare(
      const BoundInputs& inputs) const override {
    const BoundInput& a = inputs[0];
    // BindInputs held A to the signature; the rows are sized from it, so
    // what they depend on is checked here again.
    const int64_t k = b_shape_[0];
    if (a.type != type_ || a.shape.size() != spec_.a.shape.size() || a.shape.back() != k) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", spec_.a.name, "': expected ", DataTypeName(type_), " of shape ",
                       ShapeToString(spec_.a.shape), " (K=", k, "), got ", DataTypeName(a.type),
                       " ", ShapeToString(a.shape)));
    }
    GEMMSERVE_ASSIGN_OR_RETURN(MatMulPlan plan, PlanMatMul(a.shape, b_shape_));
    return std::make_unique<PreparedResidentMatMul>(
        std::move(plan), a, spec_.output_name, packed_.has_value(), spec_.b_quantized.has_value(),
        spec_.accuracy_level == 4);
  }

  std::vector<InferOutputs> RunBatch(absl::Span<PreparedInference* const> batch,
                                     int threads) const override {
    return RunRowsTogether(batch.size(), [&](std::vector<InferOutputs>* results) {
      return RunTogether(batch, threads, results);
    });
  }

 private:
  // The rows of every request stacked into one [R, K] x [K, N] GEMM.
  absl::Status RunTogether(absl::Span<PreparedInference* const> batch, int threads,
                           std::vector<InferOutputs>* results) const {
    const DataType type = type_;
    const int64_t k = b_shape_[0], n = b_shape_[1];
    const int64_t es = DataTypeSize(type);
    int64_t rows = 0;
    for (PreparedInference* p : batch) {
      const auto* r = static_cast<const PreparedResidentMatMul*>(p);
      if (r->a().byte_size != SaturatingMul(SaturatingMul(r->rows(), k), es)) {
        return absl::InternalError("resident MatMul: a request's rows differ from its plan");
      }
      GEMMSERVE_ASSIGN_OR_RETURN(rows, CheckedAdd(rows, r->rows()));
    }
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor a, Tensor::Allocate(type, {rows, k}));
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor y, Tensor::Allocate(type, {rows, n}));
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
    if (spec_.b_quantized) {
      problem.b_quantized = &spec_.b_quantized->group(0);
      problem.int8_activations = spec_.accuracy_level == 4;
    } else if (packed_) {
      problem.b_panels = packed_->group(0);
      problem.b_panels_min_exponent = packed_->min_exponent(0);
    } else {
      problem.b = spec_.b.raw_data();
      problem.ldb = n;
    }
    problem.c = y.raw_data();
    problem.ldc = n;
    GEMMSERVE_RETURN_IF_ERROR(RunGemmProblems({problem}, threads));
    batch[0]->set_weight_bytes_read(GemmWeightBytes({problem}));
    std::vector<std::pair<int64_t, Shape>> parts;
    for (PreparedInference* p : batch) {
      const auto* r = static_cast<const PreparedResidentMatMul*>(p);
      parts.emplace_back(r->rows(), r->plan().output_shape);
    }
    return SplitRows(std::move(y), n * es, parts, spec_.output_name, results);
  }

  void TouchResident() const override {
    TouchMemory(spec_.b.raw_data(), spec_.b.byte_size());
    if (packed_) TouchMemory(packed_->data(), packed_->bytes());
    if (spec_.b_quantized) {
      TouchMemory(spec_.b_quantized->data().data(), spec_.b_quantized->data().size());
    }
  }

  ResidentMatMulSpec spec_;
  DataType type_;
  Shape b_shape_;  // [K, N]
  std::optional<PackedWeights> packed_;
  ModelMetadata metadata_;
};

// --------------------------------------------------------- GroupedMatMul

class PreparedResidentGrouped final : public PreparedInference {
 public:
  PreparedResidentGrouped(GroupedMatMulPlan plan, BoundInput input, BoundInput indices,
                          std::string output_name, bool panels, bool quantized, bool int8)
      : plan_(std::move(plan)),
        input_(std::move(input)),
        indices_(std::move(indices)),
        output_name_(std::move(output_name)),
        panels_(panels),
        quantized_(quantized),
        int8_(int8) {}
  int64_t output_bytes() const override {
    return SaturatingBytes(plan_.output_elements, input_.type);
  }
  std::vector<std::pair<std::string, Shape>> output_shapes() const override {
    return {{output_name_, plan_.output_shape}};
  }
  int64_t flops() const override { return plan_.flops; }
  int64_t rows() const override { return plan_.m; }
  int64_t held_bytes(int threads) const override {
    // Its rows of the batch's input and int64 indices, its output rows and
    // their copy, and its share of the merged problems (GemmWorkBytes adds up).
    const int64_t indices = SaturatingMul(SaturatingMul(plan_.m, plan_.s), sizeof(int64_t));
    return ResidentHeldBytes(
        SaturatingAdd(input_.byte_size, indices), output_bytes(),
        GroupedMatMulWorkBytes(plan_, input_.type, threads, panels_, quantized_, int8_));
  }
  const GroupedMatMulPlan& plan() const { return plan_; }
  const BoundInput& input() const { return input_; }
  const BoundInput& indices() const { return indices_; }

 private:
  GroupedMatMulPlan plan_;
  BoundInput input_, indices_;
  std::string output_name_;
  bool panels_, quantized_, int8_;
};

class ResidentGroupedModel final : public Model {
 public:
  // With `packed`, the weights are computed on from their panels and the
  // row-major tensor is dropped: one copy stays resident.
  ResidentGroupedModel(ResidentGroupedMatMulSpec spec, std::optional<PackedWeights> packed)
      : spec_(std::move(spec)),
        type_(spec_.weights_quantized ? spec_.weights_quantized->value_type()
                                      : spec_.weights.type()),
        weights_shape_(spec_.weights_quantized ? spec_.weights_quantized->shape()
                                               : spec_.weights.shape()),
        packed_(std::move(packed)) {
    if (packed_) spec_.weights = Tensor();
    metadata_.name = spec_.name;
    metadata_.versions = {spec_.version};
    metadata_.platform = kResidentPlatform;
    metadata_.inputs = {spec_.input, spec_.group_indices};
    const Shape& w = weights_shape_;
    metadata_.outputs = {{spec_.output_name,
                          spec_.input.datatypes,
                          {spec_.input.shape[0], spec_.group_indices.shape[1], w[2]},
                          false,
                          false}};
  }
  const ModelMetadata& metadata() const override { return metadata_; }
  std::vector<std::pair<std::string, std::string>> parameters() const override {
    const Shape& w = weights_shape_;
    const auto& q = spec_.weights_quantized;
    std::vector<std::pair<std::string, std::string>> p = {
        {"groups", absl::StrCat(w[0])},
        {"k", absl::StrCat(w[1])},
        {"n", absl::StrCat(w[2])},
        {"bias", spec_.bias ? "true" : "false"},
        {"weights_layout", q         ? "quantized"
                           : packed_ ? "panels"
                                     : "row_major"},
        {"weights_bytes", absl::StrCat(q         ? q->bytes()
                                       : packed_ ? packed_->bytes()
                                                 : spec_.weights.byte_size())}};
    if (q) {
      AddQuantizationParameters(*q, &p);
      p.push_back(AccuracyLevelParameter(spec_.accuracy_level));
    }
    return p;
  }

  absl::StatusOr<std::unique_ptr<PreparedInference>> Prepare(
      const BoundInputs& inputs) const override {
    const BoundInput& input = inputs[0];
    const BoundInput& indices = inputs[1];
    // BindInputs held both to the signature; the batch's buffers are sized
    // from the model's K and S, so those are checked here again.
    const int64_t k = weights_shape_[1], s = spec_.group_indices.shape[1];
    if (input.type != type_ || input.shape.size() != 2 || input.shape[1] != k) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", spec_.input.name, "': expected ", DataTypeName(type_), " of shape [M, ", k,
          "], got ", DataTypeName(input.type), " ", ShapeToString(input.shape)));
    }
    if (indices.shape.size() != 2 || indices.shape[1] != s) {
      return absl::InvalidArgumentError(absl::StrCat("input '", spec_.group_indices.name,
                                                     "': expected shape [M, ", s, "], got ",
                                                     ShapeToString(indices.shape)));
    }
    if (indices.shape[0] != input.shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", spec_.group_indices.name, "': expected first dimension M=", input.shape[0],
          " like '", spec_.input.name, "' ", ShapeToString(input.shape), ", got ",
          ShapeToString(indices.shape)));
    }
    const Shape* bias_shape = spec_.bias ? &spec_.bias->shape() : nullptr;
    GEMMSERVE_ASSIGN_OR_RETURN(
        GroupedMatMulPlan plan,
        PlanGroupedMatMul(input.shape, weights_shape_, indices.shape, bias_shape));
    return std::make_unique<PreparedResidentGrouped>(
        std::move(plan), input, indices, spec_.output_name, packed_.has_value(),
        spec_.weights_quantized.has_value(), spec_.accuracy_level == 4);
  }

  std::vector<InferOutputs> RunBatch(absl::Span<PreparedInference* const> batch,
                                     int threads) const override {
    return RunRowsTogether(batch.size(), [&](std::vector<InferOutputs>* results) {
      return RunTogether(batch, threads, results);
    });
  }

 private:
  // Token rows and index rows concatenated along M: one fused call. The
  // indices are validated in the batch's own copy, so what is checked is
  // what is used; a request whose indices are out of range fails alone and
  // its rows are overwritten by the next request's.
  absl::Status RunTogether(absl::Span<PreparedInference* const> batch, int threads,
                           std::vector<InferOutputs>* results) const {
    const DataType type = type_;
    const Shape& w = weights_shape_;
    const int64_t k = w[1], n = w[2], s = spec_.group_indices.shape[1];
    const int64_t es = DataTypeSize(type);
    int64_t capacity = 0;
    for (PreparedInference* p : batch) {
      const auto* r = static_cast<const PreparedResidentGrouped*>(p);
      const GroupedMatMulPlan& plan = r->plan();
      if (plan.s != s || plan.k != k ||
          r->input().byte_size != SaturatingMul(SaturatingMul(plan.m, k), es) ||
          r->indices().byte_size !=
              SaturatingMul(SaturatingMul(plan.m, s), DataTypeSize(r->indices().type))) {
        return absl::InternalError("resident GroupedMatMul: a request differs from its plan");
      }
      GEMMSERVE_ASSIGN_OR_RETURN(capacity, CheckedAdd(capacity, plan.m));
    }
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor input, Tensor::Allocate(type, {capacity, k}));
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor idx, Tensor::Allocate(DataType::kINT64, {capacity, s}));
    std::vector<size_t> ran;  // positions in `batch` of the requests computed
    std::vector<std::pair<int64_t, Shape>> parts;
    int64_t rows = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const auto* r = static_cast<const PreparedResidentGrouped*>(batch[i]);
      const int64_t m = r->plan().m;
      int64_t* dst = idx.data<int64_t>() + rows * s;
      WidenIndices(r->indices(), m * s, dst);
      absl::Status valid = ValidateGroupIndices(absl::MakeConstSpan(dst, m * s), s, w[0]);
      if (!valid.ok()) {
        (*results)[i] = valid;
        continue;
      }
      r->input().CopyTo(static_cast<uint8_t*>(input.raw_data()) + rows * k * es);
      rows += m;
      ran.push_back(i);
      parts.emplace_back(m, r->plan().output_shape);
    }
    if (ran.empty()) return absl::OkStatus();
    GEMMSERVE_RETURN_IF_ERROR(input.Truncate({rows, k}));
    GEMMSERVE_RETURN_IF_ERROR(idx.Truncate({rows, s}));
    const Shape* bias_shape = spec_.bias ? &spec_.bias->shape() : nullptr;
    GEMMSERVE_ASSIGN_OR_RETURN(GroupedMatMulPlan plan,
                               PlanGroupedMatMul({rows, k}, w, {rows, s}, bias_shape));
    GEMMSERVE_ASSIGN_OR_RETURN(Tensor output, Tensor::Allocate(type, plan.output_shape));
    GEMMSERVE_ASSIGN_OR_RETURN(
        GroupedMatMulWork work,
        BuildGroupedMatMulWork(plan, input, weights(), idx, spec_.bias ? &*spec_.bias : nullptr,
                               &output));
    for (GemmProblem& p : work.problems) p.int8_activations = spec_.accuracy_level == 4;
    GEMMSERVE_RETURN_IF_ERROR(RunGemmProblems(work.problems, threads));
    batch[ran[0]]->set_weight_bytes_read(GemmWeightBytes(work.problems));
    std::vector<InferOutputs> computed(ran.size());
    GEMMSERVE_RETURN_IF_ERROR(
        SplitRows(std::move(output), s * n * es, parts, spec_.output_name, &computed));
    for (size_t j = 0; j < ran.size(); ++j) (*results)[ran[j]] = std::move(computed[j]);
    return absl::OkStatus();
  }

  GroupedWeights weights() const {
    if (spec_.weights_quantized) return GroupedWeights(*spec_.weights_quantized);
    return packed_ ? GroupedWeights(*packed_) : GroupedWeights(spec_.weights);
  }

  void TouchResident() const override {
    TouchMemory(spec_.weights.raw_data(), spec_.weights.byte_size());
    if (spec_.bias) TouchMemory(spec_.bias->raw_data(), spec_.bias->byte_size());
    if (packed_) TouchMemory(packed_->data(), packed_->bytes());
    if (spec_.weights_quantized) {
      TouchMemory(spec_.weights_quantized->data().data(), spec_.weights_quantized->data().size());
    }
  }

  ResidentGroupedMatMulSpec spec_;  // weights dropped when packed_ holds them
  DataType type_;
  Shape weights_shape_;
  std::optional<PackedWeights> packed_;
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
  const Shape b_shape = spec.b_quantized ? spec.b_quantized->shape() : spec.b.shape();
  const DataType b_type = spec.b_quantized ? spec.b_quantized->value_type() : spec.b.type();
  if (b_shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("initializer B: a resident MatMul weight must be 2-D [K, N], got ",
                     ShapeToString(b_shape)));
  }
  GEMMSERVE_RETURN_IF_ERROR(OneDatatype(spec.a, b_type, "initializer B"));
  if (spec.a.shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", spec.a.name, "': MatMul needs rank >= 1"));
  }
  const int64_t k = spec.a.shape.back();
  if (k != -1 && k != b_shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat("input '", spec.a.name, "': last dimension ", k,
                                                   " differs from K=", b_shape[0],
                                                   " of initializer B ", ShapeToString(b_shape)));
  }
  if (k == -1) spec.a.shape.back() = b_shape[0];
  GEMMSERVE_RETURN_IF_ERROR(CheckAccuracyLevel(
      spec.accuracy_level, spec.b_quantized ? &*spec.b_quantized : nullptr, "initializer B"));
  if (spec.accuracy_level == 4) {
    GEMMSERVE_RETURN_IF_ERROR(spec.b_quantized->PackForInt8Activations().status());
  }
  // B packed once, as a GroupedMatMul's experts are (one group); quantized
  // weights stay as they are.
  std::optional<PackedWeights> packed;
  if (!spec.b_quantized) {
    GEMMSERVE_ASSIGN_OR_RETURN(packed, PackAtLoad(spec.b));
  }
  return std::unique_ptr<Model>(new ResidentMatMulModel(std::move(spec), std::move(packed)));
}

absl::StatusOr<std::unique_ptr<Model>> MakeResidentGroupedMatMulModel(
    ResidentGroupedMatMulSpec spec) {
  const Shape w = spec.weights_quantized ? spec.weights_quantized->shape() : spec.weights.shape();
  const DataType w_type =
      spec.weights_quantized ? spec.weights_quantized->value_type() : spec.weights.type();
  if (w.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("initializer weights: expected rank 3 [G, K, N], got ", ShapeToString(w)));
  }
  if (!IsFloatingPoint(w_type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("initializer weights: GroupedMatMul needs BF16, FP16, FP32 or FP64, got ",
                     DataTypeName(w_type)));
  }
  GEMMSERVE_RETURN_IF_ERROR(OneDatatype(spec.input, w_type, "initializer weights"));
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
  const int64_t m_input = spec.input.shape[0], m_indices = spec.group_indices.shape[0];
  if (m_input >= 0 && m_indices >= 0 && m_input != m_indices) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", spec.group_indices.name, "': first dimension ", m_indices,
                     " differs from M=", m_input, " of input '", spec.input.name, "'"));
  }
  if (spec.group_indices.datatypes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", spec.group_indices.name, "': no datatype"));
  }
  for (DataType t : spec.group_indices.datatypes) {
    if (t != DataType::kINT32 && t != DataType::kINT64) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", spec.group_indices.name, "': expected INT32 or INT64, got ", DataTypeName(t)));
    }
  }
  if (spec.bias) {
    const Shape& b = spec.bias->shape();
    if (b.size() != 2 || b[0] != w[0] || b[1] != w[2]) {
      return absl::InvalidArgumentError(absl::StrCat("initializer bias: expected [G, N] = [", w[0],
                                                     ",", w[2], "], got ", ShapeToString(b)));
    }
    if (spec.bias->type() != w_type) {
      return absl::InvalidArgumentError("initializer bias: datatype differs from weights");
    }
  }
  GEMMSERVE_RETURN_IF_ERROR(CheckAccuracyLevel(
      spec.accuracy_level, spec.weights_quantized ? &*spec.weights_quantized : nullptr,
      "the weights"));
  if (spec.accuracy_level == 4) {
    GEMMSERVE_RETURN_IF_ERROR(spec.weights_quantized->PackForInt8Activations().status());
  }
  std::optional<PackedWeights> packed;
  if (!spec.weights_quantized) {
    GEMMSERVE_ASSIGN_OR_RETURN(packed, PackAtLoad(spec.weights));
  }
  return std::unique_ptr<Model>(new ResidentGroupedModel(std::move(spec), std::move(packed)));
}

}  // namespace gemmserve
