// KernelSet: every kernel family's entry points for this CPU, chosen once and
// in one place, KernelsFor, from the CPU's features under
// GEMMSERVE_MAX_CPU_ISA (Cpu()), as BLIS fills its context of kernels once
// per configuration. The families (streaming decode, quantized decode and
// dequantization, 8-bit-activation dot products, integer GEMM, the FP32
// panel tiles and the BF16/FP16 pair panels) call through it and never test
// a CPU feature themselves; so does the BLIS configuration the process asks
// for (`blis`). Each ISA build of a family is a translation unit of its own,
// `<family>_<isa>.cc`, compiled with that ISA's flags (server/CMakeLists.txt)
// and run only when the set names it; a family's portable build and its
// public entry points are `<family>.cc`.
//
// Adding a build: write its file, declare its entry points beside the
// family's other builds (the `*_internal` namespace of the family's header),
// pick it in KernelsFor, and give the file its flags in CMake
// (gemmserve_kernel_build).
//
// No Abseil here, for the reason cpu_features.h gives.
//
//   const KernelSet& k = Kernels();
//   k.stream_f32(DataType::kBF16, rows, 0, K, N, a, K, b, N, c, N);
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_KERNEL_SET_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_KERNEL_SET_H_

#include <cstdint>

#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/ops/kernels/cpu_features.h"
#include "server/ops/kernels/int8_dot.h"
#include "server/ops/kernels/panel_gemm.h"
#include "server/ops/kernels/quantized_gemm.h"
#include "server/tensor/datatype.h"

namespace gemmserve {

struct KernelSet {
  // The builds the features allow, for tests and benchmarks that run each:
  // AVX-512 (F, BW, VL, DQ, FMA), AVX2 (with FMA and F16C), and
  // AVX512-BF16's vdpbf16ps and vcvtne2ps2bf16. The kernels never branch on
  // these; they call through the entries below.
  bool avx512 = false;
  bool avx2 = false;
  bool avx512_bf16 = false;
  // Names of the builds chosen, for logs and tests.
  const char* streaming_isa = "generic";  // "avx512", "avx2", "generic"
  const char* int_isa = "generic";
  // "avx512_vnni", "avx_vnni" (the 256-bit VEX vpdpbusd), "avx2", "generic";
  // the two VNNI builds read the weights' packed copy (int8_packed).
  const char* int8_dot_isa = "generic";

  // Streaming decode (streaming_gemm.h): C[rows, n] += A[rows, k_begin:k_end]
  // B[k_begin:k_end, n], B of `b_type` widened in registers; and FP64.
  void (*stream_f32)(DataType b_type, int64_t rows, int64_t k_begin, int64_t k_end, int64_t n,
                     const float* a, int64_t lda, const void* b, int64_t ldb, float* c,
                     int64_t ldc) = nullptr;
  void (*stream_f64)(int64_t rows, int64_t k_begin, int64_t k_end, int64_t n, const double* a,
                     int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc) = nullptr;
  // FP16 or BF16 to FP32.
  void (*widen)(DataType type, const uint16_t* src, float* dst, int64_t n) = nullptr;
  // Quantized decode (quantized_gemm.h), and K rows of quantized weights
  // dequantized into BF16 pair panels.
  void (*quantized)(int64_t rows, int64_t k_begin, int64_t k_end, const float* a, int64_t lda,
                    const QuantizedMatrix& w, float* c, int64_t ldc) = nullptr;
  void (*dequantize_bf16_panels)(const QuantizedMatrix& w, int64_t k_begin, int64_t k_end,
                                 int64_t j0, int64_t width, uint16_t* out) = nullptr;
  // Integer dot products on 8-bit activations (int8_dot.h).
  void (*int8_dot)(int64_t rows, const int64_t* a_rows, const Int8Rows& a, int64_t k_begin,
                   int64_t k_end, const QuantizedMatrix& w, float* c, int64_t ldc) = nullptr;
  // Integer GEMM rows (int_gemm.h), on unsigned lanes.
  void (*int_rows32)(int64_t row_begin, int64_t row_end, int64_t n, int64_t k, const uint32_t* a,
                     int64_t lda, const uint32_t* b, int64_t ldb, uint32_t* c,
                     int64_t ldc) = nullptr;
  void (*int_rows64)(int64_t row_begin, int64_t row_end, int64_t n, int64_t k, const uint64_t* a,
                     int64_t lda, const uint64_t* b, int64_t ldb, uint64_t* c,
                     int64_t ldc) = nullptr;

  // Our tiles on packed panels, tables of 12 for 1 to 12 token rows (index
  // rows - 1); null where the CPU has no build of them. FP32 token panels
  // that are not full (panel_gemm.h; AVX-512; without them BLIS's kernel
  // computes every tile), and BF16 pair panels on FP32 FMA and on vdpbf16ps
  // and FP16 panels (bf16_panel_gemm.h; AVX-512, AVX512-BF16, AVX-512;
  // without the FMA tiles there are no BF16 or FP16 panels at all).
  const panel_gemm_internal::PartialTileFn* fp32_partial_tiles = nullptr;
  const bf16_panel_internal::PairTileFn* bf16_fma_tiles = nullptr;
  const bf16_panel_internal::PairTileFn* bf16_native_tiles = nullptr;
  const bf16_panel_internal::HalfTileFn* fp16_tiles = nullptr;
  // BF16 weights into pair panels (PackBf16Panels).
  void (*pack_bf16_panels)(const uint16_t* w, int64_t ldw, int64_t k, int64_t n,
                           uint16_t* out) = nullptr;
  // vdpbf16ps's flops per FP32 FMA flop, measured in registers
  // (Bf16NativeSpeedup); null without AVX512-BF16.
  double (*measure_bf16_native_speedup)() = nullptr;

  // What the BLIS configuration is chosen from (BlisArchitectureFor in
  // server/process/compute_environment.h): BLIS's AVX-512 kernels (skx) want
  // the AVX-512 build's set, its AVX2 ones (haswell, zen) AVX2 and FMA; and
  // whether the features are below the level the CPU reports (a
  // GEMMSERVE_MAX_CPU_ISA cap).
  struct Blis {
    bool avx512 = false;
    bool avx2_fma = false;
    bool capped = false;
  } blis;
};

// The set for `features`: every family's best build they allow. Tests use
// it to reach each build the CPU has; only `blis.capped` reads the CPU (the
// level it reports).
KernelSet KernelsFor(const CpuFeatures& features);

// The set for this process: KernelsFor(Cpu()), resolved once.
const KernelSet& Kernels();

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_KERNEL_SET_H_
