// Fuzzes the shape arithmetic every wire dimension goes through
// (server/tensor/shape.h) and the operators' plans (PlanMatMul,
// PlanGroupedMatMul) on any dimensions: negative, INT64_MIN, products right
// at the int64 boundary, ranks past kMaxRank. Each result is compared with an
// oracle that computes in 128-bit integers, so an error must come exactly
// when the true value does not fit, and a value must be exact; UBSan turns
// any signed overflow inside the library into a crash.
//
// Input: one datatype byte, a rank byte and dimensions (ByteReader::Dimension)
// for each of four shapes A, B, C, D, then a byte whose low bit says whether
// D is GroupedMatMul's bias. Dimensions equal across shapes come often
// (small values and kSpecial), so the plans get past their K and M checks.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "server/ops/grouped_matmul.h"
#include "server/ops/matmul.h"
#include "server/tensor/datatype.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace fuzz {
namespace {

using int128 = __int128;
constexpr int128 kInt64Max = std::numeric_limits<int64_t>::max();

std::optional<int64_t> Fit(int128 v) {
  if (v < std::numeric_limits<int64_t>::min() || v > kInt64Max) return std::nullopt;
  return static_cast<int64_t>(v);
}

// numpy's rule, as shape.h documents it: rank <= kMaxRank, no negative
// dimension, and the product of the non-zero dimensions fits.
std::optional<int64_t> OracleElementCount(const Shape& shape) {
  if (static_cast<int64_t>(shape.size()) > kMaxRank) return std::nullopt;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
  }
  int128 product = 1;
  bool zero = false;
  for (int64_t d : shape) {
    if (d == 0) {
      zero = true;
      continue;
    }
    product *= d;
    if (product > kInt64Max) return std::nullopt;
  }
  return zero ? 0 : static_cast<int64_t>(product);
}

std::optional<int64_t> OracleByteSize(const Shape& shape, DataType t) {
  const std::optional<int64_t> count = OracleElementCount(shape);
  if (!count) return std::nullopt;
  return Fit(int128{*count} * DataTypeSize(t));
}

