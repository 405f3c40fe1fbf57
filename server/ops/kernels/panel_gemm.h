// FP32 GEMM on weights packed once, in the layout BLIS's own micro-kernel
// reads: a loop nest of ours around BLIS's native sgemm micro-kernel
// (bli_cntx_get_l3_nat_ukr_dt), with BLIS's register and cache block sizes
// from the same context. Resident weights never change, so they are packed
// at load (PackWeightPanels) and each call packs only its gathered token
// rows; a BLIS call re-packs every expert's weights on every call, which at
// 8-128 rows per expert costs as much as the product itself.
//
// Orientation. BLIS's micro-kernel computes an MR x NR tile of C from a
// packed MR-wide panel of its "A" and an NR-wide panel of its "B", and
// prefers to write C by rows (haswell, zen3: 6 x 16) or by columns (skx:
// 32 x 12). Row-preferring kernels get C = X * W (tokens are A, weights B);
// column-preferring ones C^T = W^T * X^T (weights are A, tokens B). Either
// way the weights are panels of `weight_lanes` columns of W and the tokens
// panels of `token_lanes` rows of X, element (kk, lane) of a panel at
// panel[kk * ld + lane], zero past the edges.
//
// FP32 only: FP64 experts stay row-major (packed_weights.h says why), and
// BF16/FP16 have panels of their own (bf16_panel_gemm.h).
//
//   const PanelGeometry& g = Fp32PanelGeometry();
//   std::vector<float> packed(PackedWeightElements(g, k, n));
//   PackWeightPanels(g, w, n, k, n, packed.data());                // once
//   PanelGemm(g, m, k, n, x, k, rows, packed.data(), 0, PanelCount(g, n),
//             c, n, scratch);                                      // per call
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_PANEL_GEMM_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_PANEL_GEMM_H_

#include <cstdint>

namespace gemmserve {

struct PanelGeometry {
  int64_t weight_lanes = 0, weight_ld = 0;  // columns of W per panel; its packed width
  int64_t token_lanes = 0, token_ld = 0;    // rows of X per panel; its packed width
  int64_t kc = 0;                // K block: one micro-panel of either operand per K block
  int64_t a_block = 0;           // MC: rows of the micro-kernel's A operand kept in L2
  bool weights_are_a = false;    // column-preferring kernel: C^T = W^T * X^T
  const void* kernel = nullptr;  // BLIS's sgemm_ukr_ft
};

// The geometry of the sgemm micro-kernel BLIS runs in this process (its
// configuration is fixed when BLIS starts).
const PanelGeometry& Fp32PanelGeometry();

// Whether token panels that are not full (fewer rows than token_lanes, as in
// decode) run on a tile of ours that computes only the valid rows: FP32 with
// AVX-512 where BLIS's kernel is skx's (32-wide weight panels). Then even a
// problem of one row is best served by PanelGemm.
bool PanelGemmHasPartialTiles(const PanelGeometry& g);

// Weight panels of an [k, n] matrix, and its packed size in elements (each
// panel padded to whole 64-byte lines).
int64_t PanelCount(const PanelGeometry& g, int64_t n);
int64_t PanelStrideElements(const PanelGeometry& g, int64_t k);
inline int64_t PackedWeightElements(const PanelGeometry& g, int64_t k, int64_t n) {
  return PanelCount(g, n) * PanelStrideElements(g, k);
}

// Packs W [k, n] (row stride ldw) into `out` (PackedWeightElements elements,
// 64-byte aligned).
void PackWeightPanels(const PanelGeometry& g, const float* w, int64_t ldw, int64_t k, int64_t n,
                      float* out);

// Elements of token scratch PanelGemm needs for m rows of length k.
int64_t PanelGemmScratchElements(const PanelGeometry& g, int64_t m, int64_t k);

// C[i, j - first column] = sum_kk X[row(i), kk] * W[kk, j] for i in [0, m) and
// the columns j of weight panels [panel_begin, panel_end) (clamped to n),
// with row(i) = a_rows[i] (null: i). C has row stride ldc and is
// overwritten; `scratch` holds PanelGemmScratchElements(g, m, k) elements.
// k == 0 writes zeros.
void PanelGemm(const PanelGeometry& g, int64_t m, int64_t k, int64_t n, const float* x, int64_t ldx,
               const int64_t* a_rows, const float* packed_w, int64_t panel_begin, int64_t panel_end,
               float* c, int64_t ldc, float* scratch);

namespace panel_gemm_internal {
// Our tile for a token panel that is not full: `rows` valid token rows x 32
// weight columns over kc K steps, C row-major (row stride ldc, its first
// `cols` columns), added to C when `accumulate`. BLIS's micro-kernel always
// computes all its NR token rows, so a decode call with one row would do
// twelve rows' work; this one does `rows`. Tables of kPartialTileRows tiles,
// for 1 to 12 rows (index rows - 1).
using PartialTileFn = void (*)(int64_t kc, const float* weights, int64_t wld, const float* tokens,
                               int64_t tld, float* c, int64_t ldc, int64_t cols, bool accumulate);
inline constexpr int kPartialTileRows = 12;
// The AVX-512 build (panel_gemm_avx512.cc), for skx's 32-wide weight panels.
extern const PartialTileFn kPartialTilesAvx512[kPartialTileRows];
}  // namespace panel_gemm_internal

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_PANEL_GEMM_H_
