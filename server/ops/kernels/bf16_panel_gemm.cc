#include "server/ops/kernels/bf16_panel_gemm.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/ops/kernels/kernel_set.h"
#include "server/tensor/half.h"

namespace gemmserve {
namespace {

std::atomic<bool> g_fma_only{false};

using bf16_panel_internal::HalfTileFn;
using bf16_panel_internal::PairTileFn;

// The kernel set's tiles: null where the CPU has no build of them.
const PairTileFn* FmaTiles() { return Kernels().bf16_fma_tiles; }
const PairTileFn* NativeTiles() { return Kernels().bf16_native_tiles; }

constexpr int kRows = static_cast<int>(kBf16TokenRows);

// Token rows per pair in the token panels of an m-row call: 12, or m when
// fewer (decode), so a panel holds only its rows and stays in L1.
int64_t TokenStride(int64_t m) { return std::min<int64_t>(m, kRows); }

// Rows [0, m) of X (gathered) from K column k0 on, as token panels of
// `steps` steps: panel t at out + t * steps * TokenStride(m), [steps][tr];
// step q of a row is put(its source row, q), rows past m are zero.
template <typename Word, typename Put>
void PackTokenPanels(int64_t m, int64_t steps, int64_t k0, const uint16_t* x, int64_t ldx,
                     const int64_t* a_rows, Word* out, Put put) {
  const int64_t tr = TokenStride(m);
  const int64_t panels = (m + kRows - 1) / kRows;
  for (int64_t t = 0; t < panels; ++t) {
    Word* panel = out + t * steps * tr;
    const int64_t rows = std::min<int64_t>(kRows, m - t * kRows);
    for (int64_t r = 0; r < tr; ++r) {
      if (r >= rows) {
        for (int64_t q = 0; q < steps; ++q) panel[q * tr + r] = Word{0};
        continue;
      }
      const int64_t i = t * kRows + r;
      const uint16_t* src = x + (a_rows ? a_rows[i] : i) * ldx + k0;
      for (int64_t q = 0; q < steps; ++q) panel[q * tr + r] = put(src, q);
    }
  }
}

// BF16, K [k0, k0 + kb): each step a pair of K as one word (odd K: the
// last pair's second is zero).
void PackTokenPairs(int64_t m, int64_t k0, int64_t kb, const uint16_t* x, int64_t ldx,
                    const int64_t* a_rows, uint32_t* out) {
  PackTokenPanels(m, (kb + 1) / 2, k0, x, ldx, a_rows, out, [kb](const uint16_t* src, int64_t q) {
    const uint32_t second = 2 * q + 1 < kb ? src[2 * q + 1] : 0;
    return uint32_t{src[2 * q]} | second << 16;
  });
}

// FP16, K [k0, k0 + kc): each step one value widened exactly to FP32.
void PackTokensHalf(int64_t m, int64_t k0, int64_t kc, const uint16_t* x, int64_t ldx,
                    const int64_t* a_rows, float* out) {
  PackTokenPanels(m, kc, k0, x, ldx, a_rows, out,
                  [](const uint16_t* src, int64_t q) { return HalfToFloat(src[q]); });
}

}  // namespace

bool Bf16PanelsSupported() { return FmaTiles() != nullptr; }

void PackBf16Panels(const uint16_t* w, int64_t ldw, int64_t k, int64_t n, uint16_t* out) {
  Kernels().pack_bf16_panels(w, ldw, k, n, out);
}

int Bf16MinExponent(const uint16_t* data, int64_t count) {
  int min = 255;
  for (int64_t i = 0; i < count; ++i) {
    const uint16_t bits = data[i] & 0x7fff;
    if (bits == 0) continue;
    min = std::min(min, static_cast<int>(bits >> 7));
  }
  return min;
}

// The K block of a call: kBf16KBlock, or all of K when the rows fit one
// tile (decode), so each weight panel streams once, front to back.
int64_t CallKBlock(int64_t m, int64_t k) {
  return m <= kRows ? std::max<int64_t>(k, 1) : kBf16KBlock;
}

int64_t Bf16PanelScratchWords(int64_t m, int64_t k) {
  const int64_t panels = (m + kRows - 1) / kRows;
  const int64_t pairs = (std::min(k, CallKBlock(m, k)) + 1) / 2;
  return (panels * pairs * kRows + 15) / 16 * 16;
}

void Bf16PanelGemm(int64_t m, int64_t k, int64_t n, const uint16_t* x, int64_t ldx,
                   const int64_t* a_rows, const uint16_t* panels, int weights_min_exponent,
                   int64_t panel_begin, int64_t panel_end, float* c, int64_t ldc,
                   uint32_t* scratch) {
  panel_end = std::min(panel_end, Bf16PanelCount(n));
  if (m <= 0 || panel_begin >= panel_end) return;
  const int64_t j_first = panel_begin * kBf16PanelLanes;
  const int64_t width = std::min(n, panel_end * kBf16PanelLanes) - j_first;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + width, 0.0f);
    return;
  }
  // The native path where no subnormal can arise (file comment of the header).
  bool native = NativeTiles() != nullptr && !g_fma_only.load(std::memory_order_relaxed);
  if (native) {
    int tokens_min = 255;
    for (int64_t i = 0; i < m && tokens_min + weights_min_exponent >= 142; ++i) {
      tokens_min = std::min(tokens_min, Bf16MinExponent(x + (a_rows ? a_rows[i] : i) * ldx, k));
    }
    native = tokens_min + weights_min_exponent >= 142;
  }
  const PairTileFn* tiles = native ? NativeTiles() : FmaTiles();
  const int64_t stride = Bf16PanelStride(k);
  const int64_t token_panels = (m + kRows - 1) / kRows, tr = TokenStride(m);
  const int64_t k_block = CallKBlock(m, k);
  for (int64_t k0 = 0; k0 < k; k0 += k_block) {
    const int64_t kb = std::min(k_block, k - k0), pairs = (kb + 1) / 2;
    PackTokenPairs(m, k0, kb, x, ldx, a_rows, scratch);
    for (int64_t p = panel_begin; p < panel_end; ++p) {
      const uint16_t* w = panels + p * stride + (k0 / 2) * 2 * kBf16PanelLanes;
      const int64_t cols = std::min(kBf16PanelLanes, n - p * kBf16PanelLanes);
      for (int64_t t = 0; t < token_panels; ++t) {
        const int64_t rows = std::min<int64_t>(kRows, m - t * kRows);
        tiles[rows - 1](pairs, scratch + t * pairs * tr, tr, w,
                        c + t * kRows * ldc + (p * kBf16PanelLanes - j_first), ldc, cols, k0 > 0);
      }
    }
  }
}

