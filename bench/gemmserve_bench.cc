// gemmserve-bench: the operators of server/ops beside their limits and
// baselines, over the shapes of shared/BENCHMARKS.md.
//
//   GroupedMatMul/<impl>/<dtype>/<shape>/<M>   impl: fused (RunGroupedMatMul),
//                                              resident, resident_int8 and
//                                              resident_int4 (weights kept
//                                              quantized), resident_int8_a8 and
//                                              resident_int4_a8 (accuracy_level 4), per_group_loop,
//                                              onnx_decomposition, and onednn
//                                              (FP32, BF16) where built with
//                                              oneDNN (onednn_baseline.h); ggml
//                                              (FP32, BF16), ggml_q8_0 and
//                                              ggml_q4_0 (FP32 values), M <= 256,
//                                              where --ggml_dir has llama.cpp's
//                                              libraries (ggml_baseline.h)
//   GroupedMatMul/<impl>/fp32/<shape>-skewed/<M>  half the tokens share expert 0
//   MatMul/<impl>/<dtype>/<n>                  impl: fused (RunMatMul), naive
//   MatMul/fused/fp32/{folded,batched}-<B>x<M>x<K>x<N>
//   Limit/sgemm/2048, Limit/dgemm/2048         one BLIS GEMM on the same threads
//   Limit/read_bandwidth                       streaming sum over 1 GiB
//   MoeLayer/{fused,composed}/<dtype>/<shape>/<M>  whole layers (moe_layer_bench.h)
//
// Counters: GFLOPS (per second), and for GroupedMatMul bytes_touched (the
// distinct experts' weights one call reads) with GBps_effective (those bytes
// per second); GBps for the read bandwidth. Rates are per wall-clock second.
//
// Every kernel call, the limits' included, gets --threads (default: the
// physical cores this process may run on). Inputs are made once per case and
// kept between Google Benchmark's calls of it; before a case is timed the
// first time, its output is poisoned, computed once untimed and sampled rows
// are checked against a double-precision reference (row_check.h), so a wrong
// kernel shows up as an error, not as a time.
//
// Decode-size GroupedMatMul cases (M <= kColdWeightsMaxTokens) start every
// timed call with the weights of the experts they use evicted from the caches
// (untimed; the copy the implementation reads: resident's panels, oneDNN's
// reordered weights): in serving, the other layers' weights evict an MoE layer's
// experts between two tokens, and the read-bandwidth floor they are compared
// with is measured from memory too. Everything else runs warm. Each case runs
// for --benchmark_min_time (default here 0.2 s) of timed calls.
//
//   gemmserve-bench --threads=2 --benchmark_repetitions=3
//       --benchmark_out=run.json --benchmark_out_format=json
//   /usr/bin/python3 scripts/performance_report.py run.json
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "benchmark/benchmark.h"
#include "bench/bench_harness.h"
#include "bench/bench_inputs.h"
#include "bench/ggml_baseline.h"
#include "bench/grouped_matmul_baselines.h"
#include "bench/moe_layer_bench.h"
#ifdef GEMMSERVE_HAVE_ONEDNN
#include "bench/onednn_baseline.h"
#endif
#include "bench/row_check.h"
#include "server/ops/kernels/int8_dot.h"
#include "server/ops/kernels/kernel_set.h"
#include "server/common/status_macros.h"
#include "server/ops/grouped_matmul.h"
#include "server/ops/packed_weights.h"
#include "server/ops/quantized_weights.h"
#include "server/tensor/half.h"
#include "server/process/compute_environment.h"
#include "server/ops/kernels/gemm.h"
#include "server/ops/kernels/reference_gemm.h"
#include "server/ops/matmul.h"
#include "server/tensor/datatype.h"
#include "server/tensor/tensor.h"

namespace gemmserve {
namespace {

int g_threads = 1;
int g_wrong_results = 0;  // cases whose check failed: the exit status says so
int g_failed_cases = 0;   // cases that could not run (an error): the exit status says so too

// A case that cannot run because something failed (memory, a kernel's
// status): reported by the library like a skip, and counted so that the
// process exits non-zero instead of passing with cases that never ran.
void FailCase(benchmark::State& state, const std::string& why) {
  ++g_failed_cases;
  state.SkipWithError(why.c_str());
}

constexpr double kDefaultMinTimeSeconds = 0.2;
// onnx_decomposition materialises [M*S, K, N]; beyond this it is not run.
constexpr int64_t kOnnxMaterialisedLimitBytes = int64_t{4} << 30;
constexpr int64_t kColdWeightsMaxTokens = 64;
// Several times any last-level cache of the machines this runs on.
constexpr int64_t kReadBandwidthBytes = int64_t{1} << 30;

struct GroupedShape {
  const char* name;
  int64_t k, n, g, s;
};
constexpr GroupedShape kGroupedShapes[] = {
    {"olmoe", 2048, 1024, 64, 8},
    {"mixtral-small", 1024, 3584, 8, 2},
    {"deepseek-lite", 2048, 1408, 64, 6},
};
constexpr int64_t kTokenCounts[] = {1, 4, 16, 64, 256, 1024, 4096};
constexpr DataType kGroupedTypes[] = {DataType::kFP32, DataType::kFP64, DataType::kFP16,
                                      DataType::kBF16};
constexpr DataType kMatMulTypes[] = {DataType::kFP32,   DataType::kFP64,  DataType::kFP16,
                                     DataType::kBF16,   DataType::kINT32, DataType::kINT64,
                                     DataType::kUINT32, DataType::kUINT64};
constexpr int64_t kSquareSizes[] = {64, 256, 512, 1024, 2048};
// The naive triple loop is O(n^3) at a few ns per step: n = 1024 alone would
// take seconds per call.
constexpr int64_t kNaiveMaxSize = 512;

// kResident: the fused kernel on weights packed once (PackedWeights), as a
// resident model runs it; where the type has no panels, as kFused. kOneDnn:
// the same resident model on oneDNN's matmul (onednn_baseline.h): weights
// reordered once, primitives made at set-up, experts run one after another.
// kResidentInt8A8 / kResidentInt4A8: those weights with accuracy_level 4
// (issue 42): 8-bit activations and integer dot products, the weights
// repacked at load where the AVX512-VNNI kernel runs; checked against the
// exact path on the same weights within the setting's error (3e-2 of the
// largest output).
// kResidentInt8 / kResidentInt4: the same weights kept quantized (issue 17),
// symmetric INT8 or INT4 in blocks of kBenchQuantBlock rows of K with one
// scale per (block, column), dequantized in registers by the fused kernel;
// checked against their own dequantized weights.
enum class GroupedImpl {
  kFused,
  kResident,
  kResidentInt8,
  kResidentInt4,
  kResidentInt8A8,
  kResidentInt4A8,
  kOneDnn,
  kGgml,
  kGgmlQ8_0,
  kGgmlQ4_0,
  kPerGroupLoop,
  kOnnxDecomposition
};
constexpr int64_t kBenchQuantBlock = 32;
// The ggml cases' largest M: ggml's F32 experts took 112 ms a call at olmoe
// M = 256 (issue 42's table), and the comparison stops there.
constexpr int64_t kGgmlMaxTokens = 256;
// llama.cpp's libraries (--ggml_dir or GEMMSERVE_GGML_DIR): null where not
// given or not loadable, and then no ggml case is registered.
const GgmlLibrary* g_ggml = nullptr;

#ifdef GEMMSERVE_HAVE_ONEDNN
constexpr bool kHaveOneDnn = true;
#else
constexpr bool kHaveOneDnn = false;
#endif

const char* ImplLabel(GroupedImpl impl) {
  switch (impl) {
    case GroupedImpl::kFused: return "fused";
    case GroupedImpl::kResident: return "resident";
    case GroupedImpl::kResidentInt8: return "resident_int8";
    case GroupedImpl::kResidentInt4: return "resident_int4";
    case GroupedImpl::kResidentInt8A8: return "resident_int8_a8";
    case GroupedImpl::kResidentInt4A8: return "resident_int4_a8";
    case GroupedImpl::kOneDnn: return "onednn";
    case GroupedImpl::kGgml: return "ggml";
    case GroupedImpl::kGgmlQ8_0: return "ggml_q8_0";
    case GroupedImpl::kGgmlQ4_0: return "ggml_q4_0";
    case GroupedImpl::kPerGroupLoop: return "per_group_loop";
    case GroupedImpl::kOnnxDecomposition: return "onnx_decomposition";
  }
  return "?";
}

std::string TypeLabel(DataType type) { return absl::AsciiStrToLower(DataTypeName(type)); }

// ---------------------------------------------------------------------------
// Memory kept between calls. Google Benchmark calls a case's function once per
// repetition and again while it searches for an iteration count, and all the
// cases of one (datatype, shape) share their weights, so inputs live here
// rather than in the function. A slot keeps the last value built under a key
// and frees it before building another: peak memory is one value per slot.

template <typename T>
class Slot {
 public:
  // `make` returns absl::StatusOr<T>.
  template <typename Make>
  absl::StatusOr<T*> Get(const std::string& key, Make make) {
    if (value_.has_value() && key == key_) return &*value_;
    Clear();
    absl::StatusOr<T> made = make();
    if (!made.ok()) return made.status();
    value_.emplace(*std::move(made));
    key_ = key;
    return &*value_;
  }
  void Clear() {
    value_.reset();
    key_.clear();
  }
  const std::string& key() const { return key_; }