std::optional<Shape> OracleBroadcast(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i + a.size() >= rank ? a[i + a.size() - rank] : 1;
    const int64_t db = i + b.size() >= rank ? b[i + b.size() - rank] : 1;
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

int64_t SaturatingFlops(int64_t output_elements, int64_t k) {
  const int128 f = int128{output_elements} * k * 2;
  return f > kInt64Max ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(f);
}

std::optional<MatMulPlan> OracleMatMul(const Shape& a, const Shape& b) {
  if (a.empty() || b.empty()) return std::nullopt;
  if (!OracleElementCount(a) || !OracleElementCount(b)) return std::nullopt;
  MatMulPlan p;
  const bool a_vector = a.size() == 1, b_vector = b.size() == 1;
  p.m = a_vector ? 1 : a[a.size() - 2];
  p.k = a.back();
  p.n = b_vector ? 1 : b.back();
  if ((b_vector ? b[0] : b[b.size() - 2]) != p.k) return std::nullopt;
  const Shape a_batch(a.begin(), a.end() - (a_vector ? 0 : 2));
  const Shape b_batch(b.begin(), b.end() - (b_vector ? 0 : 2));
  const std::optional<Shape> batch =
      OracleBroadcast(a_vector ? Shape{} : a_batch, b_vector ? Shape{} : b_batch);
  if (!batch) return std::nullopt;
  p.batch_shape = *batch;
  p.output_shape = *batch;
  if (!a_vector) p.output_shape.push_back(p.m);
  if (!b_vector) p.output_shape.push_back(p.n);
  const std::optional<int64_t> batch_count = OracleElementCount(p.batch_shape);
  const std::optional<int64_t> elements = OracleElementCount(p.output_shape);
  if (!batch_count || !elements) return std::nullopt;
  p.batch_count = *batch_count;
  p.output_elements = *elements;
  p.flops = SaturatingFlops(p.output_elements, p.k);
  return p;
}

std::optional<GroupedMatMulPlan> OracleGroupedMatMul(const Shape& input, const Shape& weights,
                                                     const Shape& indices, const Shape* bias) {
  if (input.size() != 2 || weights.size() != 3 || indices.size() != 2) return std::nullopt;
  if (!OracleElementCount(input) || !OracleElementCount(weights) || !OracleElementCount(indices)) {
    return std::nullopt;
  }
  GroupedMatMulPlan p;
  p.m = input[0];
  p.k = input[1];
  p.g = weights[0];
  p.n = weights[2];
  p.s = indices[1];
  if (weights[1] != p.k || indices[0] != p.m) return std::nullopt;
  if (bias != nullptr && *bias != Shape{p.g, p.n}) return std::nullopt;
  p.has_bias = bias != nullptr;
  p.output_shape = {p.m, p.s, p.n};
  const std::optional<int64_t> elements = OracleElementCount(p.output_shape);
  const std::optional<int64_t> pairs = Fit(int128{p.m} * p.s);
  if (!elements || !pairs) return std::nullopt;
  if (p.g == 0 && *pairs > 0) return std::nullopt;
  p.output_elements = *elements;
  p.flops = SaturatingFlops(p.output_elements, p.k);
  return p;
}

Shape ReadShape(ByteReader& in) {
  // Up to kMaxRank + 3, so ranks over the limit come up too.
  const int64_t rank = in.Small(kMaxRank + 3);
  Shape shape(static_cast<size_t>(rank));
  for (int64_t& d : shape) d = in.Dimension();
  return shape;
}

void CheckShapeArithmetic(const Shape& shape, DataType type) {
  const std::string s = ShapeToString(shape);
  // At most eight dimensions of at most 20 characters are spelled out.
  FUZZ_CHECK(s.size() <= 8 * 21 + 32, "ShapeToString gave %zu characters", s.size());

  const absl::StatusOr<int64_t> count = ElementCount(shape);
  const std::optional<int64_t> want_count = OracleElementCount(shape);
  FUZZ_CHECK(count.ok() == want_count.has_value(), "ElementCount(%s): %s, oracle %s", s.c_str(),
             count.status().ToString().c_str(), want_count ? "fits" : "error");
  if (count.ok())
    FUZZ_CHECK(*count == *want_count, "ElementCount(%s) = %lld", s.c_str(),
               static_cast<long long>(*count));
  if (!count.ok())
    FUZZ_CHECK(absl::IsInvalidArgument(count.status()), "code %s",
               count.status().ToString().c_str());

  const absl::StatusOr<int64_t> bytes = ByteSize(shape, type);
  const std::optional<int64_t> want_bytes = OracleByteSize(shape, type);
  FUZZ_CHECK(bytes.ok() == want_bytes.has_value(), "ByteSize(%s, %s): %s", s.c_str(),
             std::string(DataTypeName(type)).c_str(), bytes.status().ToString().c_str());
  if (bytes.ok())
    FUZZ_CHECK(*bytes == *want_bytes, "ByteSize(%s) = %lld", s.c_str(),
               static_cast<long long>(*bytes));
}

void CheckCheckedOps(int64_t a, int64_t b) {
  const absl::StatusOr<int64_t> mul = CheckedMul(a, b);
  const std::optional<int64_t> want_mul = a < 0 || b < 0 ? std::nullopt : Fit(int128{a} * b);
  FUZZ_CHECK(mul.ok() == want_mul.has_value() && (!mul.ok() || *mul == *want_mul),
             "CheckedMul(%lld, %lld): %s", static_cast<long long>(a), static_cast<long long>(b),
             mul.ok() ? "ok" : mul.status().ToString().c_str());
  const absl::StatusOr<int64_t> add = CheckedAdd(a, b);
  const std::optional<int64_t> want_add = a < 0 || b < 0 ? std::nullopt : Fit(int128{a} + b);
  FUZZ_CHECK(add.ok() == want_add.has_value() && (!add.ok() || *add == *want_add),
             "CheckedAdd(%lld, %lld): %s", static_cast<long long>(a), static_cast<long long>(b),
             add.ok() ? "ok" : add.status().ToString().c_str());
}

void CheckBroadcast(const Shape& a, const Shape& b) {
  const absl::StatusOr<Shape> got = BroadcastShapes(a, b);
  const std::optional<Shape> want = OracleBroadcast(a, b);
  FUZZ_CHECK(got.ok() == want.has_value() && (!got.ok() || *got == *want),
             "BroadcastShapes(%s, %s): %s", ShapeToString(a).c_str(), ShapeToString(b).c_str(),
             got.ok() ? ShapeToString(*got).c_str() : got.status().ToString().c_str());
}

void CheckMatMul(const Shape& a, const Shape& b) {
  const absl::StatusOr<MatMulPlan> got = PlanMatMul(a, b);
  const std::optional<MatMulPlan> want = OracleMatMul(a, b);
  const std::string what = ShapeToString(a) + " x " + ShapeToString(b);
  FUZZ_CHECK(got.ok() == want.has_value(), "PlanMatMul(%s): %s, oracle %s", what.c_str(),
             got.status().ToString().c_str(), want ? "ok" : "error");
  if (!got.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(got.status()), "PlanMatMul(%s): code %s", what.c_str(),
               got.status().ToString().c_str());
    return;
  }
  FUZZ_CHECK(got->m == want->m && got->n == want->n && got->k == want->k &&
                 got->batch_shape == want->batch_shape && got->output_shape == want->output_shape &&
                 got->batch_count == want->batch_count &&
                 got->output_elements == want->output_elements && got->flops == want->flops,
             "PlanMatMul(%s): output %s, %lld elements, %lld flops", what.c_str(),
             ShapeToString(got->output_shape).c_str(), static_cast<long long>(got->output_elements),
             static_cast<long long>(got->flops));
  // The operand batches are left-padded with 1 to the batch rank.
  FUZZ_CHECK(got->a_batch.size() == got->batch_shape.size() &&
                 got->b_batch.size() == got->batch_shape.size(),
             "PlanMatMul(%s): operand batch ranks", what.c_str());
}

