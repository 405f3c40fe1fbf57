#include "server/ops/kernels/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "server/ops/kernels/bf16_panel_gemm.h"
#include "server/ops/kernels/int_gemm_internal.h"
#include "server/ops/kernels/kernel_set.h"
#include "server/ops/kernels/streaming_gemm.h"

namespace gemmserve {
namespace {

constexpr CpuIsa kLevels[] = {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx2Vnni, CpuIsa::kAvx512,
                              CpuIsa::kAvx512Bf16};

CpuFeatures All() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = f.avx_vnni = true;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512_bf16 = f.avx512_vnni = true;
  return f;
}

// Every feature of `a` is one of `b`'s.
bool Within(const CpuFeatures& a, const CpuFeatures& b) {
  return (!a.avx2 || b.avx2) && (!a.fma || b.fma) && (!a.f16c || b.f16c) &&
         (!a.avx512f || b.avx512f) && (!a.avx512bw || b.avx512bw) && (!a.avx512vl || b.avx512vl) &&
         (!a.avx512dq || b.avx512dq) && (!a.avx512_bf16 || b.avx512_bf16) &&
         (!a.avx512_vnni || b.avx512_vnni) && (!a.avx_vnni || b.avx_vnni);
}

TEST(CpuFeaturesTest, ACapClearsEverythingAboveItsLevel) {
  for (CpuIsa cap : kLevels) {
    const CpuFeatures f = CapCpuFeatures(All(), cap);
    SCOPED_TRACE(CpuIsaName(cap));
    EXPECT_EQ(HighestCpuIsa(f), cap);
    EXPECT_EQ(f.avx512_bf16, cap == CpuIsa::kAvx512Bf16);
    EXPECT_EQ(f.Avx512Build(), cap >= CpuIsa::kAvx512);
    EXPECT_EQ(f.avx512f || f.avx512bw || f.avx512vl || f.avx512dq, cap >= CpuIsa::kAvx512);
    EXPECT_EQ(f.Avx2Build(), cap >= CpuIsa::kAvx2);
    EXPECT_EQ(f.avx2 || f.fma || f.f16c, cap >= CpuIsa::kAvx2);
    EXPECT_EQ(f.avx512_vnni, cap >= CpuIsa::kAvx512);
    EXPECT_EQ(f.avx_vnni, cap >= CpuIsa::kAvx2Vnni);  // the level above AVX2 adds it
  }
}

TEST(CpuFeaturesTest, ACapNeverAddsAFeature) {
  CpuFeatures avx2_only;
  avx2_only.avx2 = avx2_only.fma = avx2_only.f16c = true;
  for (CpuIsa cap : kLevels) {
    SCOPED_TRACE(CpuIsaName(cap));
    EXPECT_EQ(HighestCpuIsa(CapCpuFeatures(CpuFeatures{}, cap)), CpuIsa::kGeneric);
    EXPECT_TRUE(Within(CapCpuFeatures(avx2_only, cap), avx2_only));
    EXPECT_LE(HighestCpuIsa(CapCpuFeatures(avx2_only, cap)), CpuIsa::kAvx2);
  }
}

TEST(CpuFeaturesTest, ABuildNeedsAllOfItsFeatures) {
  CpuFeatures f = All();
  f.f16c = false;  // AVX2 without F16C: the AVX2 build's half conversions are missing
  EXPECT_FALSE(f.Avx2Build());
  f = All();
  f.avx512dq = false;  // Knights Landing: AVX-512 F without DQ, BW, VL
  EXPECT_FALSE(f.Avx512Build());
  EXPECT_EQ(HighestCpuIsa(f), CpuIsa::kAvx2Vnni);
  f.avx_vnni = false;
  EXPECT_EQ(HighestCpuIsa(f), CpuIsa::kAvx2);
}

TEST(CpuFeaturesTest, LevelNamesRoundTripAndNothingElseParses) {
  for (CpuIsa level : kLevels) {
    CpuIsa parsed = CpuIsa::kGeneric;
    ASSERT_TRUE(ParseCpuIsa(CpuIsaName(level), &parsed)) << CpuIsaName(level);
    EXPECT_EQ(parsed, level);
  }
  for (const char* bad : {"", "AVX2", "avx512bf16", "sse4", "avx2 ", "native"}) {
    CpuIsa parsed = CpuIsa::kAvx2;
    EXPECT_FALSE(ParseCpuIsa(bad, &parsed)) << bad;
    EXPECT_EQ(parsed, CpuIsa::kAvx2) << bad;
  }
}

// What this process runs: the CPU's features, capped by the variable this
// test binary was started with (ctest runs ops_test again under each cap).
TEST(CpuFeaturesTest, EveryDispatcherFollowsTheFeaturesInUse) {
  const CpuFeatures& cpu = Cpu();
  EXPECT_TRUE(Within(cpu, DetectCpuFeatures()));
  if (const char* cap_text = std::getenv("GEMMSERVE_MAX_CPU_ISA")) {
    CpuIsa cap;
    ASSERT_TRUE(ParseCpuIsa(cap_text, &cap)) << cap_text;
    EXPECT_LE(HighestCpuIsa(cpu), cap);
    EXPECT_EQ(CpuIsaCapError(), "");
    EXPECT_NE(CpuIsaDescription().find(std::string("GEMMSERVE_MAX_CPU_ISA=") + cap_text),
              std::string::npos)
        << CpuIsaDescription();
  } else {
    EXPECT_EQ(CpuIsaDescription(), CpuIsaName(HighestCpuIsa(DetectCpuFeatures())));
  }
  const std::string streaming = StreamingGemmIsa(), integer = int_gemm_internal::IntGemmIsa(),
                    panels = Bf16PanelIsa();
  EXPECT_EQ(streaming, cpu.Avx512Build() ? "avx512" : cpu.Avx2Build() ? "avx2" : "generic");
  EXPECT_EQ(integer, cpu.Avx512Build() ? "avx512" : cpu.avx2 ? "avx2" : "generic");
  if (!cpu.Avx512Build()) {
    EXPECT_EQ(panels, "none");
    EXPECT_FALSE(Bf16PanelsSupported());
  } else if (!cpu.avx512_bf16) {
    EXPECT_EQ(panels, "avx512f");
  }
}

}  // namespace
}  // namespace gemmserve