 private:
  std::string key_;
  std::optional<T> value_;
};

// Weights quantized for the quantized cases, and the weights they stand for
// (DequantizeLinear's result in the value type) for the row check.
struct QuantizedBenchWeights {
  QuantizedWeights quantized;
  Tensor dequantized;
};

float ValueAt(const Tensor& t, int64_t i) {
  switch (t.type()) {
    case DataType::kBF16: return BFloat16ToFloat(t.data<uint16_t>()[i]);
    case DataType::kFP16: return HalfToFloat(t.data<uint16_t>()[i]);
    default: return t.data<float>()[i];
  }
}

absl::StatusOr<QuantizedBenchWeights> QuantizeForBench(const Tensor& w, QuantizedType type) {
  const int64_t g = w.shape()[0], k = w.shape()[1], n = w.shape()[2];
  const int64_t blocks = (k + kBenchQuantBlock - 1) / kBenchQuantBlock;
  const float qmax = type == QuantizedType::kInt8 ? 127.0f : 7.0f;
  std::vector<float> scale(static_cast<size_t>(g * blocks * n));
  for (int64_t e = 0; e < g * k * n; ++e) {
    const int64_t grp = e / (k * n), r = (e / n) % k, j = e % n;
    float& sc = scale[static_cast<size_t>((grp * blocks + r / kBenchQuantBlock) * n + j)];
    sc = std::max(sc, std::abs(ValueAt(w, e)) / qmax);
  }
  for (float& sc : scale) {
    if (sc == 0) sc = 1;
  }
  const int64_t bytes = QuantizedBytes(type, g * k * n);
  GEMMSERVE_ASSIGN_OR_RETURN(AlignedBuffer data, AlignedBuffer::Allocate(bytes));
  auto* q = static_cast<uint8_t*>(data.data());
  std::memset(q, 0, static_cast<size_t>(bytes));
  GEMMSERVE_ASSIGN_OR_RETURN(Tensor deq, Tensor::Allocate(w.type(), w.shape()));
  for (int64_t e = 0; e < g * k * n; ++e) {
    const int64_t grp = e / (k * n), r = (e / n) % k, j = e % n;
    const float sc = scale[static_cast<size_t>((grp * blocks + r / kBenchQuantBlock) * n + j)];
    const float v = std::min(qmax, std::max(-qmax - 1, std::nearbyint(ValueAt(w, e) / sc)));
    const auto iv = static_cast<int32_t>(v);
    if (type == QuantizedType::kInt8) {
      q[e] = static_cast<uint8_t>(static_cast<int8_t>(iv));
    } else {
      q[e / 2] |= static_cast<uint8_t>((iv & 15) << ((e & 1) * 4));
    }
    const float d = v * sc;  // as the kernel computes it, then rounded to the value type
    switch (w.type()) {
      case DataType::kBF16: deq.data<uint16_t>()[e] = FloatToBFloat16(d); break;
      case DataType::kFP16: deq.data<uint16_t>()[e] = FloatToHalf(d); break;
      default: deq.data<float>()[e] = d;
    }
  }
  QuantizedWeights::Layout layout;
  layout.type = type;
  layout.shape = w.shape();
  layout.axis = 1;
  layout.block_size = kBenchQuantBlock;
  layout.scale_shape = {g, blocks, n};
  layout.value_type = w.type();
  GEMMSERVE_ASSIGN_OR_RETURN(QuantizedWeights qw,
                             QuantizedWeights::Make(layout, std::move(data), std::move(scale), {}));
  return QuantizedBenchWeights{std::move(qw), std::move(deq)};
}

struct GroupedCase {
  GroupedMatMulPlan plan;
  Tensor input, indices, output;
  std::vector<int64_t> used_groups;
};

struct MatMulCase {
  MatMulPlan plan;
  Tensor a, b, y;
};

enum class Family { kNone, kLimit, kGrouped, kMatMul, kOther };

struct Cache {
  Slot<Tensor> grouped_weights;
  Slot<PackedWeights> packed_weights;
  Slot<QuantizedBenchWeights> quantized_weights;
#ifdef GEMMSERVE_HAVE_ONEDNN
  Slot<OneDnnGroupedMatMul> onednn_weights;  // reordered once per (datatype, shape)
#endif
  Slot<GgmlGroupedMatMul> ggml_weights[4];  // per GgmlWeights: the types alternate by M
  Slot<GroupedCase> grouped_case;
  OnnxDecompositionScratch onnx_scratch;
  Slot<MatMulCase> matmul_case;
  Slot<AlignedBuffer> read_buffer;
  std::set<std::string> checked;  // cases whose output passed the row check
  Family family = Family::kNone;

