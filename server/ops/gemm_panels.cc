// The GEMM scheduler's panel path: problems whose weights are on packed
// panels (resident, BF16 packed per call, or quantized and dequantized per K
// block), in column tiles, each lane packing its rows into token panels.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/common/allocation.h"
#include "server/common/status_macros.h"
#include "server/ops/gemm_paths.h"
#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/ops/kernels/panel_gemm.h"
#include "server/ops/kernels/quantized_gemm.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace gemm_paths {
namespace {

// Tiles no narrower than this many columns: each micro-kernel call still
// streams a long enough stretch of its weight panels.
constexpr int64_t kMinPanelTileColumns = 128;

// Rows of K per block of a quantized problem on panels (QuantizedOnPanels):
// each block's panels, for the tile's columns (olmoe's 1024: 256 KB), are
// dequantized into L2 and read there by the GEMM for all the rows.
constexpr int64_t kQuantizedPanelKBlock = 128;

// Columns per weight panel, and the token scratch of a block of `rows` rows,
// for packed problems of `type` (BF16 on pair panels, FP16 on its own, FP32
// on BLIS's).
int64_t PanelLanes(DataType type) {
  return IsHalfPrecision(type) ? kBf16PanelLanes : Fp32PanelGeometry().weight_lanes;
}
int64_t PanelTokenBytes(DataType type, int64_t rows, int64_t k) {
  if (type == DataType::kBF16) return SaturatingMul(Bf16PanelScratchWords(rows, k), 4);
  if (type == DataType::kFP16) return SaturatingMul(Fp16PanelScratchWords(rows, k), 4);
  return SaturatingMul(PanelGemmScratchElements(Fp32PanelGeometry(), rows, k), 4);
}
// Bytes of `panels` BF16 pair panels over K = k.
int64_t Bf16PanelBytes(int64_t k, int64_t panels) {
  return SaturatingMul(SaturatingMul(Bf16PanelStride(k), panels), 2);
}

// Whether results go through the lane's buffer (scatter, bias, rounding to
// a half type) rather than straight into C.
bool PanelResultBuffered(const GemmProblem& p) { return !IsDirect(p) || IsHalfPrecision(p.type); }

void RunFp32PanelItem(const PanelItem& item, Lane& lane) {
  const GemmProblem& p = *item.problem;
  const PanelGeometry& g = Fp32PanelGeometry();
  const int64_t j0 = item.begin * g.weight_lanes;
  const int64_t width = std::min(p.n, item.end * g.weight_lanes) - j0;
  const auto* a = static_cast<const float*>(p.a);
  const auto* panels = static_cast<const float*>(p.b_panels);
  auto* tokens = static_cast<float*>(lane.rows.data());
  for (int64_t i0 = 0; i0 < p.m; i0 += kGatherBlockRows) {
    const int64_t m = std::min(kGatherBlockRows, p.m - i0);
    const int64_t* a_rows = p.a_rows ? p.a_rows + i0 : nullptr;
    const float* a_block = p.a_rows ? a : a + i0 * p.lda;
    if (IsDirect(p)) {  // straight into C
      PanelGemm(g, m, p.k, p.n, a_block, p.lda, a_rows, panels, item.begin, item.end,
                static_cast<float*>(p.c) + i0 * p.ldc + j0, p.ldc, tokens);
      continue;
    }
    auto* result = static_cast<float*>(lane.result.data());
    const int64_t ld = PanelResultLd(width);
    PanelGemm(g, m, p.k, p.n, a_block, p.lda, a_rows, panels, item.begin, item.end, result, ld,
              tokens);
    GemmProblem block = ColumnTile(p, j0, width);
    block.m = m;
    block.c_rows = p.c_rows ? p.c_rows + i0 : nullptr;
    if (!p.c_rows) block.c = static_cast<uint8_t*>(block.c) + i0 * p.ldc * sizeof(float);
    StoreRows(block, result, ld);
  }
}

// BF16 (pair panels) and FP16: FP32 results in the lane's buffer, rounded
// once on the way to C (with bias, scattered).
void RunHalfPanelItem(const PanelItem& item, Lane& lane) {
  const GemmProblem& p = *item.problem;
  const int64_t j0 = item.begin * kBf16PanelLanes;
  const int64_t width = std::min(p.n, item.end * kBf16PanelLanes) - j0;
  const auto* a = static_cast<const uint16_t*>(p.a);
  auto* result = static_cast<float*>(lane.result.data());
  const int64_t ld = PanelResultLd(width);
  // The panels to run on, as panels [begin, end) of weights n columns wide.
  const auto* panels = static_cast<const uint16_t*>(p.b_panels);
  int64_t n = p.n, begin = item.begin, end = item.end;
  int min_exponent = p.b_panels_min_exponent;
  if (panels == nullptr) {  // PacksWeightsPerCall: this tile's columns of B, packed here
    auto* packed = static_cast<uint16_t*>(lane.weights.data());
    PackBf16Panels(static_cast<const uint16_t*>(p.b) + j0, p.ldb, p.k, width, packed);
    // Over this tile's columns only: the products this call forms.
    min_exponent = Bf16MinExponent(packed, Bf16PanelBytes(p.k, end - begin) / 2);
    panels = packed;
    n = width, begin = 0, end = Bf16PanelCount(width);
  }
  for (int64_t i0 = 0; i0 < p.m; i0 += kGatherBlockRows) {
    const int64_t m = std::min(kGatherBlockRows, p.m - i0);
    const int64_t* a_rows = p.a_rows ? p.a_rows + i0 : nullptr;
    const uint16_t* x = p.a_rows ? a : a + i0 * p.lda;
    auto* tokens = static_cast<uint32_t*>(lane.rows.data());
    if (p.type == DataType::kFP16) {
      Fp16PanelGemm(m, p.k, n, x, p.lda, a_rows, panels, begin, end, result, ld, tokens);
    } else {
      Bf16PanelGemm(m, p.k, n, x, p.lda, a_rows, panels, min_exponent, begin, end, result, ld,
                    tokens);
    }
    GemmProblem block = ColumnTile(p, j0, width);
    block.m = m;
    block.c_rows = p.c_rows ? p.c_rows + i0 : nullptr;
    if (!p.c_rows) block.c = static_cast<uint8_t*>(block.c) + i0 * p.ldc * 2;
    StoreRows(block, result, ld);
  }
}

// QuantizedOnPanels: per block of rows, K block by K block, the tile's
// weights dequantized into the lane's panels (L2-sized), the vdpbf16ps
// kernel run on them, and its FP32 sums added to those of the blocks before;
// rounded once on the way to C. The bound on the weights' exponents comes
// from the scales (QuantizedMatrix::scales_min_exponent).
void RunQuantizedPanelItem(const PanelItem& item, Lane& lane) {
  const GemmProblem& p = *item.problem;
  const QuantizedMatrix& w = *p.b_quantized;
  const int64_t j0 = item.begin * kBf16PanelLanes;
  const int64_t width = std::min(p.n, item.end * kBf16PanelLanes) - j0;
  const int64_t panels = Bf16PanelCount(width), ld = PanelResultLd(width);
  const int64_t block = std::min(p.m, kGatherBlockRows);
  const auto* a = static_cast<const uint16_t*>(p.a);
  auto* packed = static_cast<uint16_t*>(lane.weights.data());
  auto* tokens = static_cast<uint32_t*>(lane.rows.data());
  auto* sums = static_cast<float*>(lane.result.data());
  float* part = sums + block * ld;
  for (int64_t i0 = 0; i0 < p.m; i0 += kGatherBlockRows) {
    const int64_t m = std::min(kGatherBlockRows, p.m - i0);
    const int64_t* a_rows = p.a_rows ? p.a_rows + i0 : nullptr;
    const uint16_t* x = p.a_rows ? a : a + i0 * p.lda;
    if (p.k == 0) std::fill(sums, sums + m * ld, 0.0f);
    for (int64_t k0 = 0; k0 < p.k; k0 += kQuantizedPanelKBlock) {
      const int64_t kb = std::min(kQuantizedPanelKBlock, p.k - k0);
      DequantizeBf16Panels(w, k0, k0 + kb, j0, width, packed);
      float* out = k0 == 0 ? sums : part;
      Bf16PanelGemm(m, kb, width, x + k0, p.lda, a_rows, packed, w.scales_min_exponent, 0, panels,
                    out, ld, tokens);
      if (k0 == 0) continue;
      for (int64_t i = 0; i < m; ++i) {
        float* __restrict__ s = sums + i * ld;
        const float* __restrict__ q = part + i * ld;
        for (int64_t j = 0; j < width; ++j) s[j] += q[j];
      }
    }
    GemmProblem rows = ColumnTile(p, j0, width);
    rows.m = m;
    rows.c_rows = p.c_rows ? p.c_rows + i0 : nullptr;
    if (!p.c_rows) rows.c = static_cast<uint8_t*>(rows.c) + i0 * p.ldc * 2;
    StoreRows(rows, sums, ld);
  }
}

void RunPanelItem(const PanelItem& item, Lane& lane) {
  if (item.problem->b_quantized != nullptr) return RunQuantizedPanelItem(item, lane);
  if (IsHalfPrecision(item.problem->type)) return RunHalfPanelItem(item, lane);
  RunFp32PanelItem(item, lane);
}

}  // namespace

