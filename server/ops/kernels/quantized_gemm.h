// Weight-only quantized GEMM for few rows (the decode path of quantized
// experts, issue 17): C[rows, n] += A[rows, k_begin:k_end] * W[k_begin:k_end, :]
// where W is ONNX DequantizeLinear of 8- or 4-bit integers,
//
//   W[r, j] = round_T((q[r, j] - zero_point[r, j]) * scale[r, j])
//
// with T the dequantized value type (FP32, FP16 or BF16: DequantizeLinear's
// output type, so the product is rounded to it exactly as the ONNX graph
// means), computed in FP32 (exact for every (q - zero_point) times an FP16 or
// BF16 scale, one rounding for an FP32 scale). The quantized bytes are read
// once, in address order, and dequantized four rows of a 1024-column block at
// a time into an L1-resident buffer: the dequantized matrix is never
// materialised. Accumulation in FP32, as the streaming kernel it shares its
// loops with (streaming_gemm_impl.inc).
//
// Scales and zero points cover blocks of `block_rows` rows along K (ONNX's
// blocked quantization; per-channel along N is one block of all K rows) and
// are addressed with strides, so per-tensor, per-row and per-column layouts
// are all one description. They are FP32 here (converted once at load); a
// zero point is an integer of the weights' type held exactly in a float.
//
//   QuantizedMatrix w{QuantizedType::kInt4, packed, 0, k, n, scales, nullptr,
//                     /*block_rows=*/32, /*scale_row_stride=*/n, /*scale_col_stride=*/1,
//                     DataType::kBF16};
//   QuantizedGemmAccumulate(rows, 0, k, a, k, w, c, n);
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_QUANTIZED_GEMM_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_QUANTIZED_GEMM_H_

#include <cstdint>

#include "server/tensor/datatype.h"

namespace gemmserve {

// ONNX's element types for quantized weights. The 4-bit ones pack two
// values per byte, the element of even flat index in the low nibble.
enum class QuantizedType { kInt8, kUint8, kInt4, kUint4 };

struct QuantizedMatrix {
  QuantizedType type = QuantizedType::kInt8;
  const uint8_t* data = nullptr;
  // Flat element index of W[0, 0] in `data` (W[r, j] is element first + r * n
  // + j): an expert of a packed 4-bit [G, K, N] tensor may start mid-byte.
  int64_t first = 0;
  int64_t k = 0, n = 0;
  // scale of W[r, j]: scale[(r / block_rows) * scale_row_stride + j * scale_col_stride];
  // zero_point likewise, or none (nullptr: zero).
  const float* scale = nullptr;
  const float* zero_point = nullptr;
  int64_t block_rows = 1;
  int64_t scale_row_stride = 0, scale_col_stride = 0;
  DataType value_type = DataType::kFP32;  // kFP32, kFP16 or kBF16
  // ScalesFactorable of all the scales (set where they are held): FP32
  // values may then take the scale out of the sum (see the AVX-512 build).
  bool scales_factorable = false;
  // ScalesMinExponent of all the scales (set where they are held; 0, as for
  // a subnormal, when unknown): a lower bound of the exponents of W's
  // nonzero values, since |q - z| >= 1 and rounding never lowers one.
  int scales_min_exponent = 0;
  // The integers again in the layout the AVX512-VNNI and AVX-VNNI kernels of
  // 8-bit activations read (PackInt8Weights in int8_dot.h), for weights of
  // models with accuracy_level 4 where one of them runs; null otherwise.
  const uint8_t* int8_packed = nullptr;
};

// The smallest biased exponent (FP32's, which BF16 shares) of the nonzero
// values among `count` scales, 255 if all are zero.
int ScalesMinExponent(const float* scale, int64_t count);

// With FP32 values, sum_r a_r (q_r - z) s, the scale applied once to the
// sum, is DequantizeLinear-then-multiply up to one FP32 rounding per term
// when no (q - z) s is subnormal or infinite and no a (q - z) overflows:
// every scale zero or of magnitude in [2^-126, 2^100], and every |a| at most
// kFactorableActivation. The kernels check the activations per call.
inline constexpr float kFactorableActivation = 0x1p100f;
bool ScalesFactorable(const float* scale, int64_t count);

// The integer at flat element index e (no scale), for references and tests.
int32_t QuantizedElement(QuantizedType type, const uint8_t* data, int64_t e);

// Bytes holding `elements` values of `type`.
int64_t QuantizedBytes(QuantizedType type, int64_t elements);

void QuantizedGemmAccumulate(int64_t rows, int64_t k_begin, int64_t k_end, const float* a,
                             int64_t lda, const QuantizedMatrix& w, float* c, int64_t ldc);

// Rows [k_begin, k_end) and columns [j0, j0 + width) of W, dequantized and
// rounded to BF16 (W's value type must be BF16), into Bf16PanelGemm's pair
// panels over K = k_end - k_begin: Bf16PanelCount(width) panels of
// Bf16PanelStride(k_end - k_begin) elements, columns past `width` and the
// row padding K to even zero. The larger-M path: one block of the quantized
// weights at a time, never the whole tensor, reused by every row of the
// block (bf16_panel_gemm.h). Exact: DequantizeLinear's values, rounded to
// BF16 to nearest even.
void DequantizeBf16Panels(const QuantizedMatrix& w, int64_t k_begin, int64_t k_end, int64_t j0,
                          int64_t width, uint16_t* out);

namespace streaming_internal {
void DequantizeBf16PanelsGeneric(const QuantizedMatrix& w, int64_t k_begin, int64_t k_end,
                                 int64_t j0, int64_t width, uint16_t* out);
void DequantizeBf16PanelsAvx512(const QuantizedMatrix& w, int64_t k_begin, int64_t k_end,
                                int64_t j0, int64_t width, uint16_t* out);
// The AVX512-BF16 build (only on CPUs with it): rounds with vcvtne2ps2bf16
// where the matrix has scales_factorable, 4-bit rows start on a byte and j0
// is even; DequantizeBf16PanelsAvx512 elsewhere.
void DequantizeBf16PanelsAvx512Bf16(const QuantizedMatrix& w, int64_t k_begin, int64_t k_end,
                                    int64_t j0, int64_t width, uint16_t* out);
// The decode kernel's builds (quantized_gemm.cc, quantized_gemm_avx2.cc,
// quantized_gemm_avx512.cc; they share the streaming kernel's loops), for
// the kernel set and for tests that compare them where the CPU has them.
void QuantizedGeneric(int64_t rows, int64_t k_begin, int64_t k_end, const float* a, int64_t lda,
                      const QuantizedMatrix& w, float* c, int64_t ldc);
void QuantizedAvx512(int64_t rows, int64_t k_begin, int64_t k_end, const float* a, int64_t lda,
                     const QuantizedMatrix& w, float* c, int64_t ldc);
void QuantizedAvx2(int64_t rows, int64_t k_begin, int64_t k_end, const float* a, int64_t lda,
                   const QuantizedMatrix& w, float* c, int64_t ldc);
}  // namespace streaming_internal

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_QUANTIZED_GEMM_H_