  // Frees what the other families hold, so that peak memory is one family's.
  void Enter(Family next) {
    if (next == family) return;
    grouped_weights.Clear();
    packed_weights.Clear();
    quantized_weights.Clear();
#ifdef GEMMSERVE_HAVE_ONEDNN
    onednn_weights.Clear();
#endif
    for (Slot<GgmlGroupedMatMul>& slot : ggml_weights) slot.Clear();
    grouped_case.Clear();
    onnx_scratch = OnnxDecompositionScratch();
    matmul_case.Clear();
    read_buffer.Clear();
    ReleaseMoeLayerCases();
    family = next;
  }
};

Cache& TheCache() {
  static Cache* cache = new Cache;
  return *cache;
}

// Checks the first run of `name` (after poisoning its output, so a kernel that
// writes nothing cannot pass), then times `call`; `before_each` runs untimed
// before every timed call. Returns the wall-clock seconds spent in `call`, or
// nothing if the case was skipped with an error.
//
// The rates are computed from that wall time here: Google Benchmark's own rate
// counters divide by the main thread's CPU time unless UseRealTime(), which
// would append "/real_time" to every name. (The JSON's real_time is wall-clock
// either way; its cpu_time is the main thread's.)
std::optional<double> CheckAndTime(benchmark::State& state, const std::string& name, Tensor* output,
                                   const std::function<absl::Status()>& call,
                                   const std::function<absl::Status()>& check,
                                   const std::function<void()>& before_each = nullptr) {
  Cache& cache = TheCache();
  if (cache.checked.count(name) == 0) {
    std::memset(output->raw_data(), 0xff, static_cast<size_t>(output->byte_size()));  // NaN / -1
    absl::Status status = call();
    if (status.ok()) status = check();
    if (!status.ok()) {
      ++g_wrong_results;
      state.SkipWithError(absl::StrCat("wrong result: ", status.ToString()).c_str());
      return std::nullopt;
    }
    cache.checked.insert(name);
  }
  std::chrono::steady_clock::duration wall{0};
  for (auto _ : state) {
    if (before_each) {
      state.PauseTiming();
      before_each();
      state.ResumeTiming();
    }
    const auto start = std::chrono::steady_clock::now();
    absl::Status status = call();
    wall += std::chrono::steady_clock::now() - start;
    if (!status.ok()) {
      FailCase(state, status.ToString());
      return std::nullopt;
    }
  }
  return std::chrono::duration<double>(wall).count();
}

// counters[key] = per_call * calls / seconds.
void SetRate(benchmark::State& state, const char* key, double per_call, double seconds) {
  state.counters[key] = per_call * static_cast<double>(state.iterations()) / seconds;
}

// ---------------------------------------------------------------------------
// Streaming reads

// The streaming sum must be limited by memory, not by instructions: the
// project builds for baseline x86-64 (SSE2), whose 16-byte loads top out
// near 10 GB/s per core here, against ~15 GB/s with AVX-512 (measured: 1 GiB,
// 2 threads, 18 GB/s SSE2 against 25-28 GB/s AVX-512). So the widest vector
// the CPU has is picked at run time. The vector kernels also read
// kSumStreams parts of their range side by side: the prefetchers then keep
// more lines in flight than for one stream (27-28 against 24-25 GB/s here),
// as a GEMM reading several rows of B at once does.
constexpr int64_t kSumStreams = 8;

float SumFloatsPortable(const float* data, int64_t count) {
  // 16 independent accumulators, one lane each: GCC vectorises this at -O3
  // without -ffast-math.
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    for (int j = 0; j < 16; ++j) lanes[j] += data[i + j];
  }
  float total = 0;
  for (; i < count; ++i) total += data[i];
  for (float lane : lanes) total += lane;
  return total;
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx512f"))) float SumFloatsAvx512(const float* data, int64_t count) {
  const int64_t part = count / kSumStreams / 16 * 16;
  __m512 acc[kSumStreams];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int64_t i = 0; i < part; i += 16) {
    for (int64_t s = 0; s < kSumStreams; ++s) {
      acc[s] = _mm512_add_ps(acc[s], _mm512_loadu_ps(data + s * part + i));
    }
  }
  for (int64_t s = 1; s < kSumStreams; ++s) acc[0] = _mm512_add_ps(acc[0], acc[s]);
  // Not _mm512_reduce_add_ps: GCC 12 warns inside it (-Wuninitialized).
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc[0]);
  float total = 0;
  for (float lane : lanes) total += lane;
  return total + SumFloatsPortable(data + kSumStreams * part, count - kSumStreams * part);
}

__attribute__((target("avx2"))) float SumFloatsAvx2(const float* data, int64_t count) {
  const int64_t part = count / kSumStreams / 8 * 8;
  __m256 acc[kSumStreams];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (int64_t i = 0; i < part; i += 8) {
    for (int64_t s = 0; s < kSumStreams; ++s) {
      acc[s] = _mm256_add_ps(acc[s], _mm256_loadu_ps(data + s * part + i));
    }
  }
  for (int64_t s = 1; s < kSumStreams; ++s) acc[0] = _mm256_add_ps(acc[0], acc[s]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  float total = 0;
  for (float lane : lanes) total += lane;
  return total + SumFloatsPortable(data + kSumStreams * part, count - kSumStreams * part);
}
#endif

struct SumKernel {
  const char* name;
  float (*sum)(const float*, int64_t);
};

SumKernel PickSumKernel() {
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_cpu_supports("avx512f")) return {"avx512f", SumFloatsAvx512};
  if (__builtin_cpu_supports("avx2")) return {"avx2", SumFloatsAvx2};
#endif
  return {"portable", SumFloatsPortable};
}

double ParallelSum(const float* data, int64_t count, int threads) {
  static const SumKernel kernel = PickSumKernel();
  // Chunks of whole cache lines, one per thread; the caller's thread takes
  // the first.
  const int64_t chunk = (count / threads + 15) / 16 * 16;
  std::vector<float> partial(threads, 0.0f);
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) {
    const int64_t begin = std::min(count, t * chunk);
    const int64_t end = std::min(count, begin + chunk);
    workers.emplace_back(
        [&partial, data, t, begin, end] { partial[t] = kernel.sum(data + begin, end - begin); });
  }
  partial[0] = kernel.sum(data, std::min(count, chunk));
  for (std::thread& worker : workers) worker.join();
  double total = 0;
  for (float p : partial) total += p;
  return total;
}

// Writes back and invalidates [data, data + bytes) from every cache level.
// clflushopt, where the CPU has it, pipelines: ~3 ns per line in this VM, as
// fast as reading the lines from memory; clflush, the fallback, is serialised
// (~140 ns per line here). Measured: 16 to 64 MiB of weights read right after
// either stream at ~19 GB/s, against ~35 GB/s when warm.
#if defined(__x86_64__) || defined(__i386__)
bool HasClflushopt() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ebx & (1u << 23)) != 0;
}
__attribute__((target("clflushopt"))) void FlushLinesOpt(const char* p, int64_t bytes) {
  for (int64_t offset = 0; offset < bytes; offset += 64) {
    _mm_clflushopt(const_cast<char*>(p + offset));
  }
  _mm_mfence();
}
void EvictFromCaches(const void* data, int64_t bytes) {
  static const bool has_clflushopt = HasClflushopt();
  const char* p = static_cast<const char*>(data);
  if (has_clflushopt) return FlushLinesOpt(p, bytes);
  for (int64_t offset = 0; offset < bytes; offset += 64) _mm_clflush(p + offset);
  _mm_mfence();
}
#else
void EvictFromCaches(const void*, int64_t) {}  // decode cases run warm here
#endif

