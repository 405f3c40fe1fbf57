// The order both VNNI builds of the 8-bit-activation kernel (int8_dot.h) walk
// the weights in, shared so that they cannot drift apart: an activation block
// of K rows at a time across every 64-column chunk, reading the packed layout
// (PackInt8Weights) in address order, a block's units at once so that every
// group of up to four rows reads them from L1; each (block, chunk, row group)
// handed to the build's own kernel with its row count fixed at compile time.
// And what the builds share of the arithmetic: the offset that makes the
// weights unsigned, and four activations as the one word vpdpbusd
// broadcasts. Header-only and ISA-neutral (plain integer arithmetic): each
// build includes it from its own translation unit, compiled with its own
// flags.
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_INT8_DOT_WALK_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_INT8_DOT_WALK_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "server/ops/kernels/int8_dot.h"
#include "server/ops/kernels/quantized_layout.h"

namespace gemmserve {
namespace int8_dot_internal {
// Internal linkage on purpose: each build's translation unit gets its own
// copy, compiled for its ISA, so the linker can never hand the AVX2 build a
// copy compiled with AVX-512.
namespace {  // NOLINT(google-build-namespaces)

inline constexpr int64_t kInt8WalkColumns = 64;  // a chunk of the packed layout
inline constexpr int64_t kInt8WalkRowGroup = 4;  // rows accumulated together

// Row-major 4-bit weights whose rows start mid-byte (an odd first element or
// N): the VNNI builds leave them to the portable one.
inline bool Int8RowsStartMidByte(const QuantizedMatrix& w) {
  return w.int8_packed == nullptr && IsFourBit(w.type) && (w.first % 2 != 0 || w.n % 2 != 0);
}

// The offset that makes the weights unsigned (+128 for INT8, +8 for INT4).
inline int32_t UnsignedOffset(QuantizedType type) {
  switch (type) {
    case QuantizedType::kInt8: return 128;
    case QuantizedType::kInt4: return 8;
    default: return 0;
  }
}

// A row's four activations at t (those at or past `end` zero) as one 32-bit
// word, the first in its low byte: what vpdpbusd multiplies each lane's four
// weights by, broadcast.
inline uint32_t ActivationQuad(const int8_t* q, int64_t t, int64_t end) {
  uint32_t four = 0;
  if (t + 4 <= end) {
    std::memcpy(&four, q + t, 4);
  } else {
    for (int64_t x = 0; t + x < end; ++x) {
      four |= static_cast<uint32_t>(static_cast<uint8_t>(q[t + x])) << (8 * x);
    }
  }
  return four;
}

// Calls group(std::integral_constant<int, count>, i0, t0, t1, j0, cols,
// packed, units) for rows [i0, i0 + count) of `rows` (count <= 4), K rows
// [t0, t1) of one activation block within [k_begin, k_end), columns
// [j0, j0 + cols) of one chunk; `packed` the chunk's `units` 256-byte units
// of that block, or null for row-major weights.
template <typename Group>
void WalkInt8Blocks(int64_t rows, const Int8Rows& a, int64_t k_begin, int64_t k_end,
                    const QuantizedMatrix& w, Group&& group) {
  const int64_t unit_rows = IsFourBit(w.type) ? 8 : 4;
  const int64_t chunks = (w.n + kInt8WalkColumns - 1) / kInt8WalkColumns;
  const int64_t whole_units = (a.block + unit_rows - 1) / unit_rows;  // every block but the last
  for (int64_t t0 = k_begin; t0 < k_end; t0 += a.block) {
    const int64_t t1 = std::min(t0 + a.block, k_end);
    const int64_t units = (std::min(t0 + a.block, w.k) - t0 + unit_rows - 1) / unit_rows;
    const uint8_t* block = w.int8_packed == nullptr
                               ? nullptr
                               : w.int8_packed + (t0 / a.block) * whole_units * chunks * 256;
    for (int64_t j0 = 0; j0 < w.n; j0 += kInt8WalkColumns) {
      const int64_t cols = std::min(kInt8WalkColumns, w.n - j0);
      const uint8_t* packed =
          block == nullptr ? nullptr : block + (j0 / kInt8WalkColumns) * units * 256;
      for (int64_t i0 = 0; i0 < rows; i0 += kInt8WalkRowGroup) {
        switch (std::min(kInt8WalkRowGroup, rows - i0)) {
          case 1:
            group(std::integral_constant<int, 1>{}, i0, t0, t1, j0, cols, packed, units);
            break;
          case 2:
            group(std::integral_constant<int, 2>{}, i0, t0, t1, j0, cols, packed, units);
            break;
          case 3:
            group(std::integral_constant<int, 3>{}, i0, t0, t1, j0, cols, packed, units);
            break;
          default: group(std::integral_constant<int, 4>{}, i0, t0, t1, j0, cols, packed, units);
        }
      }
    }
  }
}

}  // namespace
}  // namespace int8_dot_internal
}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_INT8_DOT_WALK_H_
