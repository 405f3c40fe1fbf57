// The GEMM scheduler's decode path: each problem's B streamed once, cut into
// (problem, K slice) items so even one problem keeps every thread busy.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/common/allocation.h"
#include "server/common/status_macros.h"
#include "server/ops/gemm_paths.h"
#include "server/ops/kernels/panel_gemm.h"
#include "server/ops/kernels/quantized_gemm.h"
#include "server/ops/kernels/streaming_gemm.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace gemm_paths {

StreamingLayout LayOutStreaming(const std::vector<const GemmProblem*>& problems, int threads) {
  const int64_t count = static_cast<int64_t>(problems.size());
  StreamingLayout l;
  l.rows_at.resize(count);
  l.slices.resize(count);
  l.first_item.resize(count);
  // Every region starts on a cache line: a list may mix FP64 problems with
  // FP32 ones of odd size (found by UBSan: a misaligned double), and threads
  // accumulating into neighbouring partials must not share a line.
  auto line_up = [](int64_t bytes) { return (bytes + 63) / 64 * 64; };
  for (int64_t q = 0; q < count; ++q) {
    const GemmProblem& p = *problems[q];
    const int64_t acc = AccSize(p.type);
    // Two items per thread overall; slices no thinner than 64 rows of B.
    const int64_t wanted = (2 * threads + count - 1) / count;
    l.slices[q] = std::max<int64_t>(1, std::min<int64_t>(wanted, p.k / 64));
    l.rows_at[q] = l.rows_bytes;
    l.rows_bytes += line_up(p.m * p.k * acc);
    l.first_item[q] = static_cast<int64_t>(l.items.size());
    for (int64_t s = 0; s < l.slices[q]; ++s) {
      l.items.push_back({q, p.k * s / l.slices[q], p.k * (s + 1) / l.slices[q], l.partial_bytes});
      l.partial_bytes += line_up(p.m * p.n * acc);
    }
  }
  return l;
}

namespace {

// A streaming item of an FP32 problem whose B is packed (where BLIS's
// kernel has no partial tiles of ours): each weight panel is a row-major
// [K, weight_ld] matrix of its own, streamed the same way.
void StreamPanels(const GemmProblem& p, const StreamingItem& item, const uint8_t* rows,
                  uint8_t* partial) {
  const PanelGeometry& g = Fp32PanelGeometry();
  const int64_t stride = PanelStrideElements(g, p.k), panels = PanelCount(g, p.n);
  for (int64_t q = 0; q < panels; ++q) {
    const int64_t j0 = q * g.weight_lanes, cols = std::min(g.weight_lanes, p.n - j0);
    StreamingGemmAccumulate(DataType::kFP32, p.m, item.k_begin, item.k_end, cols,
                            reinterpret_cast<const float*>(rows), p.k,
                            static_cast<const float*>(p.b_panels) + q * stride, g.weight_ld,
                            reinterpret_cast<float*>(partial) + j0, p.n);
  }
}

}  // namespace

