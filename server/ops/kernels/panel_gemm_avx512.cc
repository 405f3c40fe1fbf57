// The FP32 panel family's AVX-512 build (panel_gemm.h; compiled with the
// AVX-512 flags, it runs only where the kernel set, kernel_set.h, names it):
// the tiles for token panels that are not full, where BLIS's kernel is
// column-preferring with 32-wide weight panels (skx).
#include <immintrin.h>

#include <cstdint>

#include "server/ops/kernels/panel_gemm.h"
#include "server/ops/kernels/tile32.h"

namespace gemmserve {
namespace panel_gemm_internal {
namespace {

// R valid token rows x 32 weight columns (PartialTileFn); K step kk of the
// weight panel is at weights + kk * wld, of the token panel at tokens +
// kk * tld.
template <int R>
void PartialTile(int64_t kc, const float* weights, int64_t wld, const float* tokens, int64_t tld,
                 float* c, int64_t ldc, int64_t cols, bool accumulate) {
  tile32::FmaTile<R>(
      kc, tokens, tld,
      [ weights, wld ](int64_t kk, __m512 & lo, __m512 & hi) __attribute__((always_inline)) {
        lo = _mm512_load_ps(weights + kk * wld);
        hi = _mm512_load_ps(weights + kk * wld + 16);
      },
      [](int64_t) __attribute__((always_inline)){}, c, ldc, cols, accumulate);
}

}  // namespace

const PartialTileFn kPartialTilesAvx512[kPartialTileRows] = {
    PartialTile<1>, PartialTile<2>,  PartialTile<3>,  PartialTile<4>,
    PartialTile<5>, PartialTile<6>,  PartialTile<7>,  PartialTile<8>,
    PartialTile<9>, PartialTile<10>, PartialTile<11>, PartialTile<12>};

}  // namespace panel_gemm_internal
}  // namespace gemmserve
