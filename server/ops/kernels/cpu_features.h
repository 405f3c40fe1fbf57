// The CPU features that gemmserve's kernels dispatch on, read once, in one
// place, and capped by GEMMSERVE_MAX_CPU_ISA (after oneDNN's
// ONEDNN_MAX_CPU_ISA). Every kernel family and the BLIS configuration the
// server asks for are chosen from Cpu(), in one place (KernelsFor,
// kernel_set.h), so one variable runs the whole server on a lower
// instruction set: how the integration suite drives the AVX2 and portable
// paths through the real API on a CPU that has AVX-512.
//
//   GEMMSERVE_MAX_CPU_ISA   the kernels use at most
//   avx512_bf16 (or unset)  everything the CPU has
//   avx512                  AVX-512 F/BW/VL/DQ and AVX512-VNNI (and AVX-VNNI), not
//                           AVX512-BF16
//   avx2_vnni               AVX2, FMA, F16C and AVX-VNNI; no AVX-512
//   avx2                    AVX2, FMA, F16C; no VNNI of either kind
//   generic                 portable C++ (and BLIS's reference kernels)
// (after oneDNN's avx2 and avx2_vnni: each 8-bit dot-product build,
// int8_dot.h, has a level that selects it on a CPU with more.)
//
// A cap never adds a feature the CPU lacks. The variable is read when the
// kernel set is first asked for (at static initialisation); the server refuses to
// start on a value it does not know (CpuIsaCapError).
//
// No Abseil here: the AVX-512 and AVX2 translation units may include this
// header, and an inline function they compile must not be the copy the
// linker keeps for the rest of the program.
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_CPU_FEATURES_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_CPU_FEATURES_H_

#include <string>

namespace gemmserve {

enum class CpuIsa { kGeneric = 0, kAvx2 = 1, kAvx2Vnni = 2, kAvx512 = 3, kAvx512Bf16 = 4 };

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_bf16 = false;
  bool avx512_vnni = false;  // vpdpbusd: 8-bit integer dot products (int8_dot.h)
  bool avx_vnni = false;     // its VEX form on 256 bits (AVX-VNNI; no AVX-512 needed)

  // What the AVX2 builds need: AVX2, FMA, F16C.
  bool Avx2Build() const { return avx2 && fma && f16c; }
  // What the AVX-512 builds need: F, BW, VL, DQ and FMA.
  bool Avx512Build() const { return avx512f && avx512bw && avx512vl && avx512dq && fma; }
};

// The features the CPU reports, uncapped.
CpuFeatures DetectCpuFeatures();

// `features` less everything above `cap`.
CpuFeatures CapCpuFeatures(CpuFeatures features, CpuIsa cap);

// "avx512_bf16", "avx512", "avx2_vnni", "avx2", "generic".
const char* CpuIsaName(CpuIsa isa);
bool ParseCpuIsa(const std::string& text, CpuIsa* isa);

// The highest level `features` reach.
CpuIsa HighestCpuIsa(const CpuFeatures& features);

// The detected features capped by GEMMSERVE_MAX_CPU_ISA (an unknown value
// caps nothing here; CpuIsaCapError reports it).
const CpuFeatures& Cpu();

// Empty, or what is wrong with the variable's value.
std::string CpuIsaCapError();

// "avx512_bf16" or, under a cap, "avx2 (GEMMSERVE_MAX_CPU_ISA=avx2; the CPU
// has avx512_bf16)": for the server's start-up line.
std::string CpuIsaDescription();

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_CPU_FEATURES_H_
