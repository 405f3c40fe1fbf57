// The quantized family's AVX512-BF16 build (quantized_gemm.h; compiled with
// -mavx512bf16 besides the AVX-512 flags, it runs only where the kernel set,
// kernel_set.h, names it): the BF16 pair panels of quantized weights rounded
// by vcvtne2ps2bf16 where the scales allow it, the AVX-512 build's panels
// elsewhere.
#include <immintrin.h>

// GCC 12 flags the deliberately undefined register inside _mm512_cvtph_ps as
// "maybe uninitialized" (a known false positive of its intrinsics header).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>

#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/ops/kernels/quantized_gemm.h"
#include "server/ops/kernels/quantized_layout.h"

namespace gemmserve {
namespace streaming_internal {
namespace {
namespace avx512bf16 {

#include "server/ops/kernels/quantized_avx512_impl.inc"

// DequantizePanelsAs with the rounding to BF16 done by vcvtne2ps2bf16 (16
// values of each row of a pair in one instruction) and the pairs
// interleaved by one vpermw: about half the instructions per 32 values.
// Only where the scales are ScalesFactorable: vcvtne2ps2bf16 reads
// subnormal inputs as zero, and with every nonzero |scale| at least 2^-126
// and |q - z| an integer, no (q - z) * scale is subnormal, so it rounds
// exactly as the integer arithmetic does (nearest even; NaN is excluded by
// the same check).
template <QuantizedType kType, bool kPerColumn, bool kZero>
void DequantizePanelsNative(const QuantizedMatrix& w, int64_t k_begin, int64_t k_end, int64_t j0,
                            int64_t width, uint16_t* out) {
  // Word l of a pair: row 2q's column l in its low half, row 2q + 1's in its high.
  const __m512i interleave =
      _mm512_setr_epi32(0x00100000, 0x00110001, 0x00120002, 0x00130003, 0x00140004, 0x00150005,
                        0x00160006, 0x00170007, 0x00180008, 0x00190009, 0x001a000a, 0x001b000b,
                        0x001c000c, 0x001d000d, 0x001e000e, 0x001f000f);
  // FP32 values (no rounding yet): Dequantize16's (q - z) * scale.
  DequantizePanelsWith<kType, kPerColumn, kZero, DataType::kFP32>(
      w, k_begin, k_end, j0, width, out, [interleave](__m512 v0, __m512 v1, __mmask16 mask) {
        if (mask != 0xffff) {  // one scale or zero point fills every lane
          v0 = _mm512_maskz_mov_ps(mask, v0);
          v1 = _mm512_maskz_mov_ps(mask, v1);
        }
        // Lanes 0-15: row 2q's values, 16-31: row 2q + 1's.
        const __m512i both = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(v1, v0));
        return _mm512_permutexvar_epi16(interleave, both);
      });
}

}  // namespace avx512bf16
}  // namespace

void DequantizeBf16PanelsAvx512Bf16(const QuantizedMatrix& w, int64_t k_begin, int64_t k_end,
                                    int64_t j0, int64_t width, uint16_t* out) {
  // 4-bit rows must start on a byte, the tile on an even column, and the
  // scales be factorable (above).
  if (!QuantizedFusedApplies(w) || j0 % 2 != 0 || !w.scales_factorable) {
    return DequantizeBf16PanelsAvx512(w, k_begin, k_end, j0, width, out);
  }
  WithQuantizedType(w.type, [&](auto type) {
    WithScaleLayout(w, [&](auto per_column, auto zero) {
      avx512bf16::DequantizePanelsNative<decltype(type)::value, decltype(per_column)::value,
                                         decltype(zero)::value>(w, k_begin, k_end, j0, width, out);
    });
  });
}

}  // namespace streaming_internal
}  // namespace gemmserve
