#include "server/ops/kernels/kernel_set.h"

#include "server/ops/kernels/int_gemm_internal.h"
#include "server/ops/kernels/streaming_gemm.h"

namespace gemmserve {
namespace {

// Streaming and quantized decode, which share their loops (one build per
// ISA of each); the BF16-panel dequantization rounds with vcvtne2ps2bf16
// where AVX512-BF16 allows.
void PickDecode(KernelSet& k) {
  using namespace streaming_internal;
  if (k.avx512) {
    k.streaming_isa = "avx512";
    k.stream_f32 = AccumulateAvx512;
    k.stream_f64 = AccumulateAvx512;
    k.widen = WidenAvx512;
    k.quantized = QuantizedAvx512;
    k.dequantize_bf16_panels =
        k.avx512_bf16 ? DequantizeBf16PanelsAvx512Bf16 : DequantizeBf16PanelsAvx512;
  } else if (k.avx2) {
    k.streaming_isa = "avx2";
    k.stream_f32 = AccumulateAvx2;
    k.stream_f64 = AccumulateAvx2;
    k.widen = WidenAvx2;
    k.quantized = QuantizedAvx2;
    k.dequantize_bf16_panels = DequantizeBf16PanelsGeneric;
  } else {
    k.stream_f32 = AccumulateGeneric;
    k.stream_f64 = AccumulateGeneric;
    k.widen = WidenGeneric;
    k.quantized = QuantizedGeneric;
    k.dequantize_bf16_panels = DequantizeBf16PanelsGeneric;
  }
}

// vpdpbusd needs AVX512-VNNI beside the AVX-512 build's set, or AVX-VNNI
// (its VEX form on 256 bits) beside the AVX2 build's.
void PickInt8Dot(const CpuFeatures& f, KernelSet& k) {
  using namespace int8_dot_internal;
  if (k.avx512 && f.avx512_vnni) {
    k.int8_dot_isa = "avx512_vnni";
    k.int8_dot = Int8DotAvx512Vnni;
  } else if (k.avx2 && f.avx_vnni) {
    k.int8_dot_isa = "avx_vnni";
    k.int8_dot = Int8DotAvxVnni;
  } else if (k.avx2) {
    k.int8_dot_isa = "avx2";
    k.int8_dot = Int8DotAvx2;
  } else {
    k.int8_dot = Int8DotGeneric;
  }
}

// The integer kernels need AVX2 alone (no FMA or F16C); vpmullq, the 64-bit
// lane multiply, needs AVX512DQ (in the AVX-512 build's set).
void PickIntGemm(const CpuFeatures& f, KernelSet& k) {
  using namespace int_gemm_internal;
  if (k.avx512) {
    k.int_isa = "avx512";
    k.int_rows32 = IntGemmRows32_avx512;
    k.int_rows64 = IntGemmRows64_avx512;
  } else if (f.avx2) {
    k.int_isa = "avx2";
    k.int_rows32 = IntGemmRows32_avx2;
    k.int_rows64 = IntGemmRows64_avx2;
  } else {
    k.int_rows32 = IntGemmRows32_generic;
    k.int_rows64 = IntGemmRows64_generic;
  }
}

// Our panel tiles exist for AVX-512 (vdpbf16ps's for AVX512-BF16); without
// them FP32 runs on BLIS's kernel alone and BF16/FP16 weights stay row-major.
void PickPanels(KernelSet& k) {
  using namespace bf16_panel_internal;
  k.pack_bf16_panels = PackBf16PanelsGeneric;
  if (!k.avx512) return;
  k.fp32_partial_tiles = panel_gemm_internal::kPartialTilesAvx512;
  k.bf16_fma_tiles = kFmaTilesAvx512;
  k.fp16_tiles = kHalfTilesAvx512;
  k.pack_bf16_panels = PackBf16PanelsAvx512;
  if (!k.avx512_bf16) return;
  k.bf16_native_tiles = kNativeTilesAvx512Bf16;
  k.measure_bf16_native_speedup = MeasureNativeSpeedupAvx512Bf16;
}

}  // namespace

KernelSet KernelsFor(const CpuFeatures& f) {
  KernelSet k;
  k.avx512 = f.Avx512Build();
  k.avx2 = f.Avx2Build();
  k.avx512_bf16 = k.avx512 && f.avx512_bf16;
  PickDecode(k);
  PickInt8Dot(f, k);
  PickIntGemm(f, k);
  PickPanels(k);
  k.blis.avx512 = k.avx512;
  k.blis.avx2_fma = f.avx2 && f.fma;
  k.blis.capped = HighestCpuIsa(f) < HighestCpuIsa(DetectCpuFeatures());
  return k;
}

const KernelSet& Kernels() {
  static const KernelSet kernels = KernelsFor(Cpu());
  return kernels;
}

}  // namespace gemmserve