// Decode: each problem's B streamed once, cut into (problem, K slice) items
// so even one problem keeps every thread busy; each item accumulates into its
// own partial rows, folded per problem at the end.
absl::Status RunStreaming(const std::vector<const GemmProblem*>& problems, int threads) {
  const int64_t count = static_cast<int64_t>(problems.size());
  StreamingLayout layout = LayOutStreaming(problems, threads);
  const std::vector<StreamingItem>& items = layout.items;
  const std::vector<int64_t>& rows_at = layout.rows_at;
  const std::vector<int64_t>& slices = layout.slices;
  const std::vector<int64_t>& first_item = layout.first_item;
  const int64_t rows_bytes = layout.rows_bytes, partial_bytes = layout.partial_bytes;
  GEMMSERVE_ASSIGN_OR_RETURN(AlignedBuffer rows_buf, AlignedBuffer::Allocate(rows_bytes));
  GEMMSERVE_ASSIGN_OR_RETURN(AlignedBuffer partial_buf, AlignedBuffer::Allocate(partial_bytes));
  auto* rows = static_cast<uint8_t*>(rows_buf.data());
  auto* partial = static_cast<uint8_t*>(partial_buf.data());
  for (int64_t q = 0; q < count; ++q) GatherRows(*problems[q], rows + rows_at[q]);
  if (partial_bytes > 0) std::memset(partial, 0, static_cast<size_t>(partial_bytes));

  const int64_t item_count = static_cast<int64_t>(items.size());
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t i = 0; i < item_count; ++i) {
    const StreamingItem& item = items[i];
    const GemmProblem& p = *problems[item.problem];
    if (p.b_quantized != nullptr) {
      QuantizedGemmAccumulate(p.m, item.k_begin, item.k_end,
                              reinterpret_cast<const float*>(rows + rows_at[item.problem]), p.k,
                              *p.b_quantized, reinterpret_cast<float*>(partial + item.partial),
                              p.n);
    } else if (p.b_panels != nullptr) {
      StreamPanels(p, item, rows + rows_at[item.problem], partial + item.partial);
    } else if (p.type == DataType::kFP64) {
      StreamingGemmAccumulate(p.m, item.k_begin, item.k_end, p.n,
                              reinterpret_cast<const double*>(rows + rows_at[item.problem]), p.k,
                              static_cast<const double*>(p.b), p.ldb,
                              reinterpret_cast<double*>(partial + item.partial), p.n);
    } else {
      StreamingGemmAccumulate(p.type, p.m, item.k_begin, item.k_end, p.n,
                              reinterpret_cast<const float*>(rows + rows_at[item.problem]), p.k,
                              p.b, p.ldb, reinterpret_cast<float*>(partial + item.partial), p.n);
    }
  }
  for (int64_t q = 0; q < count; ++q) {
    const GemmProblem& p = *problems[q];
    uint8_t* first = partial + items[first_item[q]].partial;
    const int64_t len = p.m * p.n;
    for (int64_t s = 1; s < slices[q]; ++s) {
      const uint8_t* other = partial + items[first_item[q] + s].partial;
      if (p.type == DataType::kFP64) {
        auto* f = reinterpret_cast<double*>(first);
        auto* o = reinterpret_cast<const double*>(other);
        for (int64_t e = 0; e < len; ++e) f[e] += o[e];
      } else {
        auto* f = reinterpret_cast<float*>(first);
        auto* o = reinterpret_cast<const float*>(other);
        for (int64_t e = 0; e < len; ++e) f[e] += o[e];
      }
    }
    StoreRows(p, first);
  }
  return absl::OkStatus();
}

int64_t StreamingWorkBytes(const GemmWorkShape& w, int64_t t) {
  if (!IsFloatingPoint(w.type) || w.min_rows > kStreamingMaxRows) return 0;
  // Streaming problems (at most kStreamingMaxRows rows each): their rows
  // widened, and partial sums per K slice. Slices per problem are
  // ceil(2t / problems) at most, so partials hold at most the rows' own
  // results plus 4t * kStreamingMaxRows rows more.
  const int64_t acc = AccSize(w.type);
  const int64_t rows = std::min(w.rows, SaturatingMul(w.problems, kStreamingMaxRows));
  const int64_t partial_rows = SaturatingAdd(rows, 4 * t * kStreamingMaxRows);
  return SaturatingAdd(SaturatingMul(SaturatingMul(rows, w.k), acc),
                       SaturatingMul(SaturatingMul(partial_rows, w.n), acc));
}

int64_t QuantizedStreamingWorkBytes(const GemmWorkShape& w, int64_t t) {
  // Every row streams, in problems of at most kQuantizedBlockRows rows (one
  // more problem per block): the rows widened, and partial sums as for
  // streaming above with blocks of that many rows.
  const int64_t acc = AccSize(w.type);
  int64_t bytes = SaturatingMul(w.rows / kQuantizedBlockRows + 1, kProblemBookkeepingBytes);
  bytes = SaturatingAdd(bytes, SaturatingMul(SaturatingMul(w.rows, w.k), acc));
  const int64_t partial_rows = SaturatingAdd(w.rows, 4 * t * kQuantizedBlockRows);
  return SaturatingAdd(bytes, SaturatingMul(SaturatingMul(partial_rows, w.n), acc));
}

}  // namespace gemm_paths
}  // namespace gemmserve
