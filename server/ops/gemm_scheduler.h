// One entry point for all compute: a list of independent GEMM problems run by
// one scheduler. A GroupedMatMul is one problem per expert in use (rows
// gathered from the tokens that chose it, results scattered to their [M,S,N]
// slots); a MatMul is one problem (batch folded into M) or one per batch
// entry; the batching layer merges the lists of several requests into one
// call, so each expert's weights are read once for all of them.
//
// The scheduler splits the work so uneven problems still keep every thread
// busy:
//   - a problem with few rows (decode) streams its B once with the streaming
//     kernel, its K cut into slices across threads;
//   - the others run one packing GEMM each (BLIS, or the integer kernel),
//     side by side on one thread each, cut into column tiles until there are
//     two tiles per thread;
//   - a problem whose B was packed once (b_panels: a resident model's
//     weights) packs only its rows and runs on the panels (PanelGemm, BLIS's
//     micro-kernel, or the BF16/FP16 panel kernels), in column tiles taken
//     largest first; FP32 panels of few rows stream where no tile of ours
//     serves few rows. BF16 problems on row-major weights pack them per
//     call where BF16 panels are preferred (bf16_panel_gemm.h).
// Nothing of the form [rows, K, N] is ever materialised; bias is added in the
// epilogue, before the one rounding of half types; rows land directly in C.
//
//   GemmProblem p;
//   p.type = DataType::kFP32; p.m = rows; p.n = n; p.k = k;
//   p.a = input; p.lda = k; p.a_rows = token_of_row;   // gather
//   p.b = weights + g * k * n; p.ldb = n;
//   p.c = output; p.ldc = n; p.c_rows = slot_of_row;   // scatter
//   GEMMSERVE_RETURN_IF_ERROR(RunGemmProblems({p}, threads));
#ifndef GEMMSERVE_SERVER_OPS_GEMM_SCHEDULER_H_
#define GEMMSERVE_SERVER_OPS_GEMM_SCHEDULER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/ops/kernels/quantized_gemm.h"
#include "server/tensor/datatype.h"

namespace gemmserve {

// C[c_row(i), :] = A[a_row(i), :] * B (+ bias) for i in [0, m). All of one
// datatype; row-major with the given row strides (in elements).
struct GemmProblem {
  DataType type = DataType::kFP32;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const int64_t* a_rows = nullptr;  // row i of the problem is row a_rows[i] of a; null: i
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  const int64_t* c_rows = nullptr;  // row i goes to row c_rows[i] of c; null: i
  const void* bias = nullptr;       // [n], floating types only; null: none
  // B packed once into weight panels (PackedWeights: PackWeightPanels with
  // Fp32PanelGeometry() for FP32, PackBf16Panels / PackFp16Panels): b
  // and ldb are unused, and only the gathered rows of A are packed per call.
  // Null: B is b, row-major.
  const void* b_panels = nullptr;
  int b_panels_min_exponent = 0;  // BF16 panels: Bf16MinExponent of B
  // B stored quantized (QuantizedWeights::group): b, ldb and b_panels are
  // unused, and type is the dequantized value type. Such problems stream B
  // through the fused dequantizing kernel, in blocks of kQuantizedBlockRows
  // rows, or (BF16 values, kQuantizedPanelMinRows rows or more) dequantize
  // it a column tile at a time into BF16 pair panels.
  const QuantizedMatrix* b_quantized = nullptr;
  // With b_quantized: the rows of A quantized to 8 bits per K block and
  // multiplied by integer dot products (accuracy_level 4,
  // kernels/int8_dot.h) instead of DequantizeLinear's values. Every row of
  // `a` is quantized once per call, however many problems read it; the
  // memory bound (GemmWorkShape::int8_activations) counts the rows of A as
  // at most the problems' rows, as every caller's A is (each row is read).
  bool int8_activations = false;
};

// Rows of a quantized problem streamed together: each block reads the
// quantized B once and dequantizes every group of its rows once for them.
inline constexpr int64_t kQuantizedBlockRows = 64;
// Quantized problems with BF16 values and at least this many rows run on
// BF16 pair panels dequantized per call where vdpbf16ps is preferred (see
// QuantizedOnPanels in gemm_scheduler.cc); fewer rows stream.
inline constexpr int64_t kQuantizedPanelMinRows = 8;

// Problems with at most this many rows take the streaming path, which reads B
// once; above it a packing GEMM wins, since the streaming kernel keeps its
// accumulators in L1/L2 rather than registers (docs/performance.md).
inline constexpr int64_t kStreamingMaxRows = 16;

// Gathered problems above kStreamingMaxRows run this many rows at a time, so
// a thread's scratch (gathered rows, FP32 results) stays bounded however many
// tokens chose one expert; B is repacked per block, a small cost against
// 2 * kGatherBlockRows flops per element of B.
inline constexpr int64_t kGatherBlockRows = 512;

// Runs every problem with up to `threads` threads. The problems' outputs must
// not overlap. RESOURCE_EXHAUSTED if scratch memory is denied.
absl::Status RunGemmProblems(absl::Span<const GemmProblem> problems, int threads);

// What a list of problems looks like, as far as its memory goes, before it
// is built (a GroupedMatMul's rows per expert are known only once its indices
// are read): `problems` problems of one type, `rows` rows in all, each with
// between `min_rows` and `max_rows` rows, all with the same K and N.
struct GemmWorkShape {
  DataType type = DataType::kFP32;
  int64_t problems = 0;
  int64_t rows = 0;
  int64_t min_rows = 0, max_rows = 0;
  int64_t k = 0, n = 0;
  bool gathered = false;   // rows gathered, scattered or given a bias
  bool panels = false;     // B pre-packed (GemmProblem::b_panels)
  bool quantized = false;  // B quantized (GemmProblem::b_quantized)
  bool int8_activations = false;  // and A in 8 bits (GemmProblem::int8_activations)
};

// Bytes RunGemmProblems holds for such a list beyond its operands (its
// bookkeeping and scratch), and the bytes the caller's list of GemmProblem
// takes: an upper bound that adds up, so a merged list of several requests'
// problems is covered by the sum of their own bounds. Saturates at INT64_MAX.
int64_t GemmWorkBytes(const GemmWorkShape& work, int threads);

// What RunGemmProblems allocates for exactly this list (its scratch buffers
// and work lists, without container slack) plus the list itself: the figure
// GemmWorkBytes must bound (gemm_scheduler_test checks that it does).
int64_t GemmScratchBytes(absl::Span<const GemmProblem> problems, int threads);

// Bytes of weights (B) the problems use, each problem's B counted once as it
// is stored: row-major K x N elements, packed panels, or the quantized
// integers with their FP32 scales and zero points. Decode reads each exactly
// once from memory, so this over a call's time is the weights' share of the
// bandwidth (gemmserve_weight_bytes_total); larger batches may reread some
// from cache. Saturates at INT64_MAX.
int64_t GemmWeightBytes(absl::Span<const GemmProblem> problems);

namespace gemm_scheduler_internal {
// Sends half-type problems on row-major weights to BLIS (B widened in its
// packing) instead of panels packed per call: the path of CPUs without
// AVX-512, forced for tests and side-by-side measurement.
void ForceBlisHalf(bool force);
}  // namespace gemm_scheduler_internal

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_GEMM_SCHEDULER_H_
