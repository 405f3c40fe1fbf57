#include "server/ops/matmul.h"

#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/ops/gemm_scheduler.h"

namespace gemmserve {

namespace {

// Every batch entry multiplies by the same B.
bool BShared(const MatMulPlan& plan) {
  for (int64_t d : plan.b_batch) {
    if (d != 1) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<MatMulPlan> PlanMatMul(absl::Span<const int64_t> a_shape,
                                      absl::Span<const int64_t> b_shape) {
  if (a_shape.empty() || b_shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", a_shape.empty() ? "A" : "B",
                     "': MatMul needs operands of rank >= 1, got a scalar (shape [])"));
  }
  // Validates ranks, signs and that each operand's element count fits.
  GEMMSERVE_RETURN_IF_ERROR(ElementCount(a_shape).status());
  GEMMSERVE_RETURN_IF_ERROR(ElementCount(b_shape).status());

  const bool a_vector = a_shape.size() == 1;
  const bool b_vector = b_shape.size() == 1;
  MatMulPlan plan;
  plan.m = a_vector ? 1 : a_shape[a_shape.size() - 2];
  plan.k = a_shape.back();
  const int64_t k_b = b_vector ? b_shape[0] : b_shape[b_shape.size() - 2];
  plan.n = b_vector ? 1 : b_shape.back();
  if (plan.k != k_b) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul contracted dimensions differ: A ",
                                                   ShapeToString(a_shape), " has K=", plan.k,
                                                   ", B ", ShapeToString(b_shape), " has K=", k_b));
  }
  const auto a_batch =
      a_vector ? absl::Span<const int64_t>() : a_shape.subspan(0, a_shape.size() - 2);
  const auto b_batch =
      b_vector ? absl::Span<const int64_t>() : b_shape.subspan(0, b_shape.size() - 2);
  GEMMSERVE_ASSIGN_OR_RETURN(plan.batch_shape, BroadcastShapes(a_batch, b_batch));
  const size_t rank = plan.batch_shape.size();
  plan.a_batch.assign(rank - a_batch.size(), 1);
  plan.a_batch.insert(plan.a_batch.end(), a_batch.begin(), a_batch.end());
  plan.b_batch.assign(rank - b_batch.size(), 1);
  plan.b_batch.insert(plan.b_batch.end(), b_batch.begin(), b_batch.end());

  plan.output_shape = plan.batch_shape;
  if (!a_vector) plan.output_shape.push_back(plan.m);
  if (!b_vector) plan.output_shape.push_back(plan.n);
  GEMMSERVE_ASSIGN_OR_RETURN(plan.batch_count, ElementCount(plan.batch_shape));
  GEMMSERVE_ASSIGN_OR_RETURN(plan.output_elements, ElementCount(plan.output_shape));
  plan.flops = SaturatingMul(SaturatingMul(plan.output_elements, plan.k), 2);
  return plan;
}

absl::Status RunMatMul(const MatMulPlan& plan, const Tensor& a, const Tensor& b, Tensor* y,
                       int threads) {
  std::vector<GemmProblem> problems;
  GEMMSERVE_RETURN_IF_ERROR(AppendMatMulProblems(plan, a, b, y, &problems));
  return RunGemmProblems(problems, threads);
}

absl::Status AppendMatMulProblems(const MatMulPlan& plan, const Tensor& a, const Tensor& b,
                                  Tensor* y, std::vector<GemmProblem>* out) {
  const DataType type = a.type();
  if (b.type() != type || y->type() != type) {
    return absl::InternalError("RunMatMul: operand datatypes differ");
  }
  if (plan.output_elements == 0) return absl::OkStatus();
  if (plan.k == 0) {  // empty sums
    std::memset(y->raw_data(), 0, static_cast<size_t>(y->byte_size()));
    return absl::OkStatus();
  }
  std::vector<GemmProblem>& problems = *out;
  const int64_t es = DataTypeSize(type);
  const int64_t m = plan.m, n = plan.n, k = plan.k;
  const auto* a_bytes = static_cast<const uint8_t*>(a.raw_data());
  const auto* b_bytes = static_cast<const uint8_t*>(b.raw_data());
  auto* y_bytes = static_cast<uint8_t*>(y->raw_data());

  const bool b_shared = BShared(plan);
  auto add = [&](int64_t rows, int64_t a_off, int64_t b_off, int64_t entry) {
    GemmProblem p;
    p.type = type;
    p.m = rows;
    p.n = n;
    p.k = k;
    p.a = a_bytes + a_off * m * k * es;
    p.lda = k;
    p.b = b_bytes + b_off * k * n * es;
    p.ldb = n;
    p.c = y_bytes + entry * m * n * es;
    p.ldc = n;
    problems.push_back(p);
  };
  if (b_shared) {
    // Every batch entry multiplies by the same B and the output batch is A's,
    // so the batch stacks onto M: one [batch*M, K] x [K, N] GEMM.
    add(plan.batch_count * m, 0, 0, 0);
    return absl::OkStatus();
  }
  // One problem per batch entry. Row-major strides (in matrices) of each
  // operand over the batch dims; a broadcast dimension has stride 0.
  const size_t rank = plan.batch_shape.size();
  std::vector<int64_t> a_stride(rank), b_stride(rank), index(rank, 0);
  int64_t sa = 1, sb = 1;
  for (size_t d = rank; d-- > 0;) {
    a_stride[d] = plan.a_batch[d] == 1 ? 0 : sa;
    b_stride[d] = plan.b_batch[d] == 1 ? 0 : sb;
    sa *= plan.a_batch[d];
    sb *= plan.b_batch[d];
  }
  problems.reserve(problems.size() + static_cast<size_t>(plan.batch_count));
  int64_t a_off = 0, b_off = 0;
  for (int64_t entry = 0; entry < plan.batch_count; ++entry) {
    add(m, a_off, b_off, entry);
    // Odometer increment of the batch index, keeping the offsets in step.
    for (size_t d = rank; d-- > 0;) {
      a_off += a_stride[d];
      b_off += b_stride[d];
      if (++index[d] < plan.batch_shape[d]) break;
      a_off -= a_stride[d] * index[d];
      b_off -= b_stride[d] * index[d];
      index[d] = 0;
    }
  }
  return absl::OkStatus();
}

int64_t MatMulWorkBytes(const MatMulPlan& plan, DataType type, int threads) {
  GemmWorkShape work;
  work.type = type;
  work.k = plan.k;
  work.n = plan.n;
  if (plan.output_elements == 0 || plan.k == 0) return 0;  // no problem at all
  work.rows = SaturatingMul(plan.batch_count, plan.m);
  if (BShared(plan)) {
    work.problems = 1;
    work.min_rows = work.max_rows = work.rows;
  } else {
    work.problems = plan.batch_count;
    work.min_rows = work.max_rows = plan.m;
  }
  return GemmWorkBytes(work, threads);
}

}  // namespace gemmserve
