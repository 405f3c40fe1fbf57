// FP16 / BF16 GEMM on BLIS's FP32 micro-kernels with custom packing: BLIS
// 0.9's `pack_fn` hook lets us fill its packed micro-panels ourselves, so the
// half-precision operands are widened (and A's rows gathered) while they are
// packed, a cache block at a time. Nothing else is materialised: no FP32 copy
// of the weights, no gathered copy of the rows. Measured against explicit
// gather and widen buffers followed by sgemm (docs/blis-custom-packing.md):
// 1.05-1.7x faster at 64-1024 rows, so this is the only half-precision
// packing path.
//
// How the hook works (the same as BLIS's test/tensor_contraction example):
// BLIS hands the pack_fn an m x k view of the operand (for B it hands B^T),
// with the view's offsets in the full operand; the pack_fn writes panels of
// MR (or NR) rows, element (i, kk) of panel p at buf[p * ps + kk * ldp + i],
// zero-padded past the edges. The objects are declared FP32 with the real
// dimensions; their buffers are read only by our pack_fns.
#include <blis.h>

#include <algorithm>
#include <array>

#include "server/ops/kernels/gemm.h"
#include "server/ops/kernels/streaming_gemm.h"

namespace gemmserve {
namespace {

// What a pack_fn needs to read its operand: element (i, kk) of the m x k view
// BLIS packs. `rows` gathers A; `transposed` is the weights' side, read as
// B^T (row i of the view is column i of B).
struct PackSource {
  DataType type;
  const uint16_t* data;
  int64_t ld;
  const int64_t* rows;  // view row i is data row rows[i]; null: i
  bool transposed;
};

// The gather side transposes through a stack tile of kMaxTileRows x kChunk
// (BLIS 0.9's FP32 micro-tiles are at most 32 wide: one tile per panel).
constexpr dim_t kMaxTileRows = 32;
constexpr dim_t kChunk = 64;

void FillPanel(const PackSource& src, float* panel, dim_t ldp, dim_t rows, dim_t mr, dim_t k,
               dim_t row0, dim_t k0) {
  if (src.transposed) {
    // Row kk of the panel is `rows` consecutive elements of one row of B.
    for (dim_t kk = 0; kk < k; ++kk) {
      float* dst = panel + kk * ldp;
      WidenToFloat(src.type, src.data + (k0 + kk) * src.ld + row0, dst, rows);
      std::fill(dst + rows, dst + mr, 0.0f);
    }
    return;
  }
  // Rows of A (gathered) widened a chunk of K at a time, then transposed in,
  // kMaxTileRows rows at a time.
  for (dim_t i0 = 0; i0 < rows; i0 += kMaxTileRows) {
    const dim_t tile_rows = std::min(kMaxTileRows, rows - i0);
    std::array<const uint16_t*, kMaxTileRows> row_ptr{};
    for (dim_t i = 0; i < tile_rows; ++i) {
      const int64_t r = src.rows ? src.rows[row0 + i0 + i] : row0 + i0 + i;
      row_ptr[i] = src.data + r * src.ld + k0;
    }
    alignas(64) float tile[kMaxTileRows][kChunk];
    for (dim_t kb = 0; kb < k; kb += kChunk) {
      const dim_t kn = std::min(kChunk, k - kb);
      for (dim_t i = 0; i < tile_rows; ++i) WidenToFloat(src.type, row_ptr[i] + kb, tile[i], kn);
      for (dim_t kk = 0; kk < kn; ++kk) {
        float* dst = panel + (kb + kk) * ldp + i0;
        for (dim_t i = 0; i < tile_rows; ++i) dst[i] = tile[i][kk];
      }
    }
  }
  for (dim_t kk = 0; kk < k; ++kk) std::fill(panel + kk * ldp + rows, panel + kk * ldp + mr, 0.0f);
}

// obj_pack_fn_t: packs the m x k view `a` into `p` from the PackSource
// attached as the object's pack params.
void PackHalf(obj_t* a, obj_t* p, cntx_t* cntx, rntm_t* rntm, cntl_t* cntl, thrinfo_t* thread) {
  const auto* src = static_cast<const PackSource*>(bli_obj_pack_params(a));
  bli_obj_alias_to(a, p);
  const bszid_t bmid_m = bli_cntl_packm_params_bmid_m(cntl);
  const bszid_t bmid_n = bli_cntl_packm_params_bmid_n(cntl);
  const dim_t mr = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, bmid_m, cntx);
  const dim_t ldp = bli_cntx_get_blksz_max_dt(BLIS_FLOAT, bmid_m, cntx);
  const dim_t kr = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, bmid_n, cntx);
  const dim_t off_m = bli_obj_row_off(a), off_k = bli_obj_col_off(a);