PanelLayout LayOutPanels(const std::vector<const GemmProblem*>& problems, int threads) {
  PanelLayout l;
  const int64_t count = static_cast<int64_t>(problems.size());
  const int64_t wanted_tiles = (2 * threads + count - 1) / count;
  for (const GemmProblem* p : problems) {
    const int64_t lanes = PanelLanes(p->type);
    const int64_t panels = (p->n + lanes - 1) / lanes;
    const int64_t min_panels = std::max<int64_t>(1, kMinPanelTileColumns / lanes);
    const int64_t split = std::max<int64_t>(1, std::min(wanted_tiles, panels / min_panels));
    for (int64_t t = 0; t < split; ++t) {
      const int64_t begin = panels * t / split, end = panels * (t + 1) / split;
      const int64_t cols = std::min(p->n, end * lanes) - begin * lanes;
      l.items.push_back({p, begin, end, SaturatingMul(p->m, cols)});
    }
  }
  // Largest first, taken dynamically: experts with many rows start early and
  // the small ones fill in, so threads end together.
  std::stable_sort(l.items.begin(), l.items.end(),
                   [](const PanelItem& a, const PanelItem& b) { return a.cost > b.cost; });
  l.lanes = static_cast<int>(std::min<int64_t>(threads, static_cast<int64_t>(l.items.size())));
  for (const PanelItem& item : l.items) {
    const GemmProblem& p = *item.problem;
    const int64_t lanes = PanelLanes(p.type);
    const int64_t block = std::min(p.m, kGatherBlockRows);
    l.token_bytes = std::max(l.token_bytes, PanelTokenBytes(p.type, block, p.k));
    const bool quantized = p.b_quantized != nullptr;
    if (p.b_panels == nullptr) {
      const int64_t k = quantized ? std::min(p.k, kQuantizedPanelKBlock) : p.k;
      l.weight_bytes = std::max(l.weight_bytes, Bf16PanelBytes(k, item.end - item.begin));
    }
    if (PanelResultBuffered(p)) {
      // Quantized: the sums so far, and a K block's.
      const int64_t cols = std::min(p.n, item.end * lanes) - item.begin * lanes;
      l.result_bytes = std::max(
          l.result_bytes, (quantized ? 2 : 1) * block * PanelResultLd(cols) * AccSize(p.type));
    }
  }
  return l;
}