// ---------------------------------------------------------------------------
// GroupedMatMul

struct GroupedSpec {
  std::string name;
  GroupedImpl impl;
  DataType type;
  GroupedShape shape;
  int64_t m;
  Routing routing;
};

int64_t OnnxGatheredBytes(const GroupedSpec& spec) {
  return spec.m * spec.shape.s * spec.shape.k * spec.shape.n * DataTypeSize(spec.type);
}

absl::StatusOr<GroupedCase> MakeGroupedCase(const GroupedSpec& spec) {
  const GroupedShape& shape = spec.shape;
  GroupedCase c;
  GEMMSERVE_ASSIGN_OR_RETURN(c.input, RandomTensor(spec.type, {spec.m, shape.k}, /*seed=*/2));
  GEMMSERVE_ASSIGN_OR_RETURN(c.indices,
                             MakeRouting(spec.m, shape.s, shape.g, spec.routing, /*seed=*/3));
  GEMMSERVE_ASSIGN_OR_RETURN(c.plan, PlanGroupedMatMul(c.input.shape(), {shape.g, shape.k, shape.n},
                                                       c.indices.shape(), nullptr));
  GEMMSERVE_RETURN_IF_ERROR(ValidateGroupIndices(c.indices, shape.g));
  GEMMSERVE_ASSIGN_OR_RETURN(c.output, Tensor::Allocate(spec.type, c.plan.output_shape));
  std::vector<bool> used(shape.g, false);
  for (int64_t p = 0; p < c.indices.num_elements(); ++p) used[c.indices.data<int64_t>()[p]] = true;
  for (int64_t group = 0; group < shape.g; ++group) {
    if (used[group]) c.used_groups.push_back(group);
  }
  return c;
}

// What a case's implementation calls, what the row check compares with,
// and what a call reads of each group's weights (which a cold-weights case
// evicts): the row-major tensor unless the implementation has its own copy.
struct GroupedCall {
  std::function<absl::Status()> call;
  std::function<const void*(int64_t)> group_weights;
  int64_t group_bytes = 0;   // read of one group per call
  int64_t expert_bytes = 0;  // of one group with its scales: the memory floor's bytes
  const Tensor* reference_weights = nullptr;
  std::function<absl::Status()> check;  // set: replaces the row check against reference_weights
};

GroupedCall RowMajorCall(const Tensor& w, int64_t expert_bytes) {
  GroupedCall g;
  g.group_weights = [&w, expert_bytes](int64_t group) {
    return static_cast<const void*>(static_cast<const char*>(w.raw_data()) + group * expert_bytes);
  };
  g.group_bytes = g.expert_bytes = expert_bytes;
  g.reference_weights = &w;
  return g;
}

// Resident weights as a resident model holds them: packed at load where the
// type packs, else row-major.
absl::StatusOr<GroupedCall> ResidentCall(const GroupedSpec& spec, Cache& cache, const Tensor& w,
                                         GroupedCase& c, const std::string& weights_key) {
  GroupedCall g = RowMajorCall(w, spec.shape.k * spec.shape.n * DataTypeSize(spec.type));
  if (!PackedWeights::PackedAtLoad(spec.type)) {
    g.call = [&] {
      return RunGroupedMatMul(c.plan, c.input, w, c.indices, nullptr, &c.output, g_threads);
    };
    return g;
  }
  GEMMSERVE_ASSIGN_OR_RETURN(
      PackedWeights * packed,
      cache.packed_weights.Get(weights_key, [&] { return PackedWeights::Pack(w); }));
  const PackedWeights& pw = *packed;
  g.call = [&c, &pw] {
    return RunGroupedMatMul(c.plan, c.input, pw, c.indices, nullptr, &c.output, g_threads);
  };
  // The panels are what it reads (the row-major tensor stays untouched).
  g.group_weights = [&pw](int64_t group) { return pw.group(group); };
  g.group_bytes = pw.bytes() / pw.groups();
  return g;
}

// The case on weights `qw` with accuracy_level 4: 8-bit activations.
absl::Status RunLevel4(GroupedCase& c, const QuantizedWeights& qw) {
  GEMMSERVE_ASSIGN_OR_RETURN(GroupedMatMulWork work,
                             BuildGroupedMatMulWork(c.plan, c.input, qw, c.indices, nullptr,
                                                    &c.output));
  for (GemmProblem& p : work.problems) p.int8_activations = true;
  return RunGemmProblems(work.problems, g_threads);
}

// A level-4 output against the exact path on the same weights: within the
// setting's error, 3e-2 of the largest output (docs/quantized-models.md).
absl::Status CheckAgainstExact(const GroupedCase& c, const QuantizedWeights& qw) {
  GEMMSERVE_ASSIGN_OR_RETURN(Tensor exact, Tensor::Allocate(c.output.type(), c.output.shape()));
  GEMMSERVE_RETURN_IF_ERROR(
      RunGroupedMatMul(c.plan, c.input, qw, c.indices, nullptr, &exact, g_threads));
  double max_ref = 0, max_err = 0;
  for (int64_t i = 0; i < exact.num_elements(); ++i) {
    max_ref = std::max(max_ref, std::fabs(double{ValueAt(exact, i)}));
    max_err = std::max(max_err, std::fabs(double{ValueAt(c.output, i)} - ValueAt(exact, i)));
  }
  if (!(max_err <= 3e-2 * max_ref)) {
    return absl::InternalError(absl::StrCat("accuracy_level 4 differs from the exact path by ",
                                            max_err, " of ", max_ref));
  }
  return absl::OkStatus();
}

// INT8 or INT4 weights kept quantized, checked against their dequantized values.
absl::StatusOr<GroupedCall> QuantizedCall(const GroupedSpec& spec, Cache& cache, const Tensor& w,
                                          GroupedCase& c, const std::string& weights_key) {
  const bool a8 =
      spec.impl == GroupedImpl::kResidentInt8A8 || spec.impl == GroupedImpl::kResidentInt4A8;
  const QuantizedType qt = spec.impl == GroupedImpl::kResidentInt8 ||
                                   spec.impl == GroupedImpl::kResidentInt8A8
                               ? QuantizedType::kInt8
                               : QuantizedType::kInt4;
  // One quantized copy for both levels (the level-4 cases follow theirs).
  GEMMSERVE_ASSIGN_OR_RETURN(
      QuantizedBenchWeights * quantized,
      cache.quantized_weights.Get(absl::StrCat(weights_key, "/", QuantizedBytes(qt, 2)),
                                  [&] { return QuantizeForBench(w, qt); }));
  if (a8) {
    GEMMSERVE_RETURN_IF_ERROR(quantized->quantized.PackForInt8Activations().status());
  }
  const QuantizedWeights& qw = quantized->quantized;
  GroupedCall g;
  g.reference_weights = &quantized->dequantized;
  g.call = [&c, &qw] {
    return RunGroupedMatMul(c.plan, c.input, qw, c.indices, nullptr, &c.output, g_threads);
  };
  // The integers of the group and its scales are what a call reads (the
  // level-4 copy where it was made).
  g.group_weights = [&qw, a8](int64_t group) {
    const QuantizedMatrix& m = qw.group(group);
    if (a8 && m.int8_packed != nullptr) return static_cast<const void*>(m.int8_packed);
    return static_cast<const void*>(m.data + QuantizedBytes(m.type, m.first));
  };
  g.group_bytes = QuantizedBytes(qt, spec.shape.k * spec.shape.n);
  g.expert_bytes = qw.group_bytes();
  if (a8) {
    g.call = [&c, &qw] { return RunLevel4(c, qw); };
    g.check = [&c, &qw] { return CheckAgainstExact(c, qw); };
    if (qw.group(0).int8_packed != nullptr) {
      g.group_bytes = Int8PackedBytes(qw.group(0), Int8ActivationBlock(qw.group(0)));
    }
  }
  return g;
}

