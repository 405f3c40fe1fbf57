// Plain references the fuzz targets check the server's answers against,
// written apart from the code under test: numpy.matmul's shape rules derived
// here from the two shapes (not from PlanMatMul), per-element double-precision
// sums for the float types (within the kernels' rounding, gemm_testing.h),
// the reference kernel bit for bit for the integer types (which wrap), and
// GroupedMatMul by its definition, output[m, s] = input[m] @ weights[idx[m, s]]
// (+ bias[idx[m, s]]).
//
// A float element is compared only where it is meaningful whatever the
// summation order: all inputs finite and the sum of |products| far from the
// output type's overflow. NaN and Inf propagation is the integration tests'
// business (RELIABILITY M6).
//
//   CheckMatMul("matmul", a, b, y);          // aborts (a fuzzer finding) on a mismatch
//   CheckGroupedMatMul("moe", x, w, idx, bias, out);
#ifndef GEMMSERVE_FUZZ_FUZZ_REFERENCE_H_
#define GEMMSERVE_FUZZ_FUZZ_REFERENCE_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "server/ops/kernels/gemm_testing.h"
#include "server/ops/kernels/reference_gemm.h"
#include "server/tensor/datatype.h"
#include "server/tensor/shape.h"
#include "server/tensor/tensor.h"

namespace gemmserve {
namespace fuzz {

// numpy.matmul's shapes, from scratch: 1-D operands promoted, batch
// dimensions right-aligned and broadcast (a 1 stretches).
struct NumpyMatMul {
  int64_t m = 1, k = 0, n = 1;
  Shape batch, a_batch, b_batch;  // the broadcast batch, each operand's padded with 1s
  Shape out;
};

inline std::optional<NumpyMatMul> NumpyMatMulShapes(const Shape& a, const Shape& b) {
  if (a.empty() || b.empty()) return std::nullopt;
  NumpyMatMul r;
  Shape a2 = a, b2 = b;
  if (a2.size() == 1) a2.insert(a2.begin(), 1);
  if (b2.size() == 1) b2.push_back(1);
  r.m = a2[a2.size() - 2];
  r.k = a2.back();
  r.n = b2.back();
  if (b2[b2.size() - 2] != r.k) return std::nullopt;
  const size_t rank = std::max(a2.size(), b2.size()) - 2;
  r.a_batch.assign(rank - (a2.size() - 2), 1);
  r.a_batch.insert(r.a_batch.end(), a2.begin(), a2.end() - 2);
  r.b_batch.assign(rank - (b2.size() - 2), 1);
  r.b_batch.insert(r.b_batch.end(), b2.begin(), b2.end() - 2);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t x = r.a_batch[d], y = r.b_batch[d];
    if (x != y && x != 1 && y != 1) return std::nullopt;
    r.batch.push_back(x == 1 ? y : x);
  }
  r.out = r.batch;
  if (a.size() > 1) r.out.push_back(r.m);
  if (b.size() > 1) r.out.push_back(r.n);
  return r;
}

inline double MaxFinite(DataType type) {
  switch (type) {
    case DataType::kFP16: return 65504.0;
    case DataType::kBF16: return 3.38e38;
    case DataType::kFP32: return 3.40e38;
    default: return 1.79e308;
  }
}

// One float output element against its exact value; `terms` are the
// products (and bias) whose sum it is.
inline void CheckFloatElement(const char* what, DataType type, double got,
                              const std::vector<double>& terms, int64_t at) {
  double exact = 0, abs_sum = 0;
  for (double t : terms) {
    if (!std::isfinite(t)) return;  // inputs not all finite: not compared
    exact += t;
    abs_sum += std::fabs(t);
  }
  // An FP32 accumulator can overflow where the exact sum does not; the
  // output type's own overflow depends on rounding too.
  const double limit = type == DataType::kFP64 ? 1e300 : std::min(1e37, MaxFinite(type) / 4);
  if (abs_sum > limit) return;
  FUZZ_CHECK(ops_testing::WithinRoundingOfExact(type, got, exact, abs_sum,
                                                static_cast<int64_t>(terms.size())),
             "%s: element %lld is %.17g, the exact sum is %.17g (sum of |terms| %.3g, %zu terms)",
             what, static_cast<long long>(at), got, exact, abs_sum, terms.size());
}

inline void CheckMatMul(const char* what, const Tensor& a, const Tensor& b, const Tensor& y) {
  const std::optional<NumpyMatMul> s = NumpyMatMulShapes(a.shape(), b.shape());
  FUZZ_CHECK(s.has_value(), "%s: %s x %s was computed but numpy refuses it", what,
             ShapeToString(a.shape()).c_str(), ShapeToString(b.shape()).c_str());
  FUZZ_CHECK(y.shape() == s->out && y.type() == a.type(), "%s: output %s, numpy's is %s", what,
             ShapeToString(y.shape()).c_str(), ShapeToString(s->out).c_str());
  if (y.num_elements() == 0) return;  // nothing to compare (dimensions may still be huge)
  const DataType type = a.type();
  const int64_t es = DataTypeSize(type), m = s->m, k = s->k, n = s->n;
  int64_t entries = 1;
  for (int64_t d : s->batch) entries *= d;
  const auto* pa = static_cast<const uint8_t*>(a.raw_data());
  const auto* pb = static_cast<const uint8_t*>(b.raw_data());
  std::vector<uint8_t> want(static_cast<size_t>(m * n * es));
  std::vector<double> terms;
  for (int64_t entry = 0; entry < entries; ++entry) {
    // Unravel the output batch index; a dimension of 1 in an operand stays 0.
    int64_t rest = entry, a_entry = 0, b_entry = 0, a_stride = 1, b_stride = 1;
    for (size_t d = s->batch.size(); d-- > 0;) {
      const int64_t i = rest % s->batch[d];
      rest /= s->batch[d];
      a_entry += (s->a_batch[d] == 1 ? 0 : i) * a_stride;
      b_entry += (s->b_batch[d] == 1 ? 0 : i) * b_stride;
      a_stride *= s->a_batch[d];
      b_stride *= s->b_batch[d];
    }
    const uint8_t* ea = pa + a_entry * m * k * es;
    const uint8_t* eb = pb + b_entry * k * n * es;
    const uint8_t* ey = static_cast<const uint8_t*>(y.raw_data()) + entry * m * n * es;
    if (!IsFloatingPoint(type)) {
      ReferenceGemm(type, m, n, k, ea, k, eb, n, want.data(), n);
      FUZZ_CHECK(want.empty() || std::memcmp(want.data(), ey, want.size()) == 0,
                 "%s: integer %s x %s, batch entry %lld differs from the reference", what,
                 ShapeToString(a.shape()).c_str(), ShapeToString(b.shape()).c_str(),
                 static_cast<long long>(entry));
      continue;
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        terms.clear();
        for (int64_t p = 0; p < k; ++p) {
          terms.push_back(ops_testing::ValueAt(type, ea, i * k + p) *
                          ops_testing::ValueAt(type, eb, p * n + j));
        }
        CheckFloatElement(what, type, ops_testing::ValueAt(type, ey, i * n + j), terms,
                          entry * m * n + i * n + j);
      }
    }
  }
}

