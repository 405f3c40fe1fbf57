// The GEMM scheduler's prefill path: every problem one packing GEMM (BLIS),
// problems and column tiles side by side on one thread each.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/common/allocation.h"
#include "server/common/status_macros.h"
#include "server/ops/gemm_paths.h"
#include "server/ops/kernels/gemm.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace gemm_paths {
namespace {

// One block of at most kGatherBlockRows rows of a problem that gathers or
// scatters: its rows to FP32/FP64 in the lane's scratch, one GEMM, the rows
// out to C.
void RunGatheredBlock(const GemmProblem& p, Lane& lane, int threads) {
  if (IsHalfPrecision(p.type)) {
    // Rows gathered and widened inside BLIS's packing step.
    HalfPackedGemm(p.type, p.m, p.n, p.k, static_cast<const uint16_t*>(p.a), p.lda, p.a_rows,
                   static_cast<const uint16_t*>(p.b), p.ldb,
                   static_cast<float*>(lane.result.data()), p.n, threads);
  } else if (p.type == DataType::kFP64) {
    GatherRows(p, lane.rows.data());
    DgemmRowMajor(p.m, p.n, p.k, static_cast<const double*>(lane.rows.data()), p.k,
                  static_cast<const double*>(p.b), p.ldb, static_cast<double*>(lane.result.data()),
                  p.n, threads);
  } else {
    GatherRows(p, lane.rows.data());
    SgemmRowMajor(p.m, p.n, p.k, static_cast<const float*>(lane.rows.data()), p.k,
                  static_cast<const float*>(p.b), p.ldb, static_cast<float*>(lane.result.data()),
                  p.n, threads);
  }
  StoreRows(p, lane.result.data());
}

absl::Status RunOnePacked(const GemmProblem& p, Lane& lane, int threads) {
  if (IsDirect(p)) {
    return GemmRowMajor(p.type, p.m, p.n, p.k, p.a, p.lda, p.b, p.ldb, p.c, p.ldc, threads);
  }
  if (!IsFloatingPoint(p.type)) {
    return absl::InternalError("gather/scatter GEMM problem of an integer type");
  }
  for (int64_t i0 = 0; i0 < p.m; i0 += kGatherBlockRows) {
    GemmProblem block = p;
    block.m = std::min(kGatherBlockRows, p.m - i0);
    // A gathered problem has both row lists, or a bias and rows in order.
    block.a_rows = p.a_rows ? p.a_rows + i0 : nullptr;
    block.c_rows = p.c_rows ? p.c_rows + i0 : nullptr;
    if (!p.a_rows) block.a = static_cast<const uint8_t*>(p.a) + i0 * p.lda * DataTypeSize(p.type);
    if (!p.c_rows) block.c = static_cast<uint8_t*>(p.c) + i0 * p.ldc * DataTypeSize(p.type);
    RunGatheredBlock(block, lane, threads);
  }
  return absl::OkStatus();
}

}  // namespace

PackedLayout LayOutPacked(const std::vector<const GemmProblem*>& problems, int threads) {
  PackedLayout l;
  const int64_t count = static_cast<int64_t>(problems.size());
  // Tiles no narrower than 128 columns, so each still runs BLIS at speed.
  constexpr int64_t kMinTileColumns = 128;
  const int64_t wanted_tiles = (2 * threads + count - 1) / count;
  for (const GemmProblem* p : problems) {
    const int64_t split =
        std::max<int64_t>(1, std::min<int64_t>(wanted_tiles, p->n / kMinTileColumns));
    for (int64_t t = 0; t < split; ++t) {
      const int64_t j0 = p->n * t / split, j1 = p->n * (t + 1) / split;
      l.tiles.push_back(ColumnTile(*p, j0, j1 - j0));
    }
  }
  l.lanes = static_cast<int>(std::min<int64_t>(threads, static_cast<int64_t>(l.tiles.size())));
  for (const GemmProblem& p : l.tiles) {
    const int64_t acc = AccSize(p.type);
    if (IsDirect(p)) {
      if (IsHalfPrecision(p.type)) {
        l.half_block_bytes =
            std::max(l.half_block_bytes, std::min(p.m, kHalfGemmRowBlock) * p.n * 4);
      }
      continue;
    }
    const int64_t block = std::min(p.m, kGatherBlockRows);
    if (!IsHalfPrecision(p.type)) l.rows_bytes = std::max(l.rows_bytes, block * p.k * acc);
    l.result_bytes = std::max(l.result_bytes, block * p.n * acc);
  }
  return l;
}

// Prefill: every problem is one packing GEMM, run side by side on one thread
// each. Problems are cut into column tiles until there are two tiles per
// thread, so a few large experts (or one big MatMul) still keep every thread
// busy. Side by side rather than one GEMM on all threads: BLIS's threads meet
// at barriers inside each GEMM, and on a shared machine a descheduled thread
// stalls its partner (2-thread BLIS calls ran 20-100x slower than 1-thread
// ones whenever the 2-core machine had other load).
absl::Status RunPacked(const std::vector<const GemmProblem*>& problems, int threads) {
  PackedLayout layout = LayOutPacked(problems, threads);
  const std::vector<GemmProblem>& tiles = layout.tiles;
  const int64_t tile_count = static_cast<int64_t>(tiles.size());
  const int lanes = layout.lanes;
  const int64_t rows_bytes = layout.rows_bytes, result_bytes = layout.result_bytes;
  std::vector<Lane> lane(lanes);
  for (Lane& l : lane) {
    GEMMSERVE_ASSIGN_OR_RETURN(l.rows, AlignedBuffer::Allocate(rows_bytes));
    GEMMSERVE_ASSIGN_OR_RETURN(l.result, AlignedBuffer::Allocate(result_bytes));
  }
  if (lanes <= 1) {
    for (const GemmProblem& p : tiles) GEMMSERVE_RETURN_IF_ERROR(RunOnePacked(p, lane[0], 1));
    return absl::OkStatus();
  }
  std::vector<absl::Status> status(static_cast<size_t>(tile_count));
#pragma omp parallel for num_threads(lanes) schedule(dynamic, 1)
  for (int64_t q = 0; q < tile_count; ++q) {
    status[q] = RunOnePacked(tiles[q], lane[omp_get_thread_num()], 1);
  }
  for (const absl::Status& s : status) GEMMSERVE_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

int64_t PackedWorkBytes(const GemmWorkShape& w, int64_t t) {
  if (w.panels || (IsFloatingPoint(w.type) && w.max_rows <= kStreamingMaxRows)) return 0;
  // Packed problems: each of up to t lanes holds one block of gathered rows
  // and its results (gathered problems), or the FP32 results of a block of
  // a half-precision GEMM (HalfGemmRowMajor); direct FP32, FP64 and integer
  // GEMMs run in place, with BLIS's own pooled packing buffers.
  const int64_t acc = AccSize(w.type);
  int64_t block_bytes = 0;
  if (w.gathered) {
    block_bytes =
        SaturatingMul(std::min(w.max_rows, kGatherBlockRows),
                      SaturatingMul(SaturatingAdd(IsHalfPrecision(w.type) ? 0 : w.k, w.n), acc));
  } else if (IsHalfPrecision(w.type)) {
    block_bytes = SaturatingMul(std::min(w.max_rows, kHalfGemmRowBlock), SaturatingMul(w.n, 4));
  }
  return SaturatingMul(block_bytes, t);
}

}  // namespace gemm_paths
}  // namespace gemmserve