// oneDNN's matmul over each expert's weights, reordered once into its layout.
absl::StatusOr<GroupedCall> OneDnnCall(const GroupedSpec& spec, Cache& cache, const Tensor& w,
                                       GroupedCase& c, const std::string& weights_key) {
  GroupedCall g = RowMajorCall(w, spec.shape.k * spec.shape.n * DataTypeSize(spec.type));
#ifdef GEMMSERVE_HAVE_ONEDNN
  GEMMSERVE_ASSIGN_OR_RETURN(
      OneDnnGroupedMatMul * onednn,
      cache.onednn_weights.Get(weights_key,
                               [&] { return OneDnnGroupedMatMul::Create(w, g_threads); }));
  GEMMSERVE_RETURN_IF_ERROR(onednn->Prepare(c.plan, c.indices));
  g.call = [&c, onednn] { return onednn->Run(c.plan, c.input, c.indices, &c.output); };
  g.group_weights = [onednn](int64_t group) { return onednn->group_weights(group); };
  g.group_bytes = onednn->group_bytes();
  return g;
#else
  (void)cache, (void)c, (void)weights_key, (void)g;
  return absl::UnavailableError("not built with oneDNN");
#endif
}

GgmlWeights GgmlTypeOf(const GroupedSpec& spec) {
  switch (spec.impl) {
    case GroupedImpl::kGgmlQ8_0: return GgmlWeights::kQ8_0;
    case GroupedImpl::kGgmlQ4_0: return GgmlWeights::kQ4_0;
    default: return spec.type == DataType::kBF16 ? GgmlWeights::kBF16 : GgmlWeights::kF32;
  }
}

// ggml's output on sampled tokens against the float64 product of the input
// and ggml's own weights (dequantized by ggml), within the error of what ggml
// does to the activations: none for F32, BF16 rounding (and the BF16 result)
// for BF16, Q8_0 blocks for Q8_0 and Q4_0 experts.
absl::Status CheckGgml(const GroupedCase& c, const Tensor& w, const GgmlGroupedMatMul& ggml,
                       GgmlWeights type) {
  const double tolerance = type == GgmlWeights::kF32    ? 1e-4
                           : type == GgmlWeights::kBF16 ? 1e-2
                                                        : 3e-2;
  const int64_t k = c.plan.k, n = c.plan.n, s = c.plan.s;
  std::map<int64_t, Tensor> experts;
  double max_ref = 0, max_err = 0;
  for (int64_t token : {int64_t{0}, c.plan.m / 2, c.plan.m - 1}) {
    for (int64_t slot = 0; slot < s; ++slot) {
      const int64_t g = c.indices.data<int64_t>()[token * s + slot];
      if (experts.count(g) == 0) {
        GEMMSERVE_ASSIGN_OR_RETURN(experts[g], ggml.GroupAsFloat(w, g));
      }
      const float* wf = experts[g].data<float>();
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0;
        for (int64_t t = 0; t < k; ++t)
          ref += double{ValueAt(c.input, token * k + t)} * wf[t * n + j];
        max_ref = std::max(max_ref, std::fabs(ref));
        max_err = std::max(max_err, std::fabs(ValueAt(c.output, (token * s + slot) * n + j) - ref));
      }
    }
  }
  if (!(max_err <= tolerance * max_ref)) {
    return absl::InternalError(absl::StrCat("ggml ", GgmlWeightsName(type), " differs from its ",
                                            "weights' product by ", max_err, " of ", max_ref));
  }
  return absl::OkStatus();
}

// ggml_mul_mat_id over the experts converted once to the case's ggml type.
absl::StatusOr<GroupedCall> GgmlCall(const GroupedSpec& spec, Cache& cache, const Tensor& w,
                                     GroupedCase& c, const std::string& weights_key) {
  const GgmlWeights type = GgmlTypeOf(spec);
  GEMMSERVE_ASSIGN_OR_RETURN(GgmlGroupedMatMul * ggml,
                             cache.ggml_weights[static_cast<int>(type)].Get(weights_key, [&] {
                               return GgmlGroupedMatMul::Create(*g_ggml, w, type, g_threads);
                             }));
  GEMMSERVE_RETURN_IF_ERROR(ggml->Prepare(c.plan, c.indices));
  GroupedCall g;
  g.call = [&c, ggml] { return ggml->Run(c.input, &c.output); };
  g.check = [&c, &w, ggml, type] { return CheckGgml(c, w, *ggml, type); };
  g.group_weights = [ggml](int64_t group) { return ggml->group_weights(group); };
  g.group_bytes = g.expert_bytes = ggml->group_bytes();  // its blocks' FP16 scales included
  return g;
}

// The case's implementation bound to its weights and data.
absl::StatusOr<GroupedCall> BindGrouped(const GroupedSpec& spec, Cache& cache, const Tensor& w,
                                        GroupedCase& c, const std::string& weights_key) {
  const int64_t expert_bytes = spec.shape.k * spec.shape.n * DataTypeSize(spec.type);
  GroupedCall g = RowMajorCall(w, expert_bytes);
  switch (spec.impl) {
    case GroupedImpl::kFused:
      g.call = [&] {
        return RunGroupedMatMul(c.plan, c.input, w, c.indices, nullptr, &c.output, g_threads);
      };
      return g;
    case GroupedImpl::kResident: return ResidentCall(spec, cache, w, c, weights_key);
    case GroupedImpl::kResidentInt8:
    case GroupedImpl::kResidentInt4:
    case GroupedImpl::kResidentInt8A8:
    case GroupedImpl::kResidentInt4A8: return QuantizedCall(spec, cache, w, c, weights_key);
    case GroupedImpl::kOneDnn: return OneDnnCall(spec, cache, w, c, weights_key);
    case GroupedImpl::kGgml:
    case GroupedImpl::kGgmlQ8_0:
    case GroupedImpl::kGgmlQ4_0: return GgmlCall(spec, cache, w, c, weights_key);
    case GroupedImpl::kPerGroupLoop:
      g.call = [&] { return RunPerGroupLoop(c.plan, c.input, w, c.indices, &c.output, g_threads); };
      return g;
    case GroupedImpl::kOnnxDecomposition:
      g.call = [&] {
        return RunOnnxDecomposition(c.plan, c.input, w, c.indices, &cache.onnx_scratch, &c.output,
                                    g_threads);
      };
      return g;
  }
  return absl::InternalError("unknown implementation");
}