void PackFp16Panels(const uint16_t* w, int64_t ldw, int64_t k, int64_t n, uint16_t* out) {
  const int64_t stride = Fp16PanelStride(k);
  for (int64_t p = 0; p < Bf16PanelCount(n); ++p) {
    uint16_t* panel = out + p * stride;
    const int64_t j0 = p * kBf16PanelLanes;
    const int64_t cols = std::min(kBf16PanelLanes, n - j0);
    for (int64_t kk = 0; kk < k; ++kk) {
      std::copy(w + kk * ldw + j0, w + kk * ldw + j0 + cols, panel + kk * kBf16PanelLanes);
      std::fill(panel + kk * kBf16PanelLanes + cols, panel + (kk + 1) * kBf16PanelLanes,
                uint16_t{0});
    }
  }
}

int64_t Fp16PanelScratchWords(int64_t m, int64_t k) {
  const int64_t panels = (m + kRows - 1) / kRows;
  const int64_t kc = std::min(k, CallKBlock(m, k));
  return (panels * kc * kRows + 15) / 16 * 16;
}

void Fp16PanelGemm(int64_t m, int64_t k, int64_t n, const uint16_t* x, int64_t ldx,
                   const int64_t* a_rows, const uint16_t* panels, int64_t panel_begin,
                   int64_t panel_end, float* c, int64_t ldc, uint32_t* scratch) {
  panel_end = std::min(panel_end, Bf16PanelCount(n));
  if (m <= 0 || panel_begin >= panel_end) return;
  const int64_t j_first = panel_begin * kBf16PanelLanes;
  const int64_t width = std::min(n, panel_end * kBf16PanelLanes) - j_first;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + width, 0.0f);
    return;
  }
  const HalfTileFn* tiles = Kernels().fp16_tiles;
  auto* tokens = reinterpret_cast<float*>(scratch);
  const int64_t stride = Fp16PanelStride(k);
  const int64_t token_panels = (m + kRows - 1) / kRows, tr = TokenStride(m);
  const int64_t k_block = CallKBlock(m, k);
  for (int64_t k0 = 0; k0 < k; k0 += k_block) {
    const int64_t kc = std::min(k_block, k - k0);
    PackTokensHalf(m, k0, kc, x, ldx, a_rows, tokens);
    for (int64_t p = panel_begin; p < panel_end; ++p) {
      const uint16_t* w = panels + p * stride + k0 * kBf16PanelLanes;
      const int64_t cols = std::min(kBf16PanelLanes, n - p * kBf16PanelLanes);
      for (int64_t t = 0; t < token_panels; ++t) {
        const int64_t rows = std::min<int64_t>(kRows, m - t * kRows);
        tiles[rows - 1](kc, tokens + t * kc * tr, tr, w,
                        c + t * kRows * ldc + (p * kBf16PanelLanes - j_first), ldc, cols, k0 > 0);
      }
    }
  }
}