// Problems whose B is packed once (resident weights): each (problem, column
// tile) item packs its block of gathered rows into token panels and runs
// BLIS's micro-kernel over the weight panels, each read once per K block for
// all the rows. Items run side by side, one thread each, as in RunPacked.
absl::Status RunPanels(const std::vector<const GemmProblem*>& problems, int threads) {
  for (const GemmProblem* p : problems) {
    const bool half = IsHalfPrecision(p->type) && Bf16PanelsSupported();
    if (p->type != DataType::kFP32 && !half) {
      return absl::InternalError(
          absl::StrCat("packed weight panels of ", DataTypeName(p->type), ", which has none here"));
    }
  }
  PanelLayout layout = LayOutPanels(problems, threads);
  const int64_t count = static_cast<int64_t>(layout.items.size());
  std::vector<Lane> lane(layout.lanes);
  for (Lane& l : lane) {
    GEMMSERVE_ASSIGN_OR_RETURN(l.rows, AlignedBuffer::Allocate(layout.token_bytes));
    GEMMSERVE_ASSIGN_OR_RETURN(l.result, AlignedBuffer::Allocate(layout.result_bytes));
    GEMMSERVE_ASSIGN_OR_RETURN(l.weights, AlignedBuffer::Allocate(layout.weight_bytes));
  }
  if (layout.lanes <= 1) {
    for (const PanelItem& item : layout.items) RunPanelItem(item, lane[0]);
    return absl::OkStatus();
  }
#pragma omp parallel for num_threads(layout.lanes) schedule(dynamic, 1)
  for (int64_t q = 0; q < count; ++q) RunPanelItem(layout.items[q], lane[omp_get_thread_num()]);
  return absl::OkStatus();
}