void BenchGrouped(benchmark::State& state, const GroupedSpec& spec) {
  Cache& cache = TheCache();
  cache.Enter(Family::kGrouped);
  const GroupedShape& shape = spec.shape;
  if (spec.impl == GroupedImpl::kOnnxDecomposition &&
      OnnxGatheredBytes(spec) > kOnnxMaterialisedLimitBytes) {
    state.SkipWithError(absl::StrCat("not run: onnx_decomposition would materialise ",
                                     static_cast<double>(OnnxGatheredBytes(spec)) / (1 << 30),
                                     " GiB of gathered weights (limit ",
                                     kOnnxMaterialisedLimitBytes >> 30, " GiB)")
                            .c_str());
    return;
  }
  const std::string weights_key = absl::StrCat(TypeLabel(spec.type), "/", shape.name);
  if (cache.grouped_weights.key() != weights_key) {
    cache.onnx_scratch = OnnxDecompositionScratch();  // up to 4 GiB: not for longer than needed
  }
  absl::StatusOr<Tensor*> weights = cache.grouped_weights.Get(weights_key, [&] {
    return RandomTensor(spec.type, {shape.g, shape.k, shape.n}, /*seed=*/1);
  });
  absl::StatusOr<GroupedCase*> data =
      weights.ok() ? cache.grouped_case.Get(absl::StrCat(TypeLabel(spec.type), "/", shape.name,
                                                         "/", static_cast<int>(spec.routing), "/",
                                                         spec.m),
                                            [&] { return MakeGroupedCase(spec); })
                   : weights.status();
  absl::StatusOr<GroupedCall> bound =
      data.ok() ? BindGrouped(spec, cache, **weights, **data, weights_key) : data.status();
  if (!bound.ok()) {
    FailCase(state, bound.status().ToString());
    return;
  }
  GroupedCase& c = **data;
  const GroupedCall& g = *bound;
  std::function<void()> evict;
  if (spec.m <= kColdWeightsMaxTokens) {
    evict = [&] {
      for (int64_t group : c.used_groups) EvictFromCaches(g.group_weights(group), g.group_bytes);
    };
  }
  auto check = [&] {
    if (g.check) return g.check();
    return CheckGroupedMatMulSample(c.plan, c.input, *g.reference_weights, c.indices, c.output);
  };
  const std::optional<double> seconds = CheckAndTime(state, spec.name, &c.output, g.call, check,
                                                     evict);
  if (!seconds) return;
  const double bytes_touched = static_cast<double>(c.used_groups.size() * g.expert_bytes);
  SetRate(state, "GFLOPS", 2e-9 * spec.m * shape.s * shape.k * shape.n, *seconds);
  state.counters["bytes_touched"] = bytes_touched;
  SetRate(state, "GBps_effective", bytes_touched / 1e9, *seconds);
  state.counters["distinct_groups"] = static_cast<double>(c.used_groups.size());
}

// ---------------------------------------------------------------------------
// MatMul and the GEMM limits

enum class MatMulImpl { kFused, kNaive, kBlisLimit };

struct MatMulSpec {
  std::string name;
  MatMulImpl impl;
  DataType type;
  Shape a_shape, b_shape;
};

absl::StatusOr<MatMulCase> MakeMatMulCase(const MatMulSpec& spec) {
  MatMulCase c;
  GEMMSERVE_ASSIGN_OR_RETURN(c.plan, PlanMatMul(spec.a_shape, spec.b_shape));
  GEMMSERVE_ASSIGN_OR_RETURN(c.a, RandomTensor(spec.type, spec.a_shape, /*seed=*/4));
  GEMMSERVE_ASSIGN_OR_RETURN(c.b, RandomTensor(spec.type, spec.b_shape, /*seed=*/5));
  GEMMSERVE_ASSIGN_OR_RETURN(c.y, Tensor::Allocate(spec.type, c.plan.output_shape));
  return c;
}

void BenchMatMul(benchmark::State& state, const MatMulSpec& spec) {
  Cache& cache = TheCache();
  cache.Enter(spec.impl == MatMulImpl::kBlisLimit ? Family::kLimit : Family::kMatMul);
  absl::StatusOr<MatMulCase*> data = cache.matmul_case.Get(
      absl::StrCat(TypeLabel(spec.type), "/", absl::StrJoin(spec.a_shape, "x"), "/",
                   absl::StrJoin(spec.b_shape, "x")),
      [&] { return MakeMatMulCase(spec); });
  if (!data.ok()) {
    FailCase(state, data.status().ToString());
    return;
  }
  MatMulCase& c = **data;
  const MatMulPlan& plan = c.plan;
  std::function<absl::Status()> call;
  switch (spec.impl) {
    case MatMulImpl::kFused:
      call = [&] { return RunMatMul(plan, c.a, c.b, &c.y, g_threads); };
      break;
    case MatMulImpl::kNaive:
      // ReferenceGemm is the plain i-j-k loop (floating types accumulate in
      // double); registered for single matrices only.
      call = [&] {
        ReferenceGemm(spec.type, plan.m, plan.n, plan.k, c.a.raw_data(), plan.k, c.b.raw_data(),
                      plan.n, c.y.raw_data(), plan.n);
        return absl::OkStatus();
      };
      break;
    case MatMulImpl::kBlisLimit:
      call = [&] {
        return GemmRowMajor(spec.type, plan.m, plan.n, plan.k, c.a.raw_data(), plan.k,
                            c.b.raw_data(), plan.n, c.y.raw_data(), plan.n, g_threads);
      };
      break;
  }
  auto check = [&] { return CheckMatMulSample(plan, c.a, c.b, c.y); };
  const std::optional<double> seconds = CheckAndTime(state, spec.name, &c.y, call, check);
  if (!seconds) return;
  SetRate(state, "GFLOPS", 2e-9 * plan.batch_count * plan.m * plan.n * plan.k, *seconds);
}

// ---------------------------------------------------------------------------
// Read bandwidth

void BenchReadBandwidth(benchmark::State& state) {
  Cache& cache = TheCache();
  cache.Enter(Family::kLimit);
  const int64_t count = kReadBandwidthBytes / int64_t{sizeof(float)};
  absl::StatusOr<AlignedBuffer*> buffer =
      cache.read_buffer.Get("read", [&]() -> absl::StatusOr<AlignedBuffer> {
        GEMMSERVE_ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::Allocate(kReadBandwidthBytes));
        std::fill_n(static_cast<float*>(b.data()), count, 1.0f);
        return b;
      });
  if (!buffer.ok()) {
    FailCase(state, buffer.status().ToString());
    return;
  }
  const float* data = static_cast<const float*>((*buffer)->data());
  // Every lane sums at most 2^24 ones, which FP32 holds exactly.
  const double expected = static_cast<double>(count);
  if (ParallelSum(data, count, g_threads) != expected) {
    ++g_wrong_results;
    state.SkipWithError("wrong result: the streaming sum does not add up");
    return;
  }
  std::chrono::steady_clock::duration wall{0};
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    double sum = ParallelSum(data, count, g_threads);
    benchmark::DoNotOptimize(sum);
    wall += std::chrono::steady_clock::now() - start;
  }
  SetRate(state, "GBps", static_cast<double>(kReadBandwidthBytes) / 1e9,
          std::chrono::duration<double>(wall).count());
}