namespace gemmserve {
namespace {

// The one place each family's build is chosen, for feature sets this CPU
// need not have (KernelsFor only picks; nothing runs).
TEST(KernelSetTest, EachFamilyTakesTheBestBuildItsFeaturesAllow) {
  CpuFeatures none;
  KernelSet k = KernelsFor(none);
  EXPECT_STREQ(k.streaming_isa, "generic");
  EXPECT_STREQ(k.int_isa, "generic");
  EXPECT_EQ(k.stream_f32, KernelsFor(none).stream_f32);
  EXPECT_FALSE(k.avx512 || k.avx2 || k.avx512_bf16);
  CpuFeatures avx2_only;
  avx2_only.avx2 = true;  // no FMA or F16C: the streaming AVX2 build cannot run, integer can
  k = KernelsFor(avx2_only);
  EXPECT_STREQ(k.streaming_isa, "generic");
  EXPECT_STREQ(k.int_isa, "avx2");
  CpuFeatures avx2 = avx2_only;
  avx2.fma = avx2.f16c = true;
  k = KernelsFor(avx2);
  EXPECT_STREQ(k.streaming_isa, "avx2");
  EXPECT_NE(k.stream_f32, KernelsFor(none).stream_f32);
  EXPECT_EQ(k.dequantize_bf16_panels, KernelsFor(none).dequantize_bf16_panels);
  CpuFeatures avx512 = avx2;
  avx512.avx512f = avx512.avx512bw = avx512.avx512vl = avx512.avx512dq = true;
  k = KernelsFor(avx512);
  EXPECT_STREQ(k.streaming_isa, "avx512");
  EXPECT_STREQ(k.int_isa, "avx512");
  EXPECT_FALSE(k.avx512_bf16);
  EXPECT_NE(k.dequantize_bf16_panels, KernelsFor(none).dequantize_bf16_panels);
  avx512.avx512_bf16 = true;
  EXPECT_TRUE(KernelsFor(avx512).avx512_bf16);
  CpuFeatures bf16_without_avx512 = avx2;
  bf16_without_avx512.avx512_bf16 = true;  // not usable without the AVX-512 build
  EXPECT_FALSE(KernelsFor(bf16_without_avx512).avx512_bf16);
}

// The kernel of 8-bit activations: AVX512-VNNI, else AVX-VNNI (never picked
// by vendor: by the features alone), else AVX2, else portable.
TEST(KernelSetTest, TheInt8DotBuildIsTheBestVnniTheFeaturesAllow) {
  CpuFeatures f;
  f.avx_vnni = true;  // without the AVX2 build's set: not usable
  EXPECT_STREQ(KernelsFor(f).int8_dot_isa, "generic");
  EXPECT_EQ(KernelsFor(f).int8_dot, int8_dot_internal::Int8DotGeneric);
  f.avx2 = f.fma = f.f16c = true;
  f.avx_vnni = false;
  EXPECT_STREQ(KernelsFor(f).int8_dot_isa, "avx2");
  EXPECT_EQ(KernelsFor(f).int8_dot, int8_dot_internal::Int8DotAvx2);
  f.avx_vnni = true;
  EXPECT_STREQ(KernelsFor(f).int8_dot_isa, "avx_vnni");
  EXPECT_EQ(KernelsFor(f).int8_dot, int8_dot_internal::Int8DotAvxVnni);
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;  // AVX-512 without its VNNI
  EXPECT_STREQ(KernelsFor(f).int8_dot_isa, "avx_vnni");
  f.avx512_vnni = true;
  EXPECT_STREQ(KernelsFor(f).int8_dot_isa, "avx512_vnni");
  EXPECT_EQ(KernelsFor(f).int8_dot, int8_dot_internal::Int8DotAvx512Vnni);
  f.avx_vnni = false;
  EXPECT_STREQ(KernelsFor(f).int8_dot_isa, "avx512_vnni");
  // On a CPU with both, each build has a cap that selects it.
  f.avx_vnni = true;
  EXPECT_STREQ(KernelsFor(CapCpuFeatures(f, CpuIsa::kAvx512)).int8_dot_isa, "avx512_vnni");
  EXPECT_STREQ(KernelsFor(CapCpuFeatures(f, CpuIsa::kAvx2Vnni)).int8_dot_isa, "avx_vnni");
  EXPECT_STREQ(KernelsFor(CapCpuFeatures(f, CpuIsa::kAvx2)).int8_dot_isa, "avx2");
  EXPECT_STREQ(KernelsFor(CapCpuFeatures(f, CpuIsa::kGeneric)).int8_dot_isa, "generic");
}

// The process's set is the one for its (capped) features.
TEST(KernelSetTest, TheProcessSetIsTheCpusSet) {
  const KernelSet expected = KernelsFor(Cpu());
  EXPECT_STREQ(Kernels().streaming_isa, expected.streaming_isa);
  EXPECT_STREQ(Kernels().int_isa, expected.int_isa);
  EXPECT_STREQ(Kernels().int8_dot_isa, expected.int8_dot_isa);
  EXPECT_EQ(Kernels().int8_dot, expected.int8_dot);
  EXPECT_EQ(Kernels().stream_f32, expected.stream_f32);
  EXPECT_EQ(Kernels().quantized, expected.quantized);
  EXPECT_EQ(Kernels().avx512_bf16, expected.avx512_bf16);
  EXPECT_STREQ(StreamingGemmIsa(), expected.streaming_isa);
}

}  // namespace
}  // namespace gemmserve
