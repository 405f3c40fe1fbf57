// BF16 GEMM on weights packed once into pair-interleaved panels, computed
// natively where the CPU can: AVX512-BF16's vdpbf16ps multiplies pairs of
// BF16 values and adds both products to FP32 in one instruction, twice the
// rate of FP32 FMA. BLIS 0.9 has no BF16 micro-kernel, so this one is ours.
//
// Layout. Panels of kBf16PanelLanes (32) columns; K in pairs: element
// (2q + h, j) of a panel at panel[q * 64 + 2 * j + h], so one 64-byte load
// holds the pairs of 16 columns. K is padded to even with zeros. Token rows
// are packed per K block into panels of kBf16TokenRows (12) rows (or of all
// the rows, when fewer), each pair one 32-bit word: token panel [pairs][12].
//
// Exactness. vdpbf16ps treats subnormal inputs as zero and flushes subnormal
// results. Products of BF16 values are multiples of 2^(ex + ew - 268) (ex,
// ew the smallest biased exponents of the nonzero operands), and so is every
// FP32 sum of them, so when ex + ew >= 142 no subnormal ever arises and the
// native path is exact in the same sense as FP32 accumulation. Otherwise
// (tiny or subnormal values) the call runs the FMA path on the same panels:
// the pairs widened exactly to FP32, FP32 FMA, IEEE semantics.
//
//   std::vector<uint16_t> panels(Bf16PanelCount(n) * Bf16PanelStride(k));
//   PackBf16Panels(w, n, k, n, panels.data());
//   const int ew = Bf16MinExponent(w, k * n);
//   Bf16PanelGemm(m, k, n, x, k, rows, panels.data(), ew, 0, Bf16PanelCount(n), c, n, scratch);
#ifndef GEMMSERVE_SERVER_OPS_KERNELS_BF16_PANEL_GEMM_H_
#define GEMMSERVE_SERVER_OPS_KERNELS_BF16_PANEL_GEMM_H_

#include <cstdint>
#include <string>

