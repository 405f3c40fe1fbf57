// gemmserve-isa-bench: the quantized decode kernel's three builds (portable,
// AVX2, AVX-512) side by side on one core, so that the AVX2 build a CPU
// without AVX-512 gets is judged against the others in one run. The shape is
// an olmoe expert (K 2048, N 1024, INT8 or INT4 blocked by 32 along K,
// FP32 scales, FP32 or BF16 values) at M = 1; the calls cycle through 64
// experts (128 MiB of INT8), more than the caches hold, so every call reads
// its expert from memory as decode does. Builds the CPU lacks are not
// registered. Before timing, each build's result is compared with the
// portable build's; a difference fails the case and the process exits 1.
//
//   build/bin/gemmserve-isa-bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "server/ops/kernels/kernel_set.h"
#include "server//ops/kernels/quantized_gemm.h"
#include "server/ops/kernels/streaming_gemm.h"

namespace gemmserve {
namespace {

constexpr int64_t kExperts = 64, kK = 2048, kN = 1024, kBlock = 32;

enum class Build { kGeneric, kAvx2, kAvx512 };

bool Available(Build b) {
  switch (b) {
    case Build::kAvx512: return Kernels().avx512;
    case Build::kAvx2: return Kernels().avx2;
    case Build::kGeneric: return true;
  }
  return false;
}

void Run(Build b, const float* a, const QuantizedMatrix& w, float* c) {
  switch (b) {
    case Build::kAvx512: return streaming_internal::QuantizedAvx512(1, 0, kK, a, kK, w, c, kN);
    case Build::kAvx2: return streaming_internal::QuantizedAvx2(1, 0, kK, a, kK, w, c, kN);
    case Build::kGeneric: return streaming_internal::QuantizedGeneric(1, 0, kK, a, kK, w, c, kN);
  }
}

struct Experts {
  std::vector<uint8_t> data;
  std::vector<float> scale, a;
  int64_t expert_bytes = 0, scales_per_expert = 0;

  QuantizedMatrix Expert(QuantizedType type, DataType value, int64_t g) const {
    QuantizedMatrix w{type,    data.data() + g * expert_bytes,
                      0,       kK,
                      kN,      scale.data() + g * scales_per_expert,
                      nullptr, kBlock,
                      kN,      1,
                      value};
    w.scales_factorable = ScalesFactorable(w.scale, scales_per_expert);
    return w;
  }
};

Experts MakeExperts(QuantizedType type) {
  Experts e;
  e.expert_bytes = QuantizedBytes(type, kK * kN);
  e.scales_per_expert = (kK / kBlock) * kN;
  e.data.resize(kExperts * e.expert_bytes);
  e.scale.resize(kExperts * e.scales_per_expert);
  e.a.resize(kK);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (uint8_t& v : e.data) v = static_cast<uint8_t>(rng());
  for (float& v : e.scale) v = std::ldexp(dist(rng), -6);
  for (float& v : e.a) v = dist(rng);
  return e;
}

std::atomic<bool> g_failed{false};

void Decode(benchmark::State& state, QuantizedType type, DataType value, Build build) {
  const Experts e = MakeExperts(type);
  std::vector<float> c(kN), want(kN);
  // The build against the portable one on expert 0 (same rounding of each
  // weight; the sums' order differs).
  const QuantizedMatrix w0 = e.Expert(type, value, 0);
  Run(Build::kGeneric, e.a.data(), w0, want.data());
  Run(build, e.a.data(), w0, c.data());
  for (int64_t j = 0; j < kN; ++j) {
    if (!(std::fabs(c[j] - want[j]) <= 1e-4 * (1.0 + std::fabs(want[j])))) {
      const std::string why = "column " + std::to_string(j) + ": " + std::to_string(c[j]) +
                              ", the portable build " + std::to_string(want[j]);
      std::fprintf(stderr, "QuantizedDecode: %s\n", why.c_str());
      g_failed = true;
      state.SkipWithError(why.c_str());
      return;
    }
  }
  int64_t g = 0;
  for (auto _ : state) {
    std::fill(c.begin(), c.end(), 0.0f);
    Run(build, e.a.data(), e.Expert(type, value, g), c.data());
    benchmark::DoNotOptimize(c.data());
    g = (g + 1) % kExperts;
  }
  // The bytes one call reads: its expert's integers and scales.
  state.SetBytesProcessed(state.iterations() *
                          (e.expert_bytes + e.scales_per_expert * int64_t{sizeof(float)}));
}

void Register() {
  for (auto [type, tname] :
       {std::pair{QuantizedType::kInt8, "int8"}, std::pair{QuantizedType::kInt4, "int4"}}) {
    for (auto [value, vname] :
         {std::pair{DataType::kFP32, "fp32"}, std::pair{DataType::kBF16, "bf16"}}) {
      for (auto [build, bname] :
           {std::pair{Build::kGeneric, "generic"}, std::pair{Build::kAvx2, "avx2"},
            std::pair{Build::kAvx512, "avx512"}}) {
        if (!Available(build)) continue;
        const std::string name =
            std::string("QuantizedDecode/") + tname + "/" + vname + "/" + bname;
        benchmark::RegisterBenchmark(name.c_str(), [type = type, value = value,
                                                    build = build](benchmark::State& s) {
          Decode(s, type, value, build);
        })->Unit(benchmark::kMillisecond);
      }
    }
  }
}

}  // namespace
}  // namespace gemmserve

int main(int argc, char** argv) {
  gemmserve::Register();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return gemmserve::g_failed ? 1 : 0;
}
