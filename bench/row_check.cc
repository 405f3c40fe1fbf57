#include "bench/row_check.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

struct FloatRounding {
  double accumulate;  // unit roundoff of the accumulation type
  double output;      // unit roundoff of the output type
  double subnormal;   // spacing of the output type's subnormals
};

template <typename T, typename Load>
absl::Status CheckFloatRow(const T* a, const T* b, int64_t k, int64_t n, const T* c, Load load,
                           FloatRounding rounding, absl::string_view what) {
  std::vector<double> ref(n, 0.0), magnitude(n, 0.0);
  for (int64_t p = 0; p < k; ++p) {
    const double av = load(a[p]);
    const T* b_row = b + p * n;
    for (int64_t j = 0; j < n; ++j) {
      const double product = av * load(b_row[j]);
      ref[j] += product;
      magnitude[j] += std::fabs(product);
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    const double got = load(c[j]);
    const double tolerance = 2.0 * static_cast<double>(k) * rounding.accumulate * magnitude[j] +
                             rounding.output * std::fabs(ref[j]) + rounding.subnormal;
    if (!(std::fabs(got - ref[j]) <= tolerance)) {  // also catches NaN
      return absl::InternalError(absl::StrCat(what, " column ", j, ": got ", got, ", expected ",
                                              ref[j], " (tolerance ", tolerance, ")"));
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status CheckIntegerRow(const T* a, const T* b, int64_t k, int64_t n, const T* c,
                             absl::string_view what) {
  using U = std::make_unsigned_t<T>;
  std::vector<U> ref(n, 0);
  for (int64_t p = 0; p < k; ++p) {
    const U av = static_cast<U>(a[p]);
    for (int64_t j = 0; j < n; ++j) ref[j] += av * static_cast<U>(b[p * n + j]);
  }
  for (int64_t j = 0; j < n; ++j) {
    if (static_cast<U>(c[j]) != ref[j]) {
      return absl::InternalError(
          absl::StrCat(what, " column ", j, ": got ", c[j], ", expected ", static_cast<T>(ref[j])));
    }
  }
  return absl::OkStatus();
}

// Rows 0, 1, count/2 and count-1 (fewer when count is small).
std::set<int64_t> SampleRows(int64_t count) {
  if (count <= 0) return {};
  return {0, std::min<int64_t>(1, count - 1), count / 2, count - 1};
}

}  // namespace

absl::Status CheckGemmRow(DataType type, const void* a_row, const void* b, int64_t k, int64_t n,
                          const void* c_row, absl::string_view what) {
  constexpr double kFloatU = 0x1p-24, kDoubleU = 0x1p-53;
  auto as_double = [](auto v) { return static_cast<double>(v); };
  switch (type) {
    case DataType::kFP32:
      return CheckFloatRow(static_cast<const float*>(a_row), static_cast<const float*>(b), k, n,
                           static_cast<const float*>(c_row), as_double,
                           FloatRounding{kFloatU, kFloatU, 0x1p-149}, what);
    case DataType::kFP64:
      return CheckFloatRow(static_cast<const double*>(a_row), static_cast<const double*>(b), k, n,
                           static_cast<const double*>(c_row), as_double,
                           FloatRounding{kDoubleU, kDoubleU, 0x1p-1074}, what);
    case DataType::kFP16:
      return CheckFloatRow(
          static_cast<const uint16_t*>(a_row), static_cast<const uint16_t*>(b), k, n,
          static_cast<const uint16_t*>(c_row),
          [](uint16_t v) { return static_cast<double>(HalfToFloat(v)); },
          FloatRounding{kFloatU, 0x1p-11, 0x1p-24}, what);
    case DataType::kBF16:
      return CheckFloatRow(
          static_cast<const uint16_t*>(a_row), static_cast<const uint16_t*>(b), k, n,
          static_cast<const uint16_t*>(c_row),
          [](uint16_t v) { return static_cast<double>(BFloat16ToFloat(v)); },
          FloatRounding{kFloatU, 0x1p-8, 0x1p-133}, what);
    case DataType::kINT32:
      return CheckIntegerRow(static_cast<const int32_t*>(a_row), static_cast<const int32_t*>(b), k,
                             n, static_cast<const int32_t*>(c_row), what);
    case DataType::kINT64:
      return CheckIntegerRow(static_cast<const int64_t*>(a_row), static_cast<const int64_t*>(b), k,
                             n, static_cast<const int64_t*>(c_row), what);
    case DataType::kUINT32:
      return CheckIntegerRow(static_cast<const uint32_t*>(a_row), static_cast<const uint32_t*>(b),
                             k, n, static_cast<const uint32_t*>(c_row), what);
    case DataType::kUINT64:
      return CheckIntegerRow(static_cast<const uint64_t*>(a_row), static_cast<const uint64_t*>(b),
                             k, n, static_cast<const uint64_t*>(c_row), what);
  }
  return absl::InternalError("unhandled datatype in CheckGemmRow");
}

absl::Status CheckGroupedMatMulSample(const GroupedMatMulPlan& plan, const Tensor& input,
                                      const Tensor& weights, const Tensor& indices,
                                      const Tensor& output) {
  const int64_t element = DataTypeSize(input.type());
  const auto* x = static_cast<const uint8_t*>(input.raw_data());
  const auto* w = static_cast<const uint8_t*>(weights.raw_data());
  const auto* out = static_cast<const uint8_t*>(output.raw_data());
  for (int64_t token : SampleRows(plan.m)) {
    for (int64_t slot = 0; slot < plan.s; ++slot) {
      const int64_t p = token * plan.s + slot;
      const int64_t group = indices.type() == DataType::kINT32 ? int64_t{indices.data<int32_t>()[p]}
                                                               : indices.data<int64_t>()[p];
      GEMMSERVE_RETURN_IF_ERROR(CheckGemmRow(
          input.type(), x + token * plan.k * element, w + group * plan.k * plan.n * element, plan.k,
          plan.n, out + p * plan.n * element,
          absl::StrCat("output[", token, ",", slot, ",:] (group ", group, ")")));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMatMulSample(const MatMulPlan& plan, const Tensor& a, const Tensor& b,
                               const Tensor& y) {
  const int64_t element = DataTypeSize(a.type());
  const int64_t b_matrix = plan.k * plan.n;
  const bool b_batched = b.num_elements() != b_matrix;
  const auto* a_bytes = static_cast<const uint8_t*>(a.raw_data());
  const auto* b_bytes = static_cast<const uint8_t*>(b.raw_data());
  const auto* y_bytes = static_cast<const uint8_t*>(y.raw_data());
  for (int64_t row : SampleRows(plan.batch_count * plan.m)) {
    const int64_t batch = b_batched ? row / plan.m : 0;
    GEMMSERVE_RETURN_IF_ERROR(CheckGemmRow(
        a.type(), a_bytes + row * plan.k * element, b_bytes + batch * b_matrix * element, plan.k,
        plan.n, y_bytes + row * plan.n * element, absl::StrCat("output row ", row)));
  }
  return absl::OkStatus();
}

}  // namespace gemmserve
