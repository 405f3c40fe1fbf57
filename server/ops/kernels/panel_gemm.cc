#include "server/ops/kernels/panel_gemm.h"

#include <blis.h>

#include <algorithm>
#include <cstring>

#include "server/ops/kernels/kernel_set.h"

namespace gemmserve {
namespace {

constexpr int64_t kLine = 64;  // bytes

constexpr int64_t kPerLine = kLine / static_cast<int64_t>(sizeof(float));

PanelGeometry Query() {
  constexpr num_t dt = BLIS_FLOAT;
  cntx_t* cntx = bli_gks_query_cntx();
  PanelGeometry g;
  const int64_t mr = bli_cntx_get_blksz_def_dt(dt, BLIS_MR, cntx);
  const int64_t nr = bli_cntx_get_blksz_def_dt(dt, BLIS_NR, cntx);
  // The packed widths (PACKMR, PACKNR): the leading dimension of a packed
  // micro-panel as the micro-kernel steps through it.
  const int64_t packmr = bli_cntx_get_blksz_max_dt(dt, BLIS_MR, cntx);
  const int64_t packnr = bli_cntx_get_blksz_max_dt(dt, BLIS_NR, cntx);
  g.weights_are_a = !bli_cntx_l3_nat_ukr_prefers_rows_dt(dt, BLIS_GEMM_UKR, cntx);
  g.weight_lanes = g.weights_are_a ? mr : nr;
  g.weight_ld = g.weights_are_a ? packmr : packnr;
  g.token_lanes = g.weights_are_a ? nr : mr;
  g.token_ld = g.weights_are_a ? packnr : packmr;
  g.kc = bli_cntx_get_blksz_def_dt(dt, BLIS_KC, cntx);
  g.a_block = std::max<int64_t>(mr, bli_cntx_get_blksz_def_dt(dt, BLIS_MC, cntx) / mr * mr);
  g.kernel = reinterpret_cast<const void*>(bli_cntx_get_l3_nat_ukr_dt(dt, BLIS_GEMM_UKR, cntx));
  return g;
}

// Packs rows [0, m) of X (gathered), K columns [k0, k0 + kc), into token
// panels of g.token_lanes rows: panel t at out + t * kc * token_ld.
void PackTokens(const PanelGeometry& g, int64_t m, int64_t k0, int64_t kc, const float* x,
                int64_t ldx, const int64_t* a_rows, float* out) {
  const int64_t lanes = g.token_lanes, ld = g.token_ld;
  const int64_t panels = (m + lanes - 1) / lanes;
  for (int64_t t = 0; t < panels; ++t) {
    float* panel = out + t * kc * ld;
    const int64_t rows = std::min(lanes, m - t * lanes);
    for (int64_t lane = 0; lane < rows; ++lane) {
      const int64_t i = t * lanes + lane;
      const float* src = x + (a_rows ? a_rows[i] : i) * ldx + k0;
      for (int64_t kk = 0; kk < kc; ++kk) panel[kk * ld + lane] = src[kk];
    }
    if (rows < ld) {
      for (int64_t kk = 0; kk < kc; ++kk)
        std::fill(panel + kk * ld + rows, panel + kk * ld + ld, 0.0f);
    }
  }
}

}  // namespace

bool PanelGemmHasPartialTiles(const PanelGeometry& g) {
  return Kernels().fp32_partial_tiles != nullptr && g.weights_are_a && g.weight_lanes == 32 &&
         g.weight_ld == 32 && g.token_lanes <= panel_gemm_internal::kPartialTileRows;
}

const PanelGeometry& Fp32PanelGeometry() {
  static const PanelGeometry fp32 = (bli_init(), Query());
  return fp32;
}

int64_t PanelCount(const PanelGeometry& g, int64_t n) {
  return (n + g.weight_lanes - 1) / g.weight_lanes;
}

int64_t PanelStrideElements(const PanelGeometry& g, int64_t k) {
  return (k * g.weight_ld + kPerLine - 1) / kPerLine * kPerLine;
}

// The K block of a call: BLIS's KC, or all of K when the rows fit one
// partial tile (decode), so each weight panel streams once, front to back.
int64_t CallKBlock(const PanelGeometry& g, int64_t m, int64_t k) {
  if (m <= g.token_lanes && PanelGemmHasPartialTiles(g)) return std::max<int64_t>(k, 1);
  return g.kc;
}

int64_t PanelGemmScratchElements(const PanelGeometry& g, int64_t m, int64_t k) {
  const int64_t panels = (m + g.token_lanes - 1) / g.token_lanes;
  const int64_t kc = std::max<int64_t>(0, std::min(CallKBlock(g, m, k), k));
  return (panels * kc * g.token_ld + kPerLine - 1) / kPerLine * kPerLine;
}

void PackWeightPanels(const PanelGeometry& g, const float* w, int64_t ldw, int64_t k, int64_t n,
                      float* out) {
  const int64_t lanes = g.weight_lanes, ld = g.weight_ld, stride = PanelStrideElements(g, k);
  for (int64_t p = 0; p < PanelCount(g, n); ++p) {
    float* panel = out + p * stride;
    const int64_t j0 = p * lanes, cols = std::min(lanes, n - j0);
    for (int64_t kk = 0; kk < k; ++kk) {
      std::memcpy(panel + kk * ld, w + kk * ldw + j0, static_cast<size_t>(cols) * sizeof(float));
      std::fill(panel + kk * ld + cols, panel + kk * ld + ld, 0.0f);
    }
    std::fill(panel + k * ld, panel + stride, 0.0f);
  }
}

void PanelGemm(const PanelGeometry& g, int64_t m, int64_t k, int64_t n, const float* x, int64_t ldx,
               const int64_t* a_rows, const float* packed_w, int64_t panel_begin, int64_t panel_end,
               float* c, int64_t ldc, float* scratch) {
  panel_end = std::min(panel_end, PanelCount(g, n));
  if (m <= 0 || panel_begin >= panel_end) return;
  const int64_t j_first = panel_begin * g.weight_lanes;
  const int64_t width = std::min(n, panel_end * g.weight_lanes) - j_first;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + width, 0.0f);
    return;
  }
  const auto kernel = reinterpret_cast<sgemm_ukr_ft>(const_cast<void*>(g.kernel));
  const int64_t stride = PanelStrideElements(g, k);
  const int64_t token_panels = (m + g.token_lanes - 1) / g.token_lanes;
  float one = 1, zero = 0;
  auxinfo_t aux;
  bli_auxinfo_set_schema_a(BLIS_PACKED_ROW_PANELS, &aux);
  bli_auxinfo_set_schema_b(BLIS_PACKED_COL_PANELS, &aux);
  bli_auxinfo_set_is_a(1, &aux);
  bli_auxinfo_set_is_b(1, &aux);
  bli_auxinfo_set_ukr(nullptr, &aux);
  bli_auxinfo_set_params(nullptr, &aux);
  cntx_t* cntx = bli_gks_query_cntx();

  // The kernel set's tiles for token panels that are not full, where they fit.
  const panel_gemm_internal::PartialTileFn* partial_tiles =
      PanelGemmHasPartialTiles(g) ? Kernels().fp32_partial_tiles : nullptr;
  const int64_t k_block = CallKBlock(g, m, k);
  for (int64_t k0 = 0; k0 < k; k0 += k_block) {
    const int64_t kc = std::min(k_block, k - k0);
    PackTokens(g, m, k0, kc, x, ldx, a_rows, scratch);
    float* beta = k0 == 0 ? &zero : &one;
    auto weight_panel = [&](int64_t p) {
      return const_cast<float*>(packed_w + p * stride + k0 * g.weight_ld);
    };
    auto token_panel = [&](int64_t t) { return scratch + t * kc * g.token_ld; };
    auto weight_cols = [&](int64_t p) { return std::min(g.weight_lanes, n - p * g.weight_lanes); };
    auto token_rows = [&](int64_t t) { return std::min(g.token_lanes, m - t * g.token_lanes); };
    if (g.weights_are_a) {
      // C^T = W^T X^T: a block of weight panels stays in L2 while each token
      // panel (in L1) meets every panel of the block.
      const int64_t block = std::max<int64_t>(1, g.a_block / g.weight_lanes);
      for (int64_t p0 = panel_begin; p0 < panel_end; p0 += block) {
        const int64_t p1 = std::min(panel_end, p0 + block);
        for (int64_t t = 0; t < token_panels; ++t) {
          for (int64_t p = p0; p < p1; ++p) {
            const int64_t next_p = p + 1 < p1 ? p + 1 : p0;
            bli_auxinfo_set_next_a(weight_panel(next_p), &aux);
            bli_auxinfo_set_next_b(token_panel(t), &aux);
            float* tile = c + t * g.token_lanes * ldc + (p * g.weight_lanes - j_first);
            if (token_rows(t) < g.token_lanes && partial_tiles != nullptr) {
              partial_tiles[token_rows(t) - 1](kc, weight_panel(p), g.weight_ld, token_panel(t),
                                               g.token_ld, tile, ldc, weight_cols(p), k0 > 0);
              continue;
            }
            kernel(weight_cols(p), token_rows(t), kc, &one, weight_panel(p), token_panel(t), beta,
                   tile, 1, ldc, &aux, cntx);
          }
        }
      }
    } else {
      // C = X W: a block of token panels stays in L2 while each weight panel
      // (in L1) meets every token panel of the block.
      const int64_t block = std::max<int64_t>(1, g.a_block / g.token_lanes);
      for (int64_t t0 = 0; t0 < token_panels; t0 += block) {
        const int64_t t1 = std::min(token_panels, t0 + block);
        for (int64_t p = panel_begin; p < panel_end; ++p) {
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t next_t = t + 1 < t1 ? t + 1 : t0;
            bli_auxinfo_set_next_a(token_panel(next_t), &aux);
            bli_auxinfo_set_next_b(weight_panel(p), &aux);
            float* tile = c + t * g.token_lanes * ldc + (p * g.weight_lanes - j_first);
            kernel(token_rows(t), weight_cols(p), kc, &one, token_panel(t), weight_panel(p), beta,
                   tile, ldc, 1, &aux, cntx);
          }
        }
      }
    }
  }
}

}  // namespace gemmserve
