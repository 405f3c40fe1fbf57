// What the GEMM scheduler's paths share: rows gathered in and stored out,
// column tiles, the lanes' scratch, and which path BF16 problems take.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "server/ops/gemm_paths.h"
#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/ops/kernels/gemm.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace gemm_paths {
namespace {

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

std::atomic<bool> g_force_blis_half{false};

}  // namespace

// Accumulation happens in FP64 for FP64 and in FP32 for FP32, FP16 and BF16.
int64_t AccSize(DataType t) { return t == DataType::kFP64 ? 8 : 4; }

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

// Result rows [m, n] in the accumulation type (rows `ld` apart; p.n when
// not given) to their rows of C, plus bias, rounded once.
void StoreRows(const GemmProblem& p, const void* acc, int64_t ld) {
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

// Whether a BF16 problem on row-major weights packs them into pair panels
// per call and runs the vdpbf16ps kernel: above streaming's rows, where
// BF16 panels are preferred (Bf16PanelsPreferred: vdpbf16ps measured fast).
// The packing is a pass over B that the BLIS path makes too (it widens B to
// FP32 in its own packing). Not FP16: its panels run FP32 FMA like BLIS,
// and packed per call they ran at 0.4-0.8x of BLIS on mixtral-small and at
// olmoe M = 4096 (one run on a Xeon, 3 alternations).
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

void SetForceBlisHalf(bool force) { g_force_blis_half.store(force); }

}  // namespace gemm_paths
}  // namespace gemmserve