const char* Bf16PanelIsa() {
  if (FmaTiles() == nullptr) return "none";
  return NativeTiles() != nullptr && !g_fma_only.load() ? "avx512_bf16" : "avx512f";
}

namespace {

std::atomic<Bf16Panels> g_bf16_panels{Bf16Panels::kAuto};

}  // namespace

void SetBf16Panels(Bf16Panels mode) { g_bf16_panels.store(mode); }

bool ParseBf16Panels(const char* text, Bf16Panels* mode) {
  const std::string t = text;
  if (t == "auto")
    *mode = Bf16Panels::kAuto;
  else if (t == "on")
    *mode = Bf16Panels::kOn;
  else if (t == "off")
    *mode = Bf16Panels::kOff;
  else
    return false;
  return true;
}

double Bf16NativeSpeedup() {
  static const double speedup =
      Kernels().measure_bf16_native_speedup ? Kernels().measure_bf16_native_speedup() : 0;
  return speedup;
}

bool Bf16PanelsPreferred() {
  if (!Bf16PanelsSupported()) return false;
  switch (g_bf16_panels.load()) {
    case Bf16Panels::kOn: return true;
    case Bf16Panels::kOff: return false;
    case Bf16Panels::kAuto: break;
  }
  return Bf16NativeSpeedup() >= kBf16NativeMinSpeedup;
}

std::string Bf16PanelsChoice() {
  if (!Bf16PanelsSupported()) return "row-major (no AVX-512)";
  const char* layout = Bf16PanelsPreferred() ? "pair panels" : "row-major";
  switch (g_bf16_panels.load()) {
    case Bf16Panels::kOn: return absl::StrCat(layout, " (--bf16_panels=on)");
    case Bf16Panels::kOff: return absl::StrCat(layout, " (--bf16_panels=off)");
    case Bf16Panels::kAuto: break;
  }
  return absl::StrFormat("%s (auto: vdpbf16ps does %.2fx FP32 FMA's flops here; panels from %.2fx)",
                         layout, Bf16NativeSpeedup(), kBf16NativeMinSpeedup);
}

namespace bf16_panel_internal {
void ForceFmaPath(bool fma_only) { g_fma_only.store(fma_only); }
bool HaveNativeBf16() { return NativeTiles() != nullptr; }

void PackBf16PanelsGeneric(const uint16_t* w, int64_t ldw, int64_t k, int64_t n, uint16_t* out) {
  const int64_t stride = Bf16PanelStride(k);
  for (int64_t p = 0; p < Bf16PanelCount(n); ++p) {
    uint16_t* panel = out + p * stride;
    std::fill(panel, panel + stride, uint16_t{0});
    const int64_t j0 = p * kBf16PanelLanes;
    const int64_t cols = std::min(kBf16PanelLanes, n - j0);
    for (int64_t kk = 0; kk < k; ++kk) {
      const uint16_t* src = w + kk * ldw + j0;
      uint16_t* dst = panel + (kk / 2) * 2 * kBf16PanelLanes + (kk % 2);
      for (int64_t j = 0; j < cols; ++j) dst[2 * j] = src[j];
    }
  }
}
}  // namespace bf16_panel_internal

}  // namespace gemmserve
