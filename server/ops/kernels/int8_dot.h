// Integer dot products on 8-bit activations (accuracy_level 4, issue 42):
// ONNX Runtime's MatMulNBits / QMoE accuracy level 4, llama.cpp's Q8_0
// activations. Each row of A is quantized per block of K (the weights' block
// size, or kInt8ActivationBlock for per-channel or per-tensor weights) to
// symmetric INT8 with one FP32 scale,
//
//   s = max|a| / 127,  q = round_to_nearest_even(a * (127 / max|a|))  (q in [-127, 127]),
//
// once per call and row; then for quantized weights W (QuantizedMatrix)
//
//   C[r, j] += sum_b  s_a[r, b] * s_w[b, j] * (sum_{t in b} q_a[r, t] q_w[t, j]
//                                              - z_w[b, j] * sum_{t in b} q_a[r, t])
//
// with the integer sums exact (int32), the weights' zero points folded into
// one correction per block from the activation block's precomputed sum, and
// each block's term added in FP32 with one fused multiply-add, blocks in
// order. The result differs from DequantizeLinear-then-op by the
// activations' rounding (at most half a step of s_a per element): it is
// opt-in per model.
//
// Bounds: |q_a| <= 127 and |q_w - z| <= 255, so a block of B rows sums to at
// most 127 * 255 * 2 * B in magnitude (the correction included): B <=
// kInt8MaxBlock keeps it in int32 with room, and B <= 256 keeps it exact in
// the FP32 it is scaled in (below 2^24).
//
//   Int8Rows rows;
//   QuantizeInt8Rows(DataType::kFP32, a, k, m, k, Int8ActivationBlock(w), &rows);
//   Int8DotAccumulate(m, nullptr, rows, 0, k, w, c, n);
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_INT8_DOT_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_INT8_DOT_H_

#include <cstdint>
#include <vector>

#include "server/ops/kernels/quantized_gemm.h"
#include "server/tensor/datatype.h"

namespace gemmserve {

// The activation block of per-channel and per-tensor weights (ONNX Runtime's
// and llama.cpp's 32).
inline constexpr int64_t kInt8ActivationBlock = 32;
// The largest block the integer sums take (see Bounds above); weights in
// larger blocks are refused at load for accuracy_level 4.
inline constexpr int64_t kInt8MaxBlock = 4096;

// The activation block for weights `w`: their block of K rows when blocked
// (block_rows < k), else kInt8ActivationBlock.
int64_t Int8ActivationBlock(const QuantizedMatrix& w);

// Rows of A quantized per block of K: q [rows, ld] (ld = blocks * block, zero
// past K), scale and sum [rows, blocks].
struct Int8Rows {
  int64_t rows = 0, k = 0, block = kInt8ActivationBlock, blocks = 0, ld = 0;
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> sum;
};

// Bytes QuantizeInt8Rows holds for `rows` rows of K (with the largest
// block's padding), for the scheduler's memory bound.
int64_t Int8RowsBytes(int64_t rows, int64_t k);

// Quantizes `rows` rows of A (FP32, FP16 or BF16 at `a`, row stride lda in
// elements) in blocks of `block` (1 <= block <= kInt8MaxBlock) into `out`.
// std::bad_alloc if the buffers cannot be had.
void QuantizeInt8Rows(DataType type, const void* a, int64_t lda, int64_t rows, int64_t k,
                      int64_t block, Int8Rows* out);

// C[i, :] += the product above over K rows [k_begin, k_end) for i in
// [0, rows), row i of A being row a_rows[i] of `a` (null: i). k_begin is a
// multiple of a.block, and k_end one or K; a.block is
// Int8ActivationBlock(w) and a.k == w.k.
void Int8DotAccumulate(int64_t rows, const int64_t* a_rows, const Int8Rows& a, int64_t k_begin,
                       int64_t k_end, const QuantizedMatrix& w, float* c, int64_t ldc);

// The weights repacked once at load for the AVX512-VNNI and AVX-VNNI
// kernels, so that a call reads each byte once in address order and does no
// shuffling: per activation block, per 64-column chunk, per four K rows (a
// quad; for 4-bit weights a pair of quads, the second in the high nibbles),
// 256 bytes holding the four registers vpdpbusd takes, sixteen columns each
// in order, a column's four rows in its 32-bit lane, made unsigned (+128 for
// INT8, +8 for INT4). Columns past N and rows past a block's end are zero.
// The AVX-VNNI kernel reads each 64-byte register q as two of its own
// (columns 16q .. 16q + 7 and 16q + 8 .. 16q + 15 of the chunk): one copy
// serves both builds. INT4 stays 4 bits a weight; a block padded to whole
// quads (pairs) and N to whole chunks costs padding, so packing is done only
// where it adds at most the integers' own size (Int8PackingCostsLittle).
int64_t Int8PackedBytes(const QuantizedMatrix& w, int64_t block);
bool Int8PackingCostsLittle(const QuantizedMatrix& w, int64_t block);
// `out` holds Int8PackedBytes(w, block) bytes.
void PackInt8Weights(const QuantizedMatrix& w, int64_t block, uint8_t* out);

namespace int8_dot_internal {
// The builds Int8DotAccumulate picks from (KernelSet::int8_dot), for tests
// that hold each to the portable one bit for bit. The AVX512-VNNI build runs
// vpdpbusd on four K rows of sixteen columns interleaved in registers, the
// weights made unsigned (+128 for INT8, +8 for INT4, folded into the zero
// point's correction); 4-bit rows that start mid-byte take the portable path
// (in every build).
void Int8DotGeneric(int64_t rows, const int64_t* a_rows, const Int8Rows& a, int64_t k_begin,
                    int64_t k_end, const QuantizedMatrix& w, float* c, int64_t ldc);
void Int8DotAvx512Vnni(int64_t rows, const int64_t* a_rows, const Int8Rows& a, int64_t k_begin,
                       int64_t k_end, const QuantizedMatrix& w, float* c, int64_t ldc);
// The AVX-VNNI build (CPUs with the VEX-encoded 256-bit vpdpbusd but not
// AVX512-VNNI): the AVX512-VNNI build's arithmetic on eight columns a
// register, on row-major weights or the same packed layout, bit for bit the
// portable build's results; 4-bit row-major rows that start mid-byte take
// the portable path.
void Int8DotAvxVnni(int64_t rows, const int64_t* a_rows, const Int8Rows& a, int64_t k_begin,
                    int64_t k_end, const QuantizedMatrix& w, float* c, int64_t ldc);
// The AVX2 build (CPUs without either VNNI): two K rows widened to int16 and
// vpmaddwd, exact in int32 (vpmaddubsw's int16 sums would saturate on 8-bit
// weights); row-major weights only.
void Int8DotAvx2(int64_t rows, const int64_t* a_rows, const Int8Rows& a, int64_t k_begin,
                 int64_t k_end, const QuantizedMatrix& w, float* c, int64_t ldc);
}  // namespace int8_dot_internal

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_INT8_DOT_H_