int64_t PanelWorkBytes(const GemmWorkShape& w, int64_t t) {
  const int64_t block = std::min(w.max_rows, kGatherBlockRows);
  if (w.panels) {
    // Problems on packed weight panels with more rows than streaming takes:
    // each of up to t lanes holds one block of rows packed into token panels,
    // and its results when they are scattered or given a bias. Counted
    // whatever the rows: a batch stacks the rows of requests that stream on
    // their own into problems that do not, and these terms add up (token
    // panels round up per part at least as much as for the whole).
    int64_t lane = PanelTokenBytes(w.type, block, w.k);
    if (w.gathered || IsHalfPrecision(w.type)) {
      lane = SaturatingAdd(
          lane, SaturatingMul(SaturatingMul(block, PanelResultLd(w.n)), AccSize(w.type)));
    }
    return SaturatingMul(lane, t);
  }
  if (w.type != DataType::kBF16 || !Bf16PanelsSupported()) return 0;
  // BF16 problems that pack their row-major weights per call
  // (PacksWeightsPerCall): each of up to t lanes holds one column tile's
  // weight panels (at most all of N), a block of rows in token panels and
  // its FP32 results. Counted whatever the rows, as for the panels above.
  int64_t lane = SaturatingAdd(PanelTokenBytes(w.type, block, w.k),
                               SaturatingMul(SaturatingMul(block, PanelResultLd(w.n)), 4));
  lane = SaturatingAdd(lane, Bf16PanelBytes(w.k, Bf16PanelCount(w.n)));
  return SaturatingMul(lane, t);
}

int64_t QuantizedPanelWorkBytes(const GemmWorkShape& w, int64_t t) {
  if (w.type != DataType::kBF16 || !Bf16PanelsSupported()) return 0;
  // QuantizedOnPanels: as PacksWeightsPerCall above, with a K block's panels
  // dequantized instead of all of K packed, and two FP32 results (the sums,
  // a block's). Counted whatever the rows.
  const int64_t block = std::min(w.max_rows, kGatherBlockRows);
  int64_t lane = SaturatingAdd(PanelTokenBytes(w.type, block, w.k),
                               SaturatingMul(SaturatingMul(block, PanelResultLd(w.n)), 8));
  lane = SaturatingAdd(lane,
                       Bf16PanelBytes(std::min(w.k, kQuantizedPanelKBlock), Bf16PanelCount(w.n)));
  return SaturatingMul(lane, t);
}

}  // namespace gemm_paths
}  // namespace gemmserve