// `indices` INT32 or INT64 [M, S], all in range; `bias` may be null.
inline void CheckGroupedMatMul(const char* what, const Tensor& x, const Tensor& w,
                               const Tensor& indices, const Tensor* bias, const Tensor& out) {
  FUZZ_CHECK(x.shape().size() == 2 && w.shape().size() == 3 && indices.shape().size() == 2,
             "%s: ranks", what);
  const int64_t m = x.shape()[0], k = x.shape()[1], g = w.shape()[0], n = w.shape()[2];
  const int64_t s = indices.shape()[1];
  FUZZ_CHECK(out.shape() == (Shape{m, s, n}) && out.type() == x.type(),
             "%s: output %s, expected [%lld,%lld,%lld]", what, ShapeToString(out.shape()).c_str(),
             static_cast<long long>(m), static_cast<long long>(s), static_cast<long long>(n));
  const DataType type = x.type();
  std::vector<double> terms;
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t slot = 0; slot < s; ++slot) {
      const int64_t at = t * s + slot;
      const int64_t e = indices.type() == DataType::kINT32 ? indices.data<int32_t>()[at]
                                                           : indices.data<int64_t>()[at];
      FUZZ_CHECK(e >= 0 && e < g, "%s: index %lld was computed with G=%lld", what,
                 static_cast<long long>(e), static_cast<long long>(g));
      for (int64_t j = 0; j < n; ++j) {
        terms.clear();
        for (int64_t p = 0; p < k; ++p) {
          terms.push_back(ops_testing::ValueAt(type, x.raw_data(), t * k + p) *
                          ops_testing::ValueAt(type, w.raw_data(), (e * k + p) * n + j));
        }
        if (bias != nullptr)
          terms.push_back(ops_testing::ValueAt(type, bias->raw_data(), e * n + j));
        CheckFloatElement(what, type, ops_testing::ValueAt(type, out.raw_data(), at * n + j), terms,
                          at * n + j);
      }
    }
  }
}

}  // namespace fuzz
}  // namespace gemmserve

#endif  // GEMMSERVE_FUZZ_FUZZ_REFERENCE_H_
