#include "server/ops/kernels/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>

namespace gemmserve {
namespace {

constexpr char kCapVariable[] = "GEMMSERVE_MAX_CPU_ISA";

struct CapSetting {
  bool set = false;   // the variable is present
  bool known = true;  // and names a level
  CpuIsa isa = CpuIsa::kAvx512Bf16;
  std::string text;
};

const CapSetting& Cap() {
  static const CapSetting cap = [] {
    CapSetting c;
    const char* text = std::getenv(kCapVariable);
    if (text == nullptr) return c;
    c.set = true;
    c.text = text;
    c.known = ParseCpuIsa(c.text, &c.isa);
    if (!c.known) c.isa = CpuIsa::kAvx512Bf16;
    return c;
  }();
  return cap;
}

}  // namespace

CpuFeatures DetectCpuFeatures() {
  // Also safe before libgcc's own constructor has run (static initialisers).
  __builtin_cpu_init();
  CpuFeatures f;
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does
  // not know "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  f.f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512_vnni = __builtin_cpu_supports("avx512vnni");
  // AVX-VNNI from CPUID leaf 7 subleaf 1 (EAX bit 4), where the leaf has that
  // subleaf: clang 14's __builtin_cpu_supports does not know "avxvnni". Its
  // registers are AVX's, whose state the OS saves where AVX2 is reported.
  unsigned max_subleaf = 0;
  f.avx_vnni = f.avx2 && __get_cpuid_count(7, 0, &max_subleaf, &ebx, &ecx, &edx) &&
               max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) &&
               (eax & (1u << 4)) != 0;
  return f;
}

CpuFeatures CapCpuFeatures(CpuFeatures f, CpuIsa cap) {
  if (cap < CpuIsa::kAvx512Bf16) f.avx512_bf16 = false;
  if (cap < CpuIsa::kAvx512) {
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512_vnni = false;
  }
  if (cap < CpuIsa::kAvx2Vnni) f.avx_vnni = false;
  if (cap < CpuIsa::kAvx2) f.avx2 = f.fma = f.f16c = false;
  return f;
}

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kGeneric: return "generic";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx2Vnni: return "avx2_vnni";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Bf16: return "avx512_bf16";
  }
  return "generic";
}

bool ParseCpuIsa(const std::string& text, CpuIsa* isa) {
  for (CpuIsa level :
       {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx2Vnni, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16}) {
    if (text == CpuIsaName(level)) {
      *isa = level;
      return true;
    }
  }
  return false;
}

CpuIsa HighestCpuIsa(const CpuFeatures& f) {
  if (f.Avx512Build()) return f.avx512_bf16 ? CpuIsa::kAvx512Bf16 : CpuIsa::kAvx512;
  if (!f.Avx2Build()) return CpuIsa::kGeneric;
  return f.avx_vnni ? CpuIsa::kAvx2Vnni : CpuIsa::kAvx2;
}

const CpuFeatures& Cpu() {
  static const CpuFeatures features = CapCpuFeatures(DetectCpuFeatures(), Cap().isa);
  return features;
}

std::string CpuIsaCapError() {
  const CapSetting& cap = Cap();
  if (cap.known) return "";
  return std::string(kCapVariable) + "='" + cap.text.substr(0, 64) +
         "' is not one of avx512_bf16, avx512, avx2_vnni, avx2, generic";
}

std::string CpuIsaDescription() {
  const CpuIsa used = HighestCpuIsa(Cpu());
  const CapSetting& cap = Cap();
  if (!cap.set || !cap.known) return CpuIsaName(used);
  return std::string(CpuIsaName(used)) + " (" + kCapVariable + "=" + cap.text + "; the CPU has " +
         CpuIsaName(HighestCpuIsa(DetectCpuFeatures())) + ")";
}

}  // namespace gemmserve
