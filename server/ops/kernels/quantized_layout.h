// How the builds of the quantized kernels (quantized_gemm.h, int8_dot.h) read
// a QuantizedMatrix, written once for all of them: whether its integers are
// 4-bit, where a row's integers, scales and zero points start, which layouts
// the register kernels take, and the switches that turn a matrix's type and
// scale layout into template arguments. Header-only and ISA-neutral (plain
// integer arithmetic): each build includes it from its own translation unit,
// compiled with its own flags.
//
//   WithQuantizedType(w.type, [&](auto type) {
//     Kernel<decltype(type)::value>(w, ...);
//   });
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_QUANTIZED_LAYOUT_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_QUANTIZED_LAYOUT_H_

#include <cstdint>
#include <type_traits>

#include "server/ops/kernels/quantized_gemm.h"

namespace gemmserve {
// Internal linkage on purpose: each build's translation unit gets its own
// copy, compiled for its ISA, so the linker can never hand the portable build
// a copy compiled with AVX-512.
namespace {  // NOLINT(google-build-namespaces)

// INT4 and UINT4: two values a byte, the even element in the low nibble.
constexpr bool IsFourBit(QuantizedType type) {
  return type == QuantizedType::kInt4 || type == QuantizedType::kUint4;
}

// One row of a quantized matrix, resolved once per row: where its elements,
// scales and zero points start.
struct QuantizedRow {
  const uint8_t* data;  // the row's first element (4-bit: its byte; rows start on one)
  const float* scale;   // scale of column 0 (per column), or the row's one scale
  const float* zero;    // likewise, or nullptr
};

template <QuantizedType kType>
inline QuantizedRow RowOf(const QuantizedMatrix& w, int64_t r) {
  const int64_t e = w.first + r * w.n;
  const int64_t block = (r / w.block_rows) * w.scale_row_stride;
  return {w.data + (IsFourBit(kType) ? e >> 1 : e), w.scale + block,
          w.zero_point == nullptr ? nullptr : w.zero_point + block};
}

// Whether the register kernels of the AVX2 and AVX-512 builds take `w`:
// scales per column or one per row (blocked or not), and 4-bit rows that
// start on a byte (an even first element and N). Others take the portable
// build.
inline bool QuantizedFusedApplies(const QuantizedMatrix& w) {
  return (w.scale_col_stride == 0 || w.scale_col_stride == 1) &&
         (!IsFourBit(w.type) || (w.first % 2 == 0 && w.n % 2 == 0));
}

// f(std::integral_constant<QuantizedType, type>{}).
template <typename F>
inline void WithQuantizedType(QuantizedType type, F&& f) {
  switch (type) {
    case QuantizedType::kInt8:
      return f(std::integral_constant<QuantizedType, QuantizedType::kInt8>{});
    case QuantizedType::kUint8:
      return f(std::integral_constant<QuantizedType, QuantizedType::kUint8>{});
    case QuantizedType::kInt4:
      return f(std::integral_constant<QuantizedType, QuantizedType::kInt4>{});
    case QuantizedType::kUint4:
      return f(std::integral_constant<QuantizedType, QuantizedType::kUint4>{});
  }
}

// f(per_column, zero) as std::bool_constant: scales per column (else one per
// row, block of rows or tensor), and zero points present.
template <typename F>
inline void WithScaleLayout(const QuantizedMatrix& w, F&& f) {
  const bool per_column = w.scale_col_stride != 0, zero = w.zero_point != nullptr;
  if (per_column && zero) return f(std::true_type{}, std::true_type{});
  if (per_column) return f(std::true_type{}, std::false_type{});
  if (zero) return f(std::false_type{}, std::true_type{});
  return f(std::false_type{}, std::false_type{});
}

}  // namespace
}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_QUANTIZED_LAYOUT_H_