// ---------------------------------------------------------------------------
// Registration

// The limits are measured at checkpoints: before the first group of cases
// and after every group (a shape and datatype of GroupedMatMul, a datatype of
// MatMul), so each case is judged against the limits measured just before
// and just after it (the machines are shared: sgemm was seen at 330 and 34
// GFLOP/s within an hour). Every case records the checkpoint before its group
// in the counter "limits_checkpoint"; checkpoint 0's limits keep their plain
// names (Limit/sgemm/2048), later ones add "/checkpoint:C".
int g_checkpoint = 0;

benchmark::internal::Benchmark* Register(const std::string& name,
                                         std::function<void(benchmark::State&)> fn) {
  const int checkpoint = g_checkpoint;
  auto with_checkpoint = [fn = std::move(fn), checkpoint](benchmark::State& state) {
    fn(state);
    state.counters["limits_checkpoint"] = checkpoint;
  };
  return benchmark::RegisterBenchmark(name.c_str(), std::move(with_checkpoint))
      ->Unit(benchmark::kMillisecond);
}

std::string LimitName(const char* base, int checkpoint) {
  return checkpoint == 0 ? std::string(base) : absl::StrCat(base, "/checkpoint:", checkpoint);
}

// The limits at the next checkpoint: read bandwidth, sgemm and dgemm.
void RegisterLimits() {
  const int checkpoint = g_checkpoint;
  Register(LimitName("Limit/read_bandwidth", checkpoint), BenchReadBandwidth);
  for (DataType type : {DataType::kFP32, DataType::kFP64}) {
    MatMulSpec spec{
        LimitName(type == DataType::kFP32 ? "Limit/sgemm/2048" : "Limit/dgemm/2048", checkpoint),
        MatMulImpl::kBlisLimit,
        type,
        {2048, 2048},
        {2048, 2048}};
    Register(spec.name, [spec](benchmark::State& state) { BenchMatMul(state, spec); });
  }
}

// Ends a group of cases: the limits after it, which the next group also
// starts from.
void EndGroup() {
  ++g_checkpoint;
  RegisterLimits();
}

void RegisterGrouped(GroupedImpl impl, DataType type, const GroupedShape& shape, int64_t m,
                     Routing routing) {
  GroupedSpec spec{absl::StrCat("GroupedMatMul/", ImplLabel(impl), "/", TypeLabel(type), "/",
                                shape.name, routing == Routing::kSkewed ? "-skewed" : "", "/", m),
                   impl,
                   type,
                   shape,
                   m,
                   routing};
  // No per-case settings (Iterations, MinTime, UseRealTime): each would add a
  // suffix such as "/iterations:1" to the name. A call longer than the
  // minimum time runs once per repetition anyway.
  Register(spec.name, [spec](benchmark::State& state) { BenchGrouped(state, spec); });
}

void RegisterMatMul(MatMulImpl impl, DataType type, const std::string& label, Shape a_shape,
                    Shape b_shape) {
  const char* impl_label = impl == MatMulImpl::kNaive ? "naive" : "fused";
  MatMulSpec spec{absl::StrCat("MatMul/", impl_label, "/", TypeLabel(type), "/", label), impl, type,
                  std::move(a_shape), std::move(b_shape)};
  Register(spec.name, [spec](benchmark::State& state) { BenchMatMul(state, spec); });
}

void RegisterAll() {
  // Limits first, so that every later figure has them beside it in the output.
  RegisterLimits();

  // The implementations of one case run one after the other, so that their
  // ratios see the same machine state.
  // oneDNN beside resident, for the types it runs (where built with it).
  auto with_onednn = [](DataType type) {
    return kHaveOneDnn && (type == DataType::kFP32 || type == DataType::kBF16);
  };
  // ggml where loaded: F32 and BF16 experts, Q8_0 and Q4_0 of FP32 values.
  auto with_ggml = [](GroupedImpl impl, DataType type, int64_t m) {
    if (impl != GroupedImpl::kGgml && impl != GroupedImpl::kGgmlQ8_0 &&
        impl != GroupedImpl::kGgmlQ4_0) {
      return true;
    }
    if (g_ggml == nullptr || m > kGgmlMaxTokens) return false;
    return impl == GroupedImpl::kGgml ? type == DataType::kFP32 || type == DataType::kBF16
                                      : type == DataType::kFP32;
  };
  const GroupedImpl impls[] = {
      GroupedImpl::kFused,          GroupedImpl::kResident,     GroupedImpl::kResidentInt8,
      GroupedImpl::kResidentInt8A8, GroupedImpl::kResidentInt4, GroupedImpl::kResidentInt4A8,
      GroupedImpl::kOneDnn,         GroupedImpl::kGgml,         GroupedImpl::kGgmlQ8_0,
      GroupedImpl::kGgmlQ4_0,       GroupedImpl::kPerGroupLoop, GroupedImpl::kOnnxDecomposition};
  for (const GroupedShape& shape : kGroupedShapes) {
    for (DataType type : kGroupedTypes) {
      for (int64_t m : kTokenCounts) {
        for (GroupedImpl impl : impls) {
          if (impl == GroupedImpl::kOneDnn && !with_onednn(type)) continue;
          if (!with_ggml(impl, type, m)) continue;
          const bool quantized =
              impl == GroupedImpl::kResidentInt8 || impl == GroupedImpl::kResidentInt4 ||
              impl == GroupedImpl::kResidentInt8A8 || impl == GroupedImpl::kResidentInt4A8;
          if (quantized && type == DataType::kFP64) continue;  // no FP64 scales in ONNX
          RegisterGrouped(impl, type, shape, m, Routing::kUniform);
        }
      }
      EndGroup();
    }
    for (int64_t m : kTokenCounts) {
      for (GroupedImpl impl : {GroupedImpl::kFused, GroupedImpl::kResident, GroupedImpl::kOneDnn,
                               GroupedImpl::kPerGroupLoop}) {
        if (impl == GroupedImpl::kOneDnn && !with_onednn(DataType::kFP32)) continue;
        RegisterGrouped(impl, DataType::kFP32, shape, m, Routing::kSkewed);
      }
    }
    EndGroup();
  }

  for (DataType type : kMatMulTypes) {
    for (int64_t n : kSquareSizes) {
      RegisterMatMul(MatMulImpl::kFused, type, absl::StrCat(n), {n, n}, {n, n});
      if (n <= kNaiveMaxSize)
        RegisterMatMul(MatMulImpl::kNaive, type, absl::StrCat(n), {n, n}, {n, n});
    }
    EndGroup();
  }
  struct Batched {
    int64_t b, m, k, n;
  };
  // A prefill-like fold into one big GEMM, and a decode-like thin one.
  for (Batched s : {Batched{8, 128, 1024, 1024}, Batched{64, 16, 2048, 2048}}) {
    RegisterMatMul(MatMulImpl::kFused, DataType::kFP32,
                   absl::StrCat("folded-", s.b, "x", s.m, "x", s.k, "x", s.n), {s.b, s.m, s.k},
                   {s.k, s.n});
  }
  // Attention-like batches of independent GEMMs, large and small.
  for (Batched s : {Batched{8, 128, 1024, 1024}, Batched{64, 64, 256, 256}}) {
    RegisterMatMul(MatMulImpl::kFused, DataType::kFP32,
                   absl::StrCat("batched-", s.b, "x", s.m, "x", s.k, "x", s.n), {s.b, s.m, s.k},
                   {s.b, s.k, s.n});
  }
  EndGroup();
  RegisterMoeLayerCases();
}

