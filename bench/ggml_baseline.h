// llama.cpp's ggml as a measured baseline for resident GroupedMatMul in
// gemmserve-bench (issue 42): ggml_mul_mat_id, the operator llama.cpp runs a
// mixture-of-experts layer's experts with, on the prebuilt CPU libraries of
// npm's @node-llama-cpp/linux-x64 3.22.1 (llama.cpp release v0.5.0, ggml
// 0.25.1; bench/ggml/install.sh installs them). They are loaded at run time
// with dlopen from the directory given (--ggml_dir or GEMMSERVE_GGML_DIR):
// nothing links against them, and without them the ggml cases are not
// registered. ggml_backend_load_all_from_path picks the CPU variant
// (libggml-cpu-<arch>.so) that suits the CPU; Loaded() names it.
//
//   Create   (load time) transposes each expert's [K, N] weights into ggml's
//            [N rows of K] and converts them with ggml's own
//            ggml_quantize_chunk to F32, BF16, Q8_0 or Q4_0; Q4_0 goes into
//            the CPU backend's repack buffer where it offers one (AVX2 and
//            N % 8 == 0: llama.cpp's default, Q4_0 repacked to 8x8 blocks).
//   Prepare  (setup) builds the graph out = mul_mat_id(experts, x, ids) for
//            the case's M and routing, in a buffer of its own.
//   Run      (timed) sets x (F32: ggml's activations are F32; BF16 input is
//            widened) and the routing, computes the graph on the backend's
//            threads, and reads the [M, S, N] result (F32, rounded to BF16
//            for a BF16 case).
//
//   GEMMSERVE_ASSIGN_OR_RETURN(const GgmlLibrary* lib, GgmlLibrary::Load(dir));
//   GEMMSERVE_ASSIGN_OR_RETURN(GgmlGroupedMatMul g,
//                              GgmlGroupedMatMul::Create(*lib, w, GgmlWeights::kQ4_0, 2));
//   GEMMSERVE_RETURN_IF_ERROR(g.Prepare(plan, idx));
//   GEMMSERVE_RETURN_IF_ERROR(g.Run(x, &out));
#ifndef GEMMSERVE_BENCH_GGML_BASELINE_H_
#define GEMMSERVE_BENCH_GGML_BASELINE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/ops/grouped_matmul.h"
#include "server/tensor/tensor.h"

namespace gemmserve {

struct GgmlApi;  // the functions resolved with dlsym (ggml_baseline.cc)

// The libraries, loaded once per process.
class GgmlLibrary {
 public:
  // Loads libggml-base.so and libggml.v0.5.0.so from `dir` (the package's
  // bins/linux-x64) and the best CPU backend there. NOT_FOUND when `dir` has
  // no such library, FAILED_PRECONDITION when a library does not load or has
  // no CPU device. The first successful load is kept (later `dir`s ignored).
  static absl::StatusOr<const GgmlLibrary*> Load(const std::string& dir);

  const GgmlApi& api() const { return *api_; }
  // ggml_version() and ggml_commit(), and the CPU variant's file name
  // (libggml-cpu-sapphirerapids.so, say) from the process's mappings.
  const std::string& version() const { return version_; }
  const std::string& cpu_variant() const { return cpu_variant_; }
  // The CPU backend offers its repack buffer ("CPU_REPACK").
  bool has_repack() const;

 private:
  std::unique_ptr<GgmlApi> api_;
  std::string version_, cpu_variant_;
};

enum class GgmlWeights { kF32, kBF16, kQ8_0, kQ4_0 };
const char* GgmlWeightsName(GgmlWeights w);  // "f32", "bf16", "q8_0", "q4_0"

class GgmlGroupedMatMul {
 public:
  // `weights` [G, K, N], FP32 or BF16 values, converted to `type` (K a
  // multiple of 32 for Q8_0 and Q4_0, ggml's block). Runs on `threads`
  // threads. INVALID_ARGUMENT for another value type, rank or K,
  // RESOURCE_EXHAUSTED when ggml cannot allocate, INTERNAL otherwise.
  static absl::StatusOr<GgmlGroupedMatMul> Create(const GgmlLibrary& lib, const Tensor& weights,
                                                  GgmlWeights type, int threads);

  GgmlGroupedMatMul(GgmlGroupedMatMul&&) noexcept;
  GgmlGroupedMatMul& operator=(GgmlGroupedMatMul&&) noexcept;
  ~GgmlGroupedMatMul();

  // Untimed: the graph for `indices` ([M, S], validated, of a plan with these
  // weights) and its buffers.
  absl::Status Prepare(const GroupedMatMulPlan& plan, const Tensor& indices);

  // output = GroupedMatMul(input, weights as ggml holds them, indices) for the
  // routing Prepare saw; input and output of the weights' value type.
  absl::Status Run(const Tensor& input, Tensor* output);

  // What Run reads of group g (for the cold-weights eviction) and its bytes.
  const void* group_weights(int64_t group) const;
  int64_t group_bytes() const;
  // True when the weights went into the CPU backend's repack buffer.
  bool repacked() const;

  // The weights of group g as ggml holds them, back in FP32 [K, N] (ggml's
  // own dequantization of the same conversion): the row check's reference.
  absl::StatusOr<Tensor> GroupAsFloat(const Tensor& weights, int64_t group) const;

 private:
  struct State;
  explicit GgmlGroupedMatMul(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace gemmserve

#endif  // GEMMSERVE_BENCH_GGML_BASELINE_H_
