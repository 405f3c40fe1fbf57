#include "server/ops/gemm_scheduler.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "server/common/allocation.h"
#include "server/common/status_macros.h"
#include "server/ops/gemm_paths.h"
#include "server/ops/kernels/panel_gemm.h"
#include "server/ops/packed_weights.h"
#include "server/tensor/shape.h"

namespace gemmserve {

using namespace gemm_paths;  // NOLINT: the paths are this file's parts

int64_t GemmWorkBytes(const GemmWorkShape& w, int threads) {
  const int64_t t = std::max(threads, 1);
  if (w.problems <= 0 || w.rows <= 0 || w.n <= 0) {
    return SaturatingMul(w.problems, kProblemBookkeepingBytes);
  }
  // The per-problem bookkeeping, and the items or tiles beyond one per
  // problem that splitting for `t` threads adds (at most 2t); then each
  // path's scratch, as the path states it beside its layout.
  const int64_t bookkeeping =
      SaturatingMul(SaturatingAdd(w.problems, 2 * t), kProblemBookkeepingBytes);
  if (w.quantized && w.int8_activations) {
    return SaturatingAdd(bookkeeping, Int8DotWorkBytes(w, t));
  }
  if (w.quantized) {
    return SaturatingAdd(bookkeeping, SaturatingAdd(QuantizedStreamingWorkBytes(w, t),
                                                    QuantizedPanelWorkBytes(w, t)));
  }
  return SaturatingAdd(
      bookkeeping, SaturatingAdd(StreamingWorkBytes(w, t),
                                 SaturatingAdd(PanelWorkBytes(w, t), PackedWorkBytes(w, t))));
}

namespace {

// The problems with work, by path.
// The problems by path; `int8`: quantized weights on 8-bit activations.
struct Paths {
  std::vector<const GemmProblem*> streaming, packed, panels, int8;
};

void Split(absl::Span<const GemmProblem> problems, Paths* paths) {
  std::vector<const GemmProblem*>* streaming = &paths->streaming;
  std::vector<const GemmProblem*>* packed = &paths->packed;
  std::vector<const GemmProblem*>* panels = &paths->panels;
  for (const GemmProblem& p : problems) {
    if (p.m <= 0 || p.n <= 0) continue;
    if (p.b_quantized != nullptr && p.int8_activations) {
      paths->int8.push_back(&p);
      continue;
    }
    if (p.b_quantized != nullptr) {
      (QuantizedOnPanels(p) ? panels : streaming)->push_back(&p);
      continue;
    }
    // Panels stream like row-major weights (each is a row-major [K, ld]
    // matrix) unless the panel kernels compute few rows without waste: BF16
    // and FP16 panels, and FP32 where it has partial tiles (one run: FP16
    // streaming on its panels took 4.4 and 10.7 ms for olmoe M = 4 and 16,
    // its tiles 3.1 and 6.8).
    const bool panel_rows =
        p.b_panels != nullptr &&
        (IsHalfPrecision(p.type) ||
         (p.type == DataType::kFP32 && PanelGemmHasPartialTiles(Fp32PanelGeometry())));
    const bool stream = IsFloatingPoint(p.type) && p.m <= kStreamingMaxRows && !panel_rows;
    if ((p.b_panels != nullptr && !stream) || PacksWeightsPerCall(p)) {
      panels->push_back(&p);
      continue;
    }
    (stream ? streaming : packed)->push_back(&p);
  }
}

// A quantized problem with work and more rows than one block, which streams.
bool Cut(const GemmProblem& p) {
  return p.b_quantized != nullptr && p.m > kQuantizedBlockRows && p.n > 0 &&
         (p.int8_activations || !QuantizedOnPanels(p));
}

// The problems with quantized problems of more than kQuantizedBlockRows
// rows cut into blocks of that many: `storage` holds the list when any is
// cut (the returned span then points into it).
absl::Span<const GemmProblem> CutQuantized(absl::Span<const GemmProblem> problems,
                                           std::vector<GemmProblem>* storage) {
  size_t blocks = 0;
  bool cut = false;
  for (const GemmProblem& p : problems) {
    const bool big = Cut(p);
    cut |= big;
    blocks += big ? static_cast<size_t>((p.m + kQuantizedBlockRows - 1) / kQuantizedBlockRows) : 1;
  }
  if (!cut) return problems;
  storage->reserve(blocks);
  for (const GemmProblem& p : problems) {
    if (!Cut(p)) {
      storage->push_back(p);
      continue;
    }
    const int64_t es = DataTypeSize(p.type);
    for (int64_t i0 = 0; i0 < p.m; i0 += kQuantizedBlockRows) {
      GemmProblem b = p;
      b.m = std::min(kQuantizedBlockRows, p.m - i0);
      if (p.a_rows != nullptr) {
        b.a_rows = p.a_rows + i0;
      } else {
        b.a = static_cast<const uint8_t*>(p.a) + i0 * p.lda * es;
      }
      if (p.c_rows != nullptr) {
        b.c_rows = p.c_rows + i0;
      } else {
        b.c = static_cast<uint8_t*>(p.c) + i0 * p.ldc * es;
      }
      storage->push_back(b);
    }
  }
  return *storage;
}

absl::Status RunGemmProblemsOrThrow(absl::Span<const GemmProblem> all, int threads) {
  threads = std::max(threads, 1);
  std::vector<GemmProblem> storage;
  absl::Span<const GemmProblem> problems = CutQuantized(all, &storage);
  Paths paths;
  Split(problems, &paths);
  if (!paths.streaming.empty()) GEMMSERVE_RETURN_IF_ERROR(RunStreaming(paths.streaming, threads));
  if (!paths.packed.empty()) GEMMSERVE_RETURN_IF_ERROR(RunPacked(paths.packed, threads));
  if (!paths.panels.empty()) GEMMSERVE_RETURN_IF_ERROR(RunPanels(paths.panels, threads));
  if (!paths.int8.empty()) GEMMSERVE_RETURN_IF_ERROR(RunInt8Dot(paths.int8, threads));
  return absl::OkStatus();
}

}  // namespace

int64_t GemmScratchBytes(absl::Span<const GemmProblem> all, int threads) {
  threads = std::max(threads, 1);
  std::vector<GemmProblem> storage;
  absl::Span<const GemmProblem> problems = CutQuantized(all, &storage);
  Paths paths;
  Split(problems, &paths);
  const std::vector<const GemmProblem*>& streaming = paths.streaming;
  const std::vector<const GemmProblem*>& packed = paths.packed;
  const std::vector<const GemmProblem*>& panels = paths.panels;
  int64_t bytes = static_cast<int64_t>(
      (all.size() + storage.size()) * sizeof(GemmProblem) +
      (streaming.size() + packed.size() + panels.size() + paths.int8.size()) * sizeof(void*));
  if (!streaming.empty()) {
    const StreamingLayout s = LayOutStreaming(streaming, threads);
    bytes += s.rows_bytes + s.partial_bytes +
             static_cast<int64_t>(s.items.size() * sizeof(StreamingItem) +
                                  3 * streaming.size() * sizeof(int64_t));
  }
  if (!packed.empty()) {
    const PackedLayout p = LayOutPacked(packed, threads);
    bytes += static_cast<int64_t>(p.lanes) * (p.rows_bytes + p.result_bytes + p.half_block_bytes) +
             static_cast<int64_t>(p.tiles.size() * (sizeof(GemmProblem) + sizeof(absl::Status)));
  }
  if (!panels.empty()) {
    const PanelLayout p = LayOutPanels(panels, threads);
    bytes += static_cast<int64_t>(p.lanes) * (p.token_bytes + p.result_bytes + p.weight_bytes) +
             static_cast<int64_t>(p.items.size() * sizeof(PanelItem));
  }
  if (!paths.int8.empty()) bytes += Int8DotScratchBytes(paths.int8, threads);
  return bytes;
}

namespace gemm_scheduler_internal {
void ForceBlisHalf(bool force) { SetForceBlisHalf(force); }
}  // namespace gemm_scheduler_internal

int64_t GemmWeightBytes(absl::Span<const GemmProblem> problems) {
  int64_t total = 0;
  for (const GemmProblem& p : problems) {
    int64_t bytes;
    if (p.b_quantized != nullptr) {
      const QuantizedMatrix& q = *p.b_quantized;
      const int64_t blocks = q.scale_row_stride == 0 || q.block_rows <= 0
                                 ? 1
                                 : (q.k + q.block_rows - 1) / q.block_rows;
      const int64_t columns = q.scale_col_stride == 0 ? 1 : q.n;
      const int64_t per_scale = q.zero_point == nullptr ? 4 : 8;
      bytes = SaturatingAdd(QuantizedBytes(q.type, SaturatingMul(q.k, q.n)),
                            SaturatingMul(SaturatingMul(blocks, columns), per_scale));
    } else if (p.b_panels != nullptr) {
      const int64_t shape[2] = {p.k, p.n};
      absl::StatusOr<int64_t> packed = PackedWeights::BytesFor(p.type, shape);
      bytes = packed.ok() ? *packed : SaturatingBytes(SaturatingMul(p.k, p.n), p.type);
    } else {
      bytes = SaturatingBytes(SaturatingMul(p.k, p.n), p.type);
    }
    total = SaturatingAdd(total, bytes);
  }
  return total;
}

absl::Status RunGemmProblems(absl::Span<const GemmProblem> problems, int threads) {
  // The scheduler's lists are standard containers; nothing inside its
  // parallel regions allocates.
  return CatchAllocationFailure("the GEMM scheduler's work lists",
                                [&] { return RunGemmProblemsOrThrow(problems, threads); });
}

}  // namespace gemmserve