namespace gemmserve {

inline constexpr int64_t kBf16PanelLanes = 32;
inline constexpr int64_t kBf16TokenRows = 12;
inline constexpr int64_t kBf16KBlock = 256;  // even

// True where the panels can be computed on at all (AVX-512 F, for BF16 and
// FP16; BF16's native path also needs AVX512-BF16).
bool Bf16PanelsSupported();

inline int64_t Bf16PanelCount(int64_t n) { return (n + kBf16PanelLanes - 1) / kBf16PanelLanes; }
// Elements (uint16) of one panel: ceil(k / 2) pairs of 64, whole cache lines.
inline int64_t Bf16PanelStride(int64_t k) { return (k + 1) / 2 * 2 * kBf16PanelLanes; }

void PackBf16Panels(const uint16_t* w, int64_t ldw, int64_t k, int64_t n, uint16_t* out);

// The smallest biased exponent of the nonzero values among `count` BF16
// values (0 for a subnormal), 255 if all are zero.
int Bf16MinExponent(const uint16_t* data, int64_t count);

// 32-bit words of token scratch Bf16PanelGemm needs for m rows.
int64_t Bf16PanelScratchWords(int64_t m, int64_t k);

// C[i, j - first column] (FP32, row stride ldc, overwritten) = sum over kk of
// X[row(i), kk] * W[kk, j] for the columns of panels [panel_begin, panel_end)
// (clamped to n), row(i) = a_rows[i] (null: i). `weights_min_exponent` is
// Bf16MinExponent of the weights the panels hold. `scratch` holds
// Bf16PanelScratchWords(m, k) words, 64-byte aligned, like the panels.
void Bf16PanelGemm(int64_t m, int64_t k, int64_t n, const uint16_t* x, int64_t ldx,
                   const int64_t* a_rows, const uint16_t* panels, int weights_min_exponent,
                   int64_t panel_begin, int64_t panel_end, float* c, int64_t ldc,
                   uint32_t* scratch);

// FP16 on panels of its own: kBf16PanelLanes (32) columns, [K][32] halves
// (element (kk, j) at panel[kk * 32 + j]), so each K step is one 64-byte
// load widened exactly to FP32 in registers (vcvtph2ps); token rows widened
// when packed; FP32 FMA, IEEE semantics (so no exponent guard). The same
// contract as Bf16PanelGemm; `scratch` holds Fp16PanelScratchWords(m, k)
// words.
inline int64_t Fp16PanelStride(int64_t k) { return k * kBf16PanelLanes; }
void PackFp16Panels(const uint16_t* w, int64_t ldw, int64_t k, int64_t n, uint16_t* out);
int64_t Fp16PanelScratchWords(int64_t m, int64_t k);
void Fp16PanelGemm(int64_t m, int64_t k, int64_t n, const uint16_t* x, int64_t ldx,
                   const int64_t* a_rows, const uint16_t* panels, int64_t panel_begin,
                   int64_t panel_end, float* c, int64_t ldc, uint32_t* scratch);

// Which path calls take: "avx512_bf16" (native where exact), "avx512f" (FMA
// only), or "none".
const char* Bf16PanelIsa();

// Whether BF16 weights are computed on pair panels at all. A CPU feature
// says vdpbf16ps exists, not how fast it runs: on a Zen 5 it did twice the
// flops of FP32 FMA, on one Xeon (AVX512-BF16, AVX512-FP16) half of them,
// and there the pair panels ran at 0.57-0.70x of BLIS on widened values for
// M >= 1024. So kAuto measures both rates once (a register-only loop, about
// a millisecond) and takes the panels where vdpbf16ps does at least
// kBf16NativeMinSpeedup times FMA's flops; elsewhere BF16 weights stay
// row-major and run BLIS's FP32 kernel on values widened in its packing.
enum class Bf16Panels { kAuto, kOn, kOff };
inline constexpr double kBf16NativeMinSpeedup = 1.25;
// Set before any model loads (gemmserve --bf16_panels); kAuto by default.
void SetBf16Panels(Bf16Panels mode);
// "auto", "on", "off" -> mode; false for anything else.
bool ParseBf16Panels(const char* text, Bf16Panels* mode);
bool Bf16PanelsPreferred();
// vdpbf16ps's flops per FP32 FMA flop, measured once (0 without
// AVX512-BF16), and what was chosen and why, for the server's start-up log.
double Bf16NativeSpeedup();
std::string Bf16PanelsChoice();

namespace bf16_panel_internal {
// Forces a path for tests: 0 as the CPU allows, 1 FMA only.
void ForceFmaPath(bool fma_only);
bool HaveNativeBf16();

// The tiles, in tables of kBf16TokenRows, for 1 to 12 token rows (index
// rows - 1): rows x cols of C (at most 12 x 32, row stride ldc) = or, when
// `accumulate`, += tokens * weights. A pair tile takes `pairs` pairs of K,
// tokens [pairs][tr] words (tr >= rows per pair), weights [pairs][64]; a half
// tile `kc` K steps of FP16 panels, tokens [kc][tr] floats widened when
// packed, weights [kc][32].
using PairTileFn = void (*)(int64_t pairs, const uint32_t* tokens, int64_t tr,
                            const uint16_t* weights, float* c, int64_t ldc, int64_t cols,
                            bool accumulate);
using HalfTileFn = void (*)(int64_t kc, const float* tokens, int64_t tr, const uint16_t* weights,
                            float* c, int64_t ldc, int64_t cols, bool accumulate);

// The AVX-512 build (bf16_panel_gemm_avx512.cc): BF16 pairs widened exactly
// and FP32 FMA (IEEE: subnormals kept), FP16 widened by vcvtph2ps, and the
// packing of BF16 weights by two-source permutes.
extern const PairTileFn kFmaTilesAvx512[kBf16TokenRows];
extern const HalfTileFn kHalfTilesAvx512[kBf16TokenRows];
void PackBf16PanelsAvx512(const uint16_t* w, int64_t ldw, int64_t k, int64_t n, uint16_t* out);
// The AVX512-BF16 build (bf16_panel_gemm_avx512bf16.cc): vdpbf16ps, and its
// flops per FP32 FMA flop measured in registers (Bf16NativeSpeedup).
extern const PairTileFn kNativeTilesAvx512Bf16[kBf16TokenRows];
double MeasureNativeSpeedupAvx512Bf16();
// The portable packing (CPUs without AVX-512).
void PackBf16PanelsGeneric(const uint16_t* w, int64_t ldw, int64_t k, int64_t n, uint16_t* out);
}  // namespace bf16_panel_internal

}  // namespace gemmserve

#endif  // GEMMSERVE_SERVER_OPS_KERNELS_BF16_PANEL_GEMM_H_
