#include "server/ops/gemm_scheduler.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/allocation.h"
#include "server/common/status_macros.h"
#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/ops/kernels/gemm.h"
#include "server/ops/kernels/panel_gemm.h"
#include "server/ops/kernels/streaming_gemm.h"
#include "server/ops/packed_weights.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"
#include "server/tensor/tensor.h"

namespace gemmserve {
namespace {

// Accumulation happens in FP64 for FP64 and in FP32 for FP32, FP16 and BF16.
int64_t AccSize(DataType t) { return t == DataType::kFP64 ? 8 : 4; }

inline int64_t ARow(const GemmProblem& p, int64_t i) { return p.a_rows ? p.a_rows[i] : i; }
inline int64_t CRow(const GemmProblem& p, int64_t i) { return p.c_rows ? p.c_rows[i] : i; }

// Rows of A, gathered and widened to the accumulation type: [m, k].
void GatherRows(const GemmProblem& p, void* dst) {
  if (p.k == 0) return;
  const int64_t es = DataTypeSize(p.type);
  const auto* a = static_cast<const uint8_t*>(p.a);
  for (int64_t i = 0; i < p.m; ++i) {
    const uint8_t* src = a + ARow(p, i) * p.lda * es;
    if (IsHalfPrecision(p.type)) {
      HalfToFloatBlock(p.type, reinterpret_cast<const uint16_t*>(src),
                       static_cast<float*>(dst) + i * p.k, p.k);
    } else {
      std::memcpy(static_cast<uint8_t*>(dst) + i * p.k * es, src, static_cast<size_t>(p.k * es));
    }
  }
}

template <typename T, typename Acc, typename Load, typename Store>
void StoreRowsT(const GemmProblem& p, const Acc* acc, int64_t ld, Load load, Store store) {
  const T* bias = static_cast<const T*>(p.bias);
  T* c = static_cast<T*>(p.c);
  for (int64_t i = 0; i < p.m; ++i) {
    const Acc* src = acc + i * ld;
    T* dst = c + CRow(p, i) * p.ldc;
    if (bias) {
      for (int64_t j = 0; j < p.n; ++j) dst[j] = store(src[j] + load(bias[j]));
    } else {
      for (int64_t j = 0; j < p.n; ++j) dst[j] = store(src[j]);
    }
  }
}

// Result rows [m, n] in the accumulation type (rows `ld` apart; p.n when
// not given) to their rows of C, plus bias, rounded once.
void StoreRows(const GemmProblem& p, const void* acc, int64_t ld = -1) {
  auto same = [](auto v) { return v; };
  if (ld < 0) ld = p.n;
  switch (p.type) {
    case DataType::kFP32:
      return StoreRowsT<float>(p, static_cast<const float*>(acc), ld, same, same);
    case DataType::kFP64:
      return StoreRowsT<double>(p, static_cast<const double*>(acc), ld, same, same);
    case DataType::kBF16:
      return StoreRowsT<uint16_t>(p, static_cast<const float*>(acc), ld, BFloat16ToFloat,
                                  FloatToBFloat16);
    case DataType::kFP16:
      return StoreRowsT<uint16_t>(p, static_cast<const float*>(acc), ld, HalfToFloat, FloatToHalf);
    default: return;  // integer problems never take a gather/scatter path
  }
}

// Row stride, in elements, of a lane's result rows for a tile `cols` wide:
// a whole number of lines plus one, so the rows of a micro-kernel tile do
// not all fall in one L1 set (1024 FP32 columns are 4 KiB apart: a 12-row
// tile's 24 lines then share one 12-way set and evict each other on every
// K block).
int64_t PanelResultLd(int64_t cols) { return SaturatingAdd((cols + 15) / 16 * 16, 16); }

bool IsDirect(const GemmProblem& p) {
  return p.a_rows == nullptr && p.c_rows == nullptr && p.bias == nullptr;
}

struct StreamingItem {
  int64_t problem, k_begin, k_end, partial;  // partial: byte offset
};

// Where each streaming problem's widened rows and each (problem, K slice)
// item's partial sums go in the two scratch buffers.
struct StreamingLayout {
  std::vector<StreamingItem> items;
  std::vector<int64_t> rows_at, slices, first_item;
  int64_t rows_bytes = 0, partial_bytes = 0;
};

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

// Scratch of one thread for the gather/GEMM/scatter path.
struct Lane {
  AlignedBuffer rows, result;
  AlignedBuffer weights;  // weight panels packed per call (PacksWeightsPerCall)
};

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

// Column tile `[j0, j0 + width)` of a problem: the same rows, a slice of B,
// C and bias.
GemmProblem ColumnTile(const GemmProblem& p, int64_t j0, int64_t width) {
  const int64_t es = DataTypeSize(p.type);
  GemmProblem t = p;
  t.n = width;
  // B is null when the problem reads packed panels instead.
  if (p.b) t.b = static_cast<const uint8_t*>(p.b) + j0 * es;
  t.c = static_cast<uint8_t*>(p.c) + j0 * es;
  if (p.bias) t.bias = static_cast<const uint8_t*>(p.bias) + j0 * es;
  return t;
}

// The column tiles of the packed problems and the scratch of each lane.
struct PackedLayout {
  std::vector<GemmProblem> tiles;
  int lanes = 0;
  int64_t rows_bytes = 0, result_bytes = 0;  // of each lane, for gathered tiles
  int64_t half_block_bytes = 0;  // HalfGemmRowMajor's own, per call, for direct half tiles
};

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

// A column tile of a problem whose B is packed: weight panels [begin, end).
struct PanelItem {
  const GemmProblem* problem;
  int64_t begin, end;
  int64_t cost;  // rows x columns, for the order of the work list
};

struct PanelLayout {
  std::vector<PanelItem> items;
  int lanes = 0;
  int64_t token_bytes = 0, result_bytes = 0;  // of each lane
  int64_t weight_bytes = 0;                   // of each lane: PacksWeightsPerCall's panels
};

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

// Whether a BF16 problem on row-major weights packs them into pair panels
// per call and runs the vdpbf16ps kernel: above streaming's rows, where
// BF16 panels are preferred (Bf16PanelsPreferred: vdpbf16ps measured fast).
// The packing is a pass over B that the BLIS path makes too (it widens B to
// FP32 in its own packing). Not FP16: its panels run FP32 FMA like BLIS,
// and packed per call they ran at 0.4-0.8x of BLIS on mixtral-small and at
// olmoe M = 4096 (one run on a Xeon, 3 alternations).
std::atomic<bool> g_force_blis_half{false};

bool PacksWeightsPerCall(const GemmProblem& p) {
  return p.b_panels == nullptr && p.b_quantized == nullptr && p.type == DataType::kBF16 &&
         p.m > kStreamingMaxRows && !g_force_blis_half.load(std::memory_order_relaxed) &&
         Bf16PanelsPreferred();
}

// Whether a quantized problem with BF16 values dequantizes each column tile
// into pair panels per call (DequantizeBf16Panels) and runs the vdpbf16ps
// kernel on them, as PacksWeightsPerCall does with BF16 weights: from
// kQuantizedPanelMinRows rows, where the tile's dequantization, paid once,
// is shared by enough rows; fewer rows stream through the decode kernel.
bool QuantizedOnPanels(const GemmProblem& p) {
  return p.b_quantized != nullptr && p.type == DataType::kBF16 && p.m >= kQuantizedPanelMinRows &&
         !g_force_blis_half.load(std::memory_order_relaxed) && Bf16PanelsPreferred();
}

// Whether results go through the lane's buffer (scatter, bias, rounding to
// a half type) rather than straight into C.
bool PanelResultBuffered(const GemmProblem& p) { return !IsDirect(p) || IsHalfPrecision(p.type); }

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

// Bookkeeping of one problem, over its whole life: the GemmProblem in the
// caller's list and in a batch's merged list (with vector slack), the pointer
// lists and work items or column tiles of the scheduler, their statuses, and
// up to a cache line of padding in each scratch region.
constexpr int64_t kProblemBookkeepingBytes = 1024;

}  // namespace

int64_t GemmWorkBytes(const GemmWorkShape& w, int threads) {
  const int64_t t = std::max(threads, 1);
  if (w.problems <= 0 || w.rows <= 0 || w.n <= 0)
    return SaturatingMul(w.problems, kProblemBookkeepingBytes);
  const int64_t acc = AccSize(w.type);
  // The per-problem bookkeeping, and the items or tiles beyond one per
  // problem that splitting for `t` threads adds (at most 2t).
  int64_t bytes = SaturatingMul(SaturatingAdd(w.problems, 2 * t), kProblemBookkeepingBytes);
  if (w.quantized) {
    // Every row streams, in problems of at most kQuantizedBlockRows rows
    // (one more problem per block): the rows widened, and partial sums as
    // for streaming below with blocks of that many rows.
    bytes = SaturatingAdd(
        bytes, SaturatingMul(w.rows / kQuantizedBlockRows + 1, kProblemBookkeepingBytes));
    bytes = SaturatingAdd(bytes, SaturatingMul(SaturatingMul(w.rows, w.k), acc));
    const int64_t partial_rows = SaturatingAdd(w.rows, 4 * t * kQuantizedBlockRows);
    bytes = SaturatingAdd(bytes, SaturatingMul(SaturatingMul(partial_rows, w.n), acc));
    if (w.type == DataType::kBF16 && Bf16PanelsSupported()) {
      // QuantizedOnPanels: as PacksWeightsPerCall below, with a K block's
      // panels dequantized instead of all of K packed, and two FP32 results
      // (the sums, a block's). Counted whatever the rows.
      const int64_t block = std::min(w.max_rows, kGatherBlockRows);
      int64_t lane = SaturatingAdd(PanelTokenBytes(w.type, block, w.k),
                                   SaturatingMul(SaturatingMul(block, PanelResultLd(w.n)), 8));
      lane = SaturatingAdd(
          lane, Bf16PanelBytes(std::min(w.k, kQuantizedPanelKBlock), Bf16PanelCount(w.n)));
      bytes = SaturatingAdd(bytes, SaturatingMul(lane, t));
    }
    return bytes;
  }
  if (IsFloatingPoint(w.type) && w.min_rows <= kStreamingMaxRows) {
    // Streaming problems (at most kStreamingMaxRows rows each): their rows
    // widened, and partial sums per K slice. Slices per problem are
    // ceil(2t / problems) at most, so partials hold at most the rows' own
    // results plus 4t * kStreamingMaxRows rows more.
    const int64_t rows = std::min(w.rows, SaturatingMul(w.problems, kStreamingMaxRows));
    bytes = SaturatingAdd(bytes, SaturatingMul(SaturatingMul(rows, w.k), acc));
    const int64_t partial_rows = SaturatingAdd(rows, 4 * t * kStreamingMaxRows);
    bytes = SaturatingAdd(bytes, SaturatingMul(SaturatingMul(partial_rows, w.n), acc));
  }
  if (w.panels) {
    // Problems on packed weight panels with more rows than streaming takes:
    // each of up to t lanes holds one block of rows packed into token panels,
    // and its results when they are scattered or given a bias. Counted
    // whatever the rows: a batch stacks the rows of requests that stream on
    // their own into problems that do not, and these terms add up (token
    // panels round up per part at least as much as for the whole).
    const int64_t block = std::min(w.max_rows, kGatherBlockRows);
    int64_t lane = PanelTokenBytes(w.type, block, w.k);
    if (w.gathered || IsHalfPrecision(w.type)) {
      lane = SaturatingAdd(lane, SaturatingMul(SaturatingMul(block, PanelResultLd(w.n)), acc));
    }
    bytes = SaturatingAdd(bytes, SaturatingMul(lane, t));
  }
  if (!w.panels && w.type == DataType::kBF16 && Bf16PanelsSupported()) {
    // BF16 problems that pack their row-major weights per call
    // (PacksWeightsPerCall): each of up to t lanes holds one column tile's
    // weight panels (at most all of N), a block of rows in token panels and
    // its FP32 results. Counted whatever the rows, as for the panels above.
    const int64_t block = std::min(w.max_rows, kGatherBlockRows);
    int64_t lane = SaturatingAdd(PanelTokenBytes(w.type, block, w.k),
                                 SaturatingMul(SaturatingMul(block, PanelResultLd(w.n)), 4));
    lane = SaturatingAdd(lane, Bf16PanelBytes(w.k, Bf16PanelCount(w.n)));
    bytes = SaturatingAdd(bytes, SaturatingMul(lane, t));
  }
  if (!w.panels && (!IsFloatingPoint(w.type) || w.max_rows > kStreamingMaxRows)) {
    // Packed problems: each of up to t lanes holds one block of gathered rows
    // and its results (gathered problems), or the FP32 results of a block of
    // a half-precision GEMM (HalfGemmRowMajor); direct FP32, FP64 and integer
    // GEMMs run in place, with BLIS's own pooled packing buffers.
    int64_t block_bytes = 0;
    if (w.gathered) {
      block_bytes =
          SaturatingMul(std::min(w.max_rows, kGatherBlockRows),
                        SaturatingMul(SaturatingAdd(IsHalfPrecision(w.type) ? 0 : w.k, w.n), acc));
    } else if (IsHalfPrecision(w.type)) {
      block_bytes = SaturatingMul(std::min(w.max_rows, kHalfGemmRowBlock), SaturatingMul(w.n, 4));
    }
    bytes = SaturatingAdd(bytes, SaturatingMul(block_bytes, t));
  }
  return bytes;
}

namespace {

// The problems with work, by path.
void Split(absl::Span<const GemmProblem> problems, std::vector<const GemmProblem*>* streaming,
           std::vector<const GemmProblem*>* packed, std::vector<const GemmProblem*>* panels) {
  for (const GemmProblem& p : problems) {
    if (p.m <= 0 || p.n <= 0) continue;
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
  return p.b_quantized != nullptr && p.m > kQuantizedBlockRows && p.n > 0 && !QuantizedOnPanels(p);
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
  std::vector<const GemmProblem*> streaming, packed, panels;
  Split(problems, &streaming, &packed, &panels);
  if (!streaming.empty()) GEMMSERVE_RETURN_IF_ERROR(RunStreaming(streaming, threads));
  if (!packed.empty()) GEMMSERVE_RETURN_IF_ERROR(RunPacked(packed, threads));
  if (!panels.empty()) GEMMSERVE_RETURN_IF_ERROR(RunPanels(panels, threads));
  return absl::OkStatus();
}

}  // namespace

int64_t GemmScratchBytes(absl::Span<const GemmProblem> all, int threads) {
  threads = std::max(threads, 1);
  std::vector<GemmProblem> storage;
  absl::Span<const GemmProblem> problems = CutQuantized(all, &storage);
  std::vector<const GemmProblem*> streaming, packed, panels;
  Split(problems, &streaming, &packed, &panels);
  int64_t bytes =
      static_cast<int64_t>((all.size() + storage.size()) * sizeof(GemmProblem) +
                           (streaming.size() + packed.size() + panels.size()) * sizeof(void*));
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
  return bytes;
}

namespace gemm_scheduler_internal {
void ForceBlisHalf(bool force) { g_force_blis_half.store(force); }
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