  bli_obj_set_pack_schema(bli_cntl_packm_params_pack_schema(cntl), p);
  bli_obj_set_conj(BLIS_NO_CONJUGATE, p);
  bli_obj_set_uplo(BLIS_DENSE, p);
  bli_obj_set_offs(0, 0, p);
  const dim_t m = bli_obj_length(p), k = bli_obj_width(p);
  const dim_t m_pad = bli_align_dim_to_mult(m, mr), k_pad = bli_align_dim_to_mult(k, kr);
  bli_obj_set_padded_dims(m_pad, k_pad, p);
  const inc_t ps = ldp * k_pad;
  const dim_t panels = m_pad / mr;
  bli_obj_set_strides(1, ldp, p);
  bli_obj_set_imag_stride(1, p);
  bli_obj_set_panel_dim(mr, p);
  bli_obj_set_panel_stride(ps, p);
  bli_obj_set_panel_length(mr, p);
  bli_obj_set_panel_width(k, p);

  const siz_t size = static_cast<siz_t>(ps * panels) * sizeof(float);
  if (size == 0) return;
  auto* buf = static_cast<float*>(bli_packm_alloc(size, rntm, cntl, thread));  // collective
  bli_obj_set_buffer(buf, p);
  obj_t kappa;
  bli_packm_scalar(&kappa, p);  // alpha is always 1 here

  dim_t first, last, step;
  bli_thread_range_jrir(thread, panels, 1, FALSE, &first, &last, &step);
  for (dim_t it = first; it < last; it += step) {
    float* panel = buf + it * ps;
    const dim_t rows = std::min(mr, m - it * mr);
    FillPanel(*src, panel, ldp, rows, mr, k, off_m + it * mr, off_k);
    for (dim_t kk = k; kk < k_pad; ++kk) std::fill(panel + kk * ldp, panel + kk * ldp + mr, 0.0f);
  }
}

}  // namespace

void HalfPackedGemm(DataType type, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                    const int64_t* a_rows, const uint16_t* b, int64_t ldb, float* c, int64_t ldc,
                    int threads) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  PackSource rows{type, a, lda, a_rows, false};
  PackSource weights{type, b, ldb, nullptr, true};
  cntx_t* cntx = bli_gks_query_cntx();
  // Build the product in the orientation the micro-kernel prefers, or BLIS
  // swaps the operands itself: row-preferring kernels (haswell) get
  // C[m x n] = A * B; column-preferring ones (skx) C^T[n x m] = B^T * A^T,
  // the same memory.
  const bool columns = bli_cntx_l3_vir_ukr_prefers_cols_dt(BLIS_FLOAT, BLIS_GEMM_UKR, cntx);
  const inc_t ldc_blis = std::max<int64_t>({ldc, n, 1});
  auto* a_buf = const_cast<uint16_t*>(a);
  auto* b_buf = const_cast<uint16_t*>(b);
  obj_t ao, bo, co;
  if (!columns) {
    bli_obj_create_with_attached_buffer(BLIS_FLOAT, m, k, a_buf, k, 1, &ao);
    bli_obj_create_with_attached_buffer(BLIS_FLOAT, k, n, b_buf, n, 1, &bo);
    bli_obj_create_with_attached_buffer(BLIS_FLOAT, m, n, c, ldc_blis, 1, &co);
  } else {
    bli_obj_create_with_attached_buffer(BLIS_FLOAT, k, m, a_buf, 1, k, &ao);
    bli_obj_create_with_attached_buffer(BLIS_FLOAT, n, k, b_buf, 1, n, &bo);
    bli_obj_create_with_attached_buffer(BLIS_FLOAT, n, m, c, 1, ldc_blis, &co);
  }
  bli_obj_set_pack_fn(PackHalf, &ao);
  bli_obj_set_pack_params(&rows, &ao);
  bli_obj_set_pack_fn(PackHalf, &bo);
  bli_obj_set_pack_params(&weights, &bo);
  rntm_t rntm;
  bli_rntm_init(&rntm);
  bli_rntm_set_num_threads(std::max(threads, 1), &rntm);
  bli_rntm_disable_l3_sup(&rntm);  // the small-matrix path ignores pack_fn
  if (!columns) {
    bli_gemm_ex(&BLIS_ONE, &ao, &bo, &BLIS_ZERO, &co, cntx, &rntm);
  } else {
    bli_gemm_ex(&BLIS_ONE, &bo, &ao, &BLIS_ZERO, &co, cntx, &rntm);
  }
}

}  // namespace gemmserve
