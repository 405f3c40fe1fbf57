#include "server/ops/kernels/kernel_set.h"

#include "server/ops/kernels/int_gemm_internal.h"
#include "server/ops/kernels/streaming_gemm.h"

namespace gemmserve {

KernelSet KernelsFor(const CpuFeatures& f) {
  using namespace streaming_internal;
  using namespace int_gemm_internal;
  KernelSet k;
  k.avx512 = f.Avx512Build();
  k.avx2 = f.Avx2Build();
  k.avx512_bf16 = k.avx512 && f.avx512_bf16;
  if (k.avx512) {
    k.streaming_isa = "avx512";
    k.stream_f32 = AccumulateAvx512;
    k.stream_f64 = AccumulateAvx512;
    k.widen = WidenAvx512;
    k.quantized = QuantizedAvx512;
    k.dequantize_bf16_panels = DequantizeBf16PanelsAvx512;
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
  // vpdpbusd needs AVX512-VNNI beside the AVX-512 build's set, or AVX-VNNI
  // (its VEX form on 256 bits) beside the AVX2 build's.
  if (k.avx512 && f.avx512_vnni) {
    k.int8_dot_isa = "avx512_vnni";
    k.int8_dot = int8_dot_internal::Int8DotAvx512Vnni;
  } else if (k.avx2 && f.avx_vnni) {
    k.int8_dot_isa = "avx_vnni";
    k.int8_dot = int8_dot_internal::Int8DotAvxVnni;
  } else if (k.avx2) {
    k.int8_dot_isa = "avx2";
    k.int8_dot = int8_dot_internal::Int8DotAvx2;
  } else {
    k.int8_dot = int8_dot_internal::Int8DotGeneric;
  }
  // The integer kernels need AVX2 alone (no FMA or F16C); vpmullq, the
  // 64-bit lane multiply, needs AVX512DQ (in the AVX-512 build's set).
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
  return k;
}

const KernelSet& Kernels() {
  static const KernelSet kernels = KernelsFor(Cpu());
  return kernels;
}

}  // namespace gemmserve