void CheckGroupedMatMul(const Shape& input, const Shape& weights, const Shape& indices,
                        const Shape* bias) {
  const absl::StatusOr<GroupedMatMulPlan> got = PlanGroupedMatMul(input, weights, indices, bias);
  const std::optional<GroupedMatMulPlan> want = OracleGroupedMatMul(input, weights, indices, bias);
  const std::string what = ShapeToString(input) + ", " + ShapeToString(weights) + ", " +
                           ShapeToString(indices) + (bias ? ", " + ShapeToString(*bias) : "");
  FUZZ_CHECK(got.ok() == want.has_value(), "PlanGroupedMatMul(%s): %s, oracle %s", what.c_str(),
             got.status().ToString().c_str(), want ? "ok" : "error");
  if (!got.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(got.status()), "PlanGroupedMatMul(%s): code %s",
               what.c_str(), got.status().ToString().c_str());
    return;
  }
  FUZZ_CHECK(got->m == want->m && got->k == want->k && got->n == want->n && got->g == want->g &&
                 got->s == want->s && got->has_bias == want->has_bias &&
                 got->output_shape == want->output_shape &&
                 got->output_elements == want->output_elements && got->flops == want->flops,
             "PlanGroupedMatMul(%s): output %s, %lld elements, %lld flops", what.c_str(),
             ShapeToString(got->output_shape).c_str(), static_cast<long long>(got->output_elements),
             static_cast<long long>(got->flops));
}

}  // namespace
}  // namespace fuzz
}  // namespace gemmserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gemmserve;
  using namespace gemmserve::fuzz;
  ByteReader in(data, size);
  const DataType type = kAllDataTypes[in.Byte() % std::size(kAllDataTypes)];
  const Shape a = ReadShape(in), b = ReadShape(in), c = ReadShape(in), d = ReadShape(in);
  const bool has_bias = in.Byte() & 1;

  for (const Shape* s : {&a, &b, &c, &d}) CheckShapeArithmetic(*s, type);
  for (size_t i = 0; i + 1 < a.size(); i += 2) CheckCheckedOps(a[i], a[i + 1]);
  CheckBroadcast(a, b);
  CheckMatMul(a, b);
  CheckGroupedMatMul(a, b, c, has_bias ? &d : nullptr);
  return 0;
}
