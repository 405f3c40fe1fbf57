// oneDNN (Debian's libdnnl, 2.x) as a measured baseline for resident
// GroupedMatMul in gemmserve-bench: what a resident model built on oneDNN's
// matmul primitive would run. Built only where CMake found oneDNN
// (GEMMSERVE_HAVE_ONEDNN).
//
//   Create   (load time) reorders every group's [K, N] weights into the layout
//            oneDNN's matmul picks for them (format_tag::any, then a reorder).
//   Prepare  (setup) creates the matmul primitives for the row counts a
//            routing gives and the gather / result buffers of its longest
//            group.
//   Run      (timed) groups the (token, slot) pairs by group, and for each
//            group used, one after the other: gathers its token rows into the
//            contiguous buffer, runs the group's matmul (src FP32 or BF16,
//            weights the same, dst FP32, FP32 accumulation) on oneDNN's own
//            OpenMP threads, and scatters the rows into the output (BF16
//            rounded to nearest even). A row count Prepare did not see gets its
//            primitive created there, so any routing is computed.
//
//   GEMMSERVE_ASSIGN_OR_RETURN(OneDnnGroupedMatMul dnnl, OneDnnGroupedMatMul::Create(w, 2));
//   GEMMSERVE_RETURN_IF_ERROR(dnnl.Prepare(plan, idx));
//   GEMMSERVE_RETURN_IF_ERROR(dnnl.Run(plan, x, idx, &out));
#ifndef GEMMSERVE_SERVER_BENCH_ONEDNN_BASELINE_H_
#define GEMMSERVE_SERVER_BENCH_ONEDNN_BASELINE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/ops/grouped_matmul.h"
#include "server/tensor/datatype.h"
#include "server/tensor/tensor.h"

namespace gemmserve {

class OneDnnGroupedMatMul {
 public:
  // FP32 and BF16.
  static bool Supports(DataType type);

  // `weights` [G, K, N] of a supported type; the reordered copy does not refer
  // to it afterwards. Every primitive runs on `threads` OpenMP threads (the
  // caller's own OpenMP setting is restored after each call). INVALID_ARGUMENT
  // for another type or rank, RESOURCE_EXHAUSTED if the copy cannot be had,
  // INTERNAL for an error of oneDNN.
  static absl::StatusOr<OneDnnGroupedMatMul> Create(const Tensor& weights, int threads);

  OneDnnGroupedMatMul(OneDnnGroupedMatMul&&) noexcept;
  OneDnnGroupedMatMul& operator=(OneDnnGroupedMatMul&&) noexcept;
  ~OneDnnGroupedMatMul();

  // Untimed set-up for `indices` (validated, [M, S] of a plan with these
  // weights): primitives for its row counts, buffers for its longest group.
  absl::Status Prepare(const GroupedMatMulPlan& plan, const Tensor& indices);

  // output = GroupedMatMul(input, weights, indices), no bias; the plan of
  // PlanGroupedMatMul for these weights, indices that ValidateGroupIndices
  // accepted, input and output of the weights' type.
  absl::Status Run(const GroupedMatMulPlan& plan, const Tensor& input, const Tensor& indices,
                   Tensor* output);

  // Group g's reordered weights, which Run reads: what a cold-weights case
  // evicts from the caches.
  const void* group_weights(int64_t g) const;
  int64_t group_bytes() const;

  // oneDNN's implementation of the matmul for `rows` rows, e.g.
  // "brg:avx512_core_bf16" (creates the primitive if needed).
  absl::StatusOr<std::string> ImplementationName(int64_t rows);

 private:
  struct State;
  explicit OneDnnGroupedMatMul(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_BENCH_ONEDNN_BASELINE_H_