// ---------------------------------------------------------------------------
// Machine description and flags

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Distinct (package, core) pairs among the CPUs this process may run on.
int PhysicalCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    return std::max(1u, std::thread::hardware_concurrency());
  }
  std::set<std::string> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    const std::string topology = absl::StrCat("/sys/devices/system/cpu/cpu", cpu, "/topology/");
    const std::string package = ReadFirstLine(topology + "physical_package_id");
    const std::string core = ReadFirstLine(topology + "core_id");
    cores.insert(package.empty() || core.empty() ? absl::StrCat("cpu", cpu)
                                                 : absl::StrCat(package, "/", core));
  }
  return std::max<int>(1, static_cast<int>(cores.size()));
}

// "model name" and the SIMD features that decide which kernels can be fast.
void AddCpuContext() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(in, line) && (model.empty() || flags.empty())) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key(absl::StripAsciiWhitespace(line.substr(0, colon)));
    const std::string value(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    if (key == "model name" && model.empty()) model = value;
    if (key == "flags" && flags.empty()) flags = " " + value + " ";
  }
  std::vector<std::string> simd;
  for (const char* feature :
       {"avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile"}) {
    if (absl::StrContains(flags, absl::StrCat(" ", feature, " "))) simd.push_back(feature);
  }
  benchmark::AddCustomContext("cpu_model", model.empty() ? "unknown" : model);
  benchmark::AddCustomContext("cpu_simd", absl::StrJoin(simd, " "));
}

// Loads llama.cpp's libraries from `dir` (none: the ggml cases are not
// registered) and says in the context which ran, or why none.
void AddGgmlContext(const std::string& dir) {
  if (dir.empty()) {
    benchmark::AddCustomContext("ggml", "not run: no --ggml_dir (bench/ggml/install.sh)");
    return;
  }
  absl::StatusOr<const GgmlLibrary*> lib = GgmlLibrary::Load(dir);
  if (!lib.ok()) {
    std::fprintf(stderr, "gemmserve-bench: the ggml cases are skipped: %s\n",
                 lib.status().ToString().c_str());
    benchmark::AddCustomContext("ggml", absl::StrCat("not run: ", lib.status().message()));
    return;
  }
  g_ggml = *lib;
  benchmark::AddCustomContext(
      "ggml", absl::StrCat("ggml ", g_ggml->version(), ", CPU backend ", g_ggml->cpu_variant(),
                           g_ggml->has_repack() ? ", Q4_0 repacked (CPU_REPACK)"
                                                : ", no repack buffer: Q4_0 plain"));
}

void PrintHelp() {
  std::printf(
      "gemmserve-bench [--threads=N] [--ggml_dir=DIR] [Google Benchmark flags]\n"
      "  --threads=N  threads for every kernel call (default: physical cores, here %d)\n"
      "  --ggml_dir=DIR  llama.cpp's libraries for the ggml cases (bench/ggml/install.sh;\n"
      "               default: $GEMMSERVE_GGML_DIR)\n"
      "  --benchmark_min_time defaults to %g s here\n\n",
      PhysicalCores(), kDefaultMinTimeSeconds);
  benchmark::PrintDefaultHelp();
}

}  // namespace

namespace bench {  // bench_harness.h, for the families in their own files

int Threads() { return g_threads; }
void FailCase(benchmark::State& state, const std::string& why) { gemmserve::FailCase(state, why); }
std::optional<double> CheckAndTime(benchmark::State& state, const std::string& name, Tensor* output,
                                   const std::function<absl::Status()>& call,
                                   const std::function<absl::Status()>& check,
                                   const std::function<void()>& before_each) {
  return gemmserve::CheckAndTime(state, name, output, call, check, before_each);
}
void SetRate(benchmark::State& state, const char* key, double per_call, double seconds) {
  gemmserve::SetRate(state, key, per_call, seconds);
}
void EvictFromCaches(const void* data, int64_t bytes) { gemmserve::EvictFromCaches(data, bytes); }
void Register(const std::string& name, std::function<void(benchmark::State&)> fn) {
  gemmserve::Register(name, std::move(fn));
}
void EndGroup() { gemmserve::EndGroup(); }
void EnterOwnFamily() { TheCache().Enter(Family::kOther); }

}  // namespace bench
}  // namespace gemmserve

int main(int argc, char** argv) {
  using namespace gemmserve;
  // The server's compute environment (OpenMP passive waits, BLIS's AVX-512
  // kernels where it would not pick them): the kernels and the limits are
  // measured as the server runs them.
  ReexecWithComputeEnvironment(argv);
  const std::string command_line = absl::StrJoin(argv, argv + argc, " ");
  g_threads = PhysicalCores();
  const char* ggml_env = std::getenv("GEMMSERVE_GGML_DIR");
  std::string ggml_dir = ggml_env != nullptr ? ggml_env : "";
  std::string default_min_time = absl::StrCat("--benchmark_min_time=", kDefaultMinTimeSeconds);
  std::vector<char*> args = {argv[0], default_min_time.data()};
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--threads=")) {
      if (!absl::SimpleAtoi(arg, &g_threads) || g_threads < 1) {
        std::fprintf(stderr, "--threads: expected a positive integer, got '%s'\n", argv[i]);
        return 2;
      }
      continue;
    }
    if (absl::ConsumePrefix(&arg, "--ggml_dir=")) {
      ggml_dir = std::string(arg);
      continue;
    }
    args.push_back(argv[i]);  // a later --benchmark_min_time overrides the default
  }
  int args_count = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&args_count, args.data(), PrintHelp);
  if (benchmark::ReportUnrecognizedArguments(args_count, args.data())) return 1;

  benchmark::AddCustomContext("threads", absl::StrCat(g_threads));
  benchmark::AddCustomContext("command_line", command_line);
  benchmark::AddCustomContext("read_bandwidth_kernel", PickSumKernel().name);
  benchmark::AddCustomContext("blis_config", BlisArchitecture());
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  benchmark::AddCustomContext("omp_wait_policy", wait_policy != nullptr ? wait_policy : "unset");
  AddCpuContext();
  benchmark::AddCustomContext("int8_dot_kernel", Kernels().int8_dot_isa);
  AddGgmlContext(ggml_dir);
  RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (g_wrong_results > 0) {
    std::fprintf(stderr, "gemmserve-bench: %d case(s) computed a wrong result\n", g_wrong_results);
  }
  if (g_failed_cases > 0) {
    std::fprintf(stderr, "gemmserve-bench: %d case(s) could not run (an error)\n", g_failed_cases);
  }
  return g_wrong_results > 0 || g_failed_cases > 0 ? 1 : 0;
}
