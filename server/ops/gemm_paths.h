// The GEMM scheduler's execution paths (gemm_scheduler.h runs them): each
// path lays its problems out into work items and scratch, runs them, and
// states the scratch it may need for a shape of work (its *WorkBytes, summed
// by GemmWorkBytes before anything is allocated), in one file per path:
//   gemm_streaming.cc  decode: B streamed once, in (problem, K slice) items
//   gemm_packed.cc     prefill: one packing GEMM per problem or column tile
//   gemm_panels.cc     weights on packed panels (resident, or BF16 packed per
//                      call, or quantized dequantized per K block)
//   gemm_int8.cc       quantized weights on 8-bit activations (accuracy_level 4)
// and what they share in gemm_common.cc. Internal to server/ops.
#ifndef GEMMSERVE_SERVER_OPS_GEMM_PATHS_H_
#define GEMMSERVE_SERVER_OPS_GEMM_PATHS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "server/ops/gemm_scheduler.h"
#include "server/tensor/tensor.h"

namespace gemmserve {
namespace gemm_paths {

// Bookkeeping of one problem, over its whole life: the GemmProblem in the
// caller's list and in a batch's merged list (with vector slack), the pointer
// lists and work items or column tiles of the scheduler, their statuses, and
// up to a cache line of padding in each scratch region.
inline constexpr int64_t kProblemBookkeepingBytes = 1024;

// ---- Shared (gemm_common.cc).
// Accumulation happens in FP64 for FP64 and in FP32 for FP32, FP16 and BF16.
int64_t AccSize(DataType t);
inline int64_t ARow(const GemmProblem& p, int64_t i) { return p.a_rows ? p.a_rows[i] : i; }
inline int64_t CRow(const GemmProblem& p, int64_t i) { return p.c_rows ? p.c_rows[i] : i; }
// Rows of A, gathered and widened to the accumulation type: [m, k].
void GatherRows(const GemmProblem& p, void* dst);
// Result rows [m, n] in the accumulation type (rows `ld` apart; p.n when
// not given) to their rows of C, plus bias, rounded once.
void StoreRows(const GemmProblem& p, const void* acc, int64_t ld = -1);
// Row stride of a lane's result rows for a tile `cols` wide (a whole number
// of lines plus one, so a micro-kernel tile's rows do not share one L1 set).
int64_t PanelResultLd(int64_t cols);
// No gather, scatter or bias: the GEMM writes C itself.
bool IsDirect(const GemmProblem& p);
// Column tile `[j0, j0 + width)` of a problem: the same rows, a slice of B,
// C and bias.
GemmProblem ColumnTile(const GemmProblem& p, int64_t j0, int64_t width);
// Scratch of one thread for the gather/GEMM/scatter path.
struct Lane {
  AlignedBuffer rows, result;
  AlignedBuffer weights;  // weight panels packed per call (PacksWeightsPerCall)
};

// Whether a BF16 problem on row-major weights packs them into pair panels
// per call (the panel path), and whether a quantized BF16 problem is
// dequantized into them per K block (gemm_common.cc says why).
bool PacksWeightsPerCall(const GemmProblem& p);
bool QuantizedOnPanels(const GemmProblem& p);
// gemm_scheduler_internal::ForceBlisHalf.
void SetForceBlisHalf(bool force);

// ---- Streaming (gemm_streaming.cc).
// One (problem, K slice) of the streaming path, and where its partial sums go.
struct StreamingItem {
  int64_t problem, k_begin, k_end, partial;  // partial: byte offset
};

// Where each streaming problem's widened rows and each (problem, K slice)
// item's partial sums go in the two scratch buffers.
struct StreamingLayout {
  std::vector<StreamingItem> items;
  std::vector<int64_t> rows_at, slices, first_item;
  int64_t rows_bytes = 0, partial_bytes = 0;
};

StreamingLayout LayOutStreaming(const std::vector<const GemmProblem*>& problems, int threads);
absl::Status RunStreaming(const std::vector<const GemmProblem*>& problems, int threads);
// Scratch of `w`'s streaming problems, and of quantized ones (which stream
// in blocks of kQuantizedBlockRows rows), on `t` threads.
int64_t StreamingWorkBytes(const GemmWorkShape& w, int64_t t);
int64_t QuantizedStreamingWorkBytes(const GemmWorkShape& w, int64_t t);

// ---- Packed (gemm_packed.cc).
// The column tiles of the packed problems and the scratch of each lane.
struct PackedLayout {
  std::vector<GemmProblem> tiles;
  int lanes = 0;
  int64_t rows_bytes = 0, result_bytes = 0;  // of each lane, for gathered tiles
  int64_t half_block_bytes = 0;  // HalfGemmRowMajor's own, per call, for direct half tiles
};

PackedLayout LayOutPacked(const std::vector<const GemmProblem*>& problems, int threads);
absl::Status RunPacked(const std::vector<const GemmProblem*>& problems, int threads);
int64_t PackedWorkBytes(const GemmWorkShape& w, int64_t t);

// ---- Panels (gemm_panels.cc).
// A column tile of a problem whose B is packed: weight panels [begin, end).
struct PanelItem {
  const GemmProblem* problem;
  int64_t begin, end;
  int64_t cost;  // rows x columns, for the order of the work list
};

struct PanelLayout {
  std::vector<PanelItem> items;
  int lanes = 0;
  int64_t token_bytes = 0, result_bytes = 0;  // of each lane
  int64_t weight_bytes = 0;                   // of each lane: PacksWeightsPerCall's panels
};

PanelLayout LayOutPanels(const std::vector<const GemmProblem*>& problems, int threads);
absl::Status RunPanels(const std::vector<const GemmProblem*>& problems, int threads);
// Scratch of `w` on panels (resident, or BF16 packed per call), and of
// quantized problems dequantized into panels.
int64_t PanelWorkBytes(const GemmWorkShape& w, int64_t t);
int64_t QuantizedPanelWorkBytes(const GemmWorkShape& w, int64_t t);

// ---- 8-bit activations on quantized weights (gemm_int8.cc).
// Problems with int8_activations: A's rows quantized once per call, each
// problem's integers streamed once in (problem, K slice) items.
absl::Status RunInt8Dot(const std::vector<const GemmProblem*>& problems, int threads);
int64_t Int8DotWorkBytes(const GemmWorkShape& w, int64_t t);
// What RunInt8Dot allocates for exactly these problems (GemmScratchBytes).
int64_t Int8DotScratchBytes(const std::vector<const GemmProblem*>& problems, int threads);

}  // namespace gemm_paths
}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_GEMM_PATHS_H_
